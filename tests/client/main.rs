//! The `fencedlock` client crate against real servers: single-node leases, keep-alive,
//! Redlock and fenced Redlock, secrets, Redis Cluster connections, and a fault-injected
//! fenced-Redlock stress run; waiting on the server instead of polling.

mod support;

mod cluster;
mod fenced_stress;
mod keepalive;
mod redlock;
mod redlock_waiting;
mod secrets;
mod single;
mod waiting;
