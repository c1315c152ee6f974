//! The `fencedlock` binary as users run it, against real servers started by the harness:
//! `run` (exit codes, signals, lost leases), scripting with `acquire` / `renew` / `release` /
//! `status`, fenced semaphores (`--permits`), usage errors, and the billing demo.

mod support;

mod cluster;
mod confirm;
mod deadline;
mod demo;
mod errors;
mod plan;
mod policy;
mod run;
mod script;
mod semaphore;
mod sentinel;
mod tls;
