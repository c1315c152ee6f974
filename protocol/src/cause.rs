//! What a failed request means, as data: the kinds of the client's `Cause` (why a server did
//! not do what was asked), which of them a later attempt may not meet ([`Kind::retryable`]),
//! which mean the lock service cannot serve requests right now ([`Kind::outage`]), and the
//! reply codes that name each. The Rust client defines `Cause::is_retryable` and
//! `Cause::is_outage` from this table, and [`crate::contract`] renders it as `causes`, so the
//! other clients take the same facts from `contract.json`.
//!
//! Kinds without a code are told apart without one: a timeout, a failed connection or TLS
//! handshake, the sentinels naming no primary.

/// One kind of failure: its name (the client's `Cause` variant), whether it is retried or an
/// outage, and the reply codes that name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    /// The name of the client's `Cause` variant (`NotReady`).
    pub name: &'static str,
    /// Whether a later attempt may not meet it: timeouts and lost connections, a server not
    /// ready yet, a failover or resharding under way. Everything else is final.
    pub retryable: bool,
    /// Whether the lock service cannot serve requests right now (what a declared failure
    /// policy decides): never a misconfiguration, so that failing open cannot turn a missing
    /// module or permission into silently unlocked work.
    pub outage: bool,
    /// The servers' error codes (the reply's first word) that name this kind.
    pub codes: &'static [&'static str],
    /// The codes of the client's own errors that name this kind (no server sends them).
    pub client_codes: &'static [&'static str],
    /// Starts of an `ERR` reply's detail that name this kind: the servers give an unknown
    /// command no code of its own, only a plain `ERR` whose text starts "unknown command".
    pub err_details: &'static [&'static str],
}

const fn kind(name: &'static str, retryable: bool, outage: bool, codes: &'static [&'static str]) -> Kind {
    Kind { name, retryable, outage, codes, client_codes: &[], err_details: &[] }
}

/// The code of the client's error for a server with neither engine. No server sends it; it
/// is made by the client, so it is told apart by code like the servers' own errors.
pub const NO_ENGINE_CODE: &str = "NOENGINE";

/// The code of the client's error for a server without the module where only the module may
/// serve, found before any token is sent.
pub const NO_MODULE_CODE: &str = "NOMODULE";

/// The starts of an unknown command's `ERR` detail (see the module docs).
pub const UNKNOWN_COMMAND: &[&str] = &["unknown command", "unknown subcommand"];

/// No answer in time.
pub const TIMED_OUT: Kind = kind("TimedOut", true, true, &[]);
/// No connection: refused, reset, closed, unresolvable.
pub const UNREACHABLE: Kind = kind("Unreachable", true, true, &[]);
/// Loading its data, in the module's restart grace, or its cluster reconfiguring.
pub const NOT_READY: Kind =
    kind("NotReady", true, true, &["LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN"]);
/// The sentinels name no primary that answers as one.
pub const NO_PRIMARY: Kind = kind("NoPrimary", true, true, &[]);
/// A replica: not, or no longer, the primary.
pub const READ_ONLY: Kind = kind("ReadOnly", true, true, &["READONLY"]);
/// A cluster node that does not own the key: retried while a cluster reshards, but never an
/// outage to fail open on (the cluster is addressed as a single server).
pub const MISROUTED: Kind = kind("Misrouted", true, false, &["MOVED", "ASK"]);
/// Out of memory.
pub const OUT_OF_MEMORY: Kind = kind("OutOfMemory", false, true, &["OOM"]);
/// Busy running a script.
pub const BUSY: Kind = kind("Busy", false, true, &["BUSY"]);
/// Refusing writes for lack of replicas (`min-replicas-to-write`).
pub const NO_REPLICAS: Kind = kind("NoReplicas", false, true, &["NOREPLICAS"]);
/// The fencedlock module is not loaded: an unknown command, or the client's own error where
/// only the module may serve.
pub const NO_MODULE: Kind = Kind {
    client_codes: &[NO_MODULE_CODE],
    err_details: UNKNOWN_COMMAND,
    ..kind("NoModule", false, false, &[])
};
/// The ACL user may not run the command or touch the key.
pub const NO_PERMISSION: Kind = kind("NoPermission", false, false, &["NOPERM"]);
/// Other credentials are wanted (or a failed `AUTH`).
pub const CREDENTIALS: Kind = kind("Credentials", false, false, &["NOAUTH", "WRONGPASS"]);
/// The TLS handshake failed: the certificates do not match.
pub const TLS: Kind = kind("Tls", false, false, &[]);
/// Neither engine: no module, and the Functions library could not be loaded.
pub const NO_ENGINE: Kind = Kind { client_codes: &[NO_ENGINE_CODE], ..kind("NoEngine", false, false, &[]) };
/// Anything else: the module's own refusals, `WRONGTYPE`, a broken reply.
pub const OTHER: Kind = kind("Other", false, false, &[]);

/// Every kind, in the order of the client's `Cause`.
pub const ALL: [Kind; 15] = [
    TIMED_OUT,
    UNREACHABLE,
    NOT_READY,
    NO_PRIMARY,
    READ_ONLY,
    MISROUTED,
    OUT_OF_MEMORY,
    BUSY,
    NO_REPLICAS,
    NO_MODULE,
    NO_PERMISSION,
    CREDENTIALS,
    TLS,
    NO_ENGINE,
    OTHER,
];

/// The kind a server's or the client's error code names, if any (an `ERR` reply is told by
/// its detail: [`UNKNOWN_COMMAND`]).
pub fn by_code(code: &str) -> Option<&'static Kind> {
    ALL.iter().find(|k| k.codes.contains(&code) || k.client_codes.contains(&code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes_are_unique() {
        for (i, a) in ALL.iter().enumerate() {
            for b in &ALL[i + 1..] {
                assert_ne!(a.name, b.name);
                for code in a.codes.iter().chain(a.client_codes) {
                    assert!(!b.codes.contains(code) && !b.client_codes.contains(code), "{code}");
                }
            }
        }
        assert_eq!(by_code("MOVED"), Some(&MISROUTED));
        assert_eq!(by_code(NO_ENGINE_CODE), Some(&NO_ENGINE));
        assert_eq!(by_code("ERR"), None);
    }

    #[test]
    fn outages_are_the_retryable_kinds_but_misrouted_and_a_loaded_server() {
        for k in ALL {
            let loaded = [OUT_OF_MEMORY.name, BUSY.name, NO_REPLICAS.name].contains(&k.name);
            assert_eq!(k.outage, (k.retryable && k != MISROUTED) || loaded, "{}", k.name);
        }
    }
}
