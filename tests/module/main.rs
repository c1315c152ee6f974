//! The Redis module against real servers (flavor from `FENCEDLOCK_FLAVOR`): its command
//! contract, persistence, reclaim of idle keys, replication, hostile input, ACLs and
//! secrets, and each command's declared key access.

mod support;

mod acquire_all;
mod blocking;
mod commands;
mod hostile_input;
mod key_specs;
mod label;
mod late_handoff;
mod loader_invariants;
mod many_waiters;
mod metrics;
mod persistence;
mod read_write;
mod readme_session;
mod reclaim;
mod replication;
mod security_acl;
mod semaphore;
