//! Faults injected under load: crashes, failover, memory pressure, a frozen worker process,
//! and nodes that hang or answer late.

mod support;

mod crash;
mod failover;
mod memory;
mod pause;
mod slow_nodes;
