//! The `fencedlock` client crate against real servers: single-node leases, keep-alive,
//! Redlock and fenced Redlock, secrets, fenced semaphores, Redis Cluster connections, and a fault-injected
//! fenced-Redlock stress run; waiting on the server instead of polling.

mod support;

mod cluster;
mod confirm;
mod corpus;
mod election;
mod fenced_stress;
mod functions;
mod keepalive;
mod metrics;
mod multi;
mod periodic;
mod policy;
mod read_write;
mod redlock;
mod redlock_waiting;
mod secrets;
mod semaphore;
mod session;
mod single;
mod tls;
mod waiting;
