//! The harness's one error type.
//!
//! Test-facing helpers mostly panic (a test that cannot start its server must fail loudly),
//! but the building blocks return `HarnessError` so callers can decide, e.g. retry on a port
//! collision.

use std::path::PathBuf;

/// Why the harness could not do what a test asked.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The server binary for a flavor is not installed where we looked.
    #[error("{flavor} server binary not found at {path:?}; {hint}")]
    MissingBinary {
        /// Which flavor was asked for.
        flavor: &'static str,
        /// Where we looked.
        path: PathBuf,
        /// How to install it.
        hint: &'static str,
    },
    /// `cargo build` of the module or the CLI failed.
    #[error("the build failed: {0}")]
    Build(String),
    /// The server process exited or never answered PING.
    #[error("server on port {port} did not start: {reason}\n--- last lines of {log:?} ---\n{log_tail}")]
    StartFailed {
        /// Port it was asked to listen on.
        port: u16,
        /// What went wrong.
        reason: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of that log.
        log_tail: String,
    },
    /// Talking to the server failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Filesystem or process error.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// Convenience alias.
pub type Result<T, E = HarnessError> = std::result::Result<T, E>;
