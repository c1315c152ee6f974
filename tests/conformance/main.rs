//! The conformance suite of the module-less engine (issue 22): the command contract's cases
//! run against the module (the reference) and against the Functions library on a server
//! started as a managed service starts it (no module; the default user may not run MODULE,
//! CONFIG or DEBUG), every reply compared; then the client's locks, waiting, semaphores and
//! elections on that managed server. Run it per server: Redis 7.0 (default), Redis 7.4 and 8.6
//! (`FENCEDLOCK_REDIS_SERVER`), Valkey 9.1 (`FENCEDLOCK_FLAVOR=valkey`).

mod cases;
mod client;
mod contract;
mod differences;
mod engines;
mod export;
mod managed;
mod read_write;
mod sets;
mod table;
mod trust;
