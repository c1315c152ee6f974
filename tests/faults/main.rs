//! Faults injected under load: crashes, failover, epochs across failovers and returning
//! primaries, memory pressure, a million idle lock keys to reclaim, a frozen worker process,
//! and nodes that hang or answer late.

mod support;

mod acquire_all;
mod confirm_failover;
mod crash;
mod election;
mod epochs;
mod failover;
mod functions;
mod handoff;
mod linearizable;
mod memory;
mod pause;
mod read_write;
mod reclaim_scale;
mod returning_primary;
mod semaphore;
mod sentinel_client;
mod silent_minority;
mod slow_nodes;
