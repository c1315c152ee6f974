//! The module's configs, as `CONFIG GET` / `CONFIG SET` and `redis.conf` name them.

/// A module config: the module registers [`Config::name`], Redis shows it as [`Config::full_name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// The name the module registers (Redis prefixes the module name).
    pub name: &'static str,
    /// The name users type: `fencedlock.<name>`.
    pub full_name: &'static str,
}

macro_rules! config {
    ($(#[$doc:meta])* $ident:ident = $name:literal) => {
        $(#[$doc])*
        pub const $ident: Config = Config { name: $name, full_name: concat!("fencedlock.", $name) };
    };
}

config! {
    /// Longest lease a client may ask for, in ms (default [`crate::limits::DEFAULT_MAX_TTL_MS`]).
    MAX_TTL_MS = "max-ttl-ms"
}
config! {
    /// How long new grants are refused after a start-up load, in ms (default 0): the Redlock
    /// spec's delayed restart, for servers that may lose their last writes in a crash.
    RESTART_GRACE_MS = "restart-grace-ms"
}
config! {
    /// How long a lock key must have been unheld (released, or expired without a release)
    /// before the module deletes it, in ms (default [`crate::limits::DEFAULT_RECLAIM_AFTER_MS`];
    /// 0: as soon as its lease ended). Fences still rise: the server's high-water mark outlives
    /// the key.
    RECLAIM_AFTER_MS = "reclaim-after-ms"
}
