//! The `fencedlock` binary as users run it, against real servers started by the harness:
//! `run` (exit codes, signals, lost leases), scripting with `acquire` / `renew` / `release` /
//! `status`, fenced semaphores (`--permits`), usage errors, the habits of flock / etcdctl /
//! consul users, completions and man pages, and (with `--features demo`) the billing demo.

mod support;

mod cluster;
mod confirm;
mod deadline;
mod elect;
// The billing demo is in builds with the `demo` feature only (it brings SQLite).
#[cfg(feature = "demo")]
mod demo;
mod errors;
mod every;
mod functions;
mod habits;
mod help;
mod hold;
mod labels;
mod list;
mod plan;
mod policy;
mod process_tree;
mod run;
mod script;
mod semaphore;
mod sentinel;
mod server_config;
mod tls;
