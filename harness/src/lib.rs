//! Test harness for fencedlock: starts real `redis-server` / `valkey-server` processes with
//! the freshly built module, on 127.0.0.1, each in its own temp dir; plus replicas,
//! clusters, Sentinels and faults (stop, kill -9, pause, restart).
//!
//! No mocks: a test that cannot start its server fails with the server's log.
//!
//! Owns server processes and their set-up (configs, ports below the ephemeral range, replicas,
//! clusters, slot migration); the wire contract is the protocol crate's. Must not decide what a
//! test asserts beyond the reply shapes it checks, nor talk to any address but 127.0.0.1.
//!
//! ```no_run
//! use fencedlock_protocol::command::ACQUIRE;
//! use harness::Server;
//! let server = Server::start();
//! let fence: i64 = server.cmd(&[ACQUIRE.name, "k", "tok", "1000"]).unwrap();
//! assert!(fence > 0);
//! assert!(server.lock_held("k"));
//! ```
//!
//! Environment:
//! - `FENCEDLOCK_FLAVOR` = `redis` (default) | `valkey`
//! - `FENCEDLOCK_REDIS_SERVER`, `FENCEDLOCK_VALKEY_SERVER`, `FENCEDLOCK_REDIS_CLI`: binaries
//! - `FENCEDLOCK_MODULE`: a prebuilt module `.so` (skips `cargo build`)
//! - `FENCEDLOCK_V1_MODULE`: a prebuilt v1 module `.so` ([`v1_module`])

mod admin;
mod atomic;
mod blocking;
mod cli;
mod cluster;
mod config;
mod digest;
pub mod docs;
mod epoch;
mod error;
mod flavor;
mod history;
mod lock;
mod paths;
mod persistence;
mod ports;
mod postgres;
mod process;
mod replication;
mod reply;
mod reshard;
mod sentinel;
mod server;
mod slots;
mod tls;
mod wait;

pub use atomic::{AtomicMigration, AtomicMove, Ended};
pub use blocking::{acquire_cmd, classify, AcquireReply, BlockedAcquire};
pub use cluster::{Cluster, ClusterBuilder, CLUSTER_TIMEOUT};
pub use config::Directive;
pub use digest::{crc64_jones, seal_dump};
pub use epoch::floor_now;
pub use error::{HarnessError, Result};
pub use fencedlock_protocol::epoch::{epoch_of, floor_at};
pub use fencedlock_protocol::limits::EPOCH_GAP;
pub use fencedlock_protocol::{LockStatus, SemaphoreStatus};
pub use flavor::{Flavor, Release};
pub use history::v1_module;
pub use lock::{decode_status, try_decode_semaphore_status, try_decode_status, wait_released};
pub use paths::{cli_binary, module_path, redis_cli, target_dir, workspace_root};
pub use persistence::PERSIST_TIMEOUT;
pub use ports::{pick_port, PORT_MAX, PORT_MIN};
pub use postgres::{Postgres, PG_PORT_MAX, PG_PORT_MIN, PG_USER};
pub use replication::{wait_replica_online, SYNC_TIMEOUT};
pub use reply::{error_text, parse_info};
pub use reshard::SlotMigration;
pub use sentinel::{Sentinels, DOWN_AFTER, FAILOVER_TIMEOUT, SENTINEL_FAILOVER_LIMIT, SENTINEL_MASTER};
pub use server::{Server, ServerBuilder, ADMIN_USER, START_TIMEOUT};
pub use slots::{is_floor_key, key_in_slot, key_slot, FLOOR_KEY_PREFIX, SLOTS};
pub use tls::{Certs, ClientAuth};
pub use wait::poll;

/// Re-export so tests use the same `redis` version as the harness.
pub use redis;
