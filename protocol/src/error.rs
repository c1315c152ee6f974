//! The error replies the module sends. The module renders them from here and clients classify
//! them from here, so neither side restates the other's wording.

use crate::command::{BLOCK, LABEL, PERMITS, SHARED, SHARED_PERMITS};
use crate::config::MAX_TTL_MS;
use crate::limits::{MAX_ACQUIRE_KEYS, MAX_BLOCK_MS, MAX_FENCE, MAX_LABEL_LEN, MAX_PERMITS, MAX_TOKEN_LEN};

/// An error reply of the module, by kind. Every one of them changed nothing on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReplyError {
    /// The ttl is not a positive integer number of milliseconds.
    BadTtl,
    /// The ttl is above `fencedlock.max-ttl-ms` (the value: that maximum).
    TtlTooLarge,
    /// The token is empty or longer than [`MAX_TOKEN_LEN`].
    BadToken,
    /// The fence to raise to is not an integer from 1 to [`MAX_FENCE`].
    BadFence,
    /// The `BLOCK` timeout is not an integer from 0 to [`MAX_BLOCK_MS`].
    BadTimeout,
    /// The `LABEL` is empty or longer than [`MAX_LABEL_LEN`].
    BadLabel,
    /// The `PERMITS` count is not an integer from 1 to [`MAX_PERMITS`].
    BadPermits,
    /// `ACQUIREALL`'s `numkeys` is not an integer from 1 to [`MAX_ACQUIRE_KEYS`], fewer keys
    /// follow it, or a key is named twice.
    BadKeys,
    /// An optional argument other than `BLOCK timeout_ms`, `LABEL label`, `PERMITS n` and
    /// `SHARED`, one of them given twice, or `SHARED` with `PERMITS`.
    Syntax,
    /// The key is held with another permit count than the request's (the value: the key's
    /// count, 1 for a mutex, [`SHARED_PERMITS`] for read leases). The count changes only while
    /// nobody holds the key.
    PermitsMismatch,
    /// A read lease's holder asked for the write lease (`ACQUIRE` without `SHARED`): refused,
    /// because two readers upgrading together would wait for each other forever.
    UpgradeRefused,
    /// The server has issued [`MAX_FENCE`]; it can grant no more.
    FencesExhausted,
    /// New grants are refused during the restart grace (the value: ms left). Code `TRYAGAIN`.
    RestartGrace,
    /// A blocked ACQUIRE whose key was deleted on a Redis Cluster node (`DEL`, `FLUSHALL`, or
    /// its slot migrating away): this node may no longer serve the key, so the waiter must ask
    /// again (and be routed to the slot's owner). Nothing was granted. Code `TRYAGAIN`.
    WaitInterrupted,
    /// The key holds another kind of value. Code `WRONGTYPE`.
    WrongType,
    /// A client sent the internal `FENCEDLOCK.APPLY`.
    InternalCommand,
    /// A malformed `FENCEDLOCK.APPLY` record (replication link or AOF).
    BadRecord,
    /// A bug in the module, caught before it could change anything or crash the server.
    Internal,
}

impl ReplyError {
    /// Every kind, for tests and exhaustive tables.
    pub const ALL: [ReplyError; 18] = [
        ReplyError::BadTtl,
        ReplyError::TtlTooLarge,
        ReplyError::BadToken,
        ReplyError::BadFence,
        ReplyError::BadTimeout,
        ReplyError::BadLabel,
        ReplyError::BadPermits,
        ReplyError::BadKeys,
        ReplyError::Syntax,
        ReplyError::PermitsMismatch,
        ReplyError::UpgradeRefused,
        ReplyError::FencesExhausted,
        ReplyError::RestartGrace,
        ReplyError::WaitInterrupted,
        ReplyError::WrongType,
        ReplyError::InternalCommand,
        ReplyError::BadRecord,
        ReplyError::Internal,
    ];

    /// The reply's first word: `ERR`, `TRYAGAIN` or `WRONGTYPE`.
    pub const fn code(self) -> &'static str {
        match self {
            ReplyError::RestartGrace | ReplyError::WaitInterrupted => "TRYAGAIN",
            ReplyError::WrongType => "WRONGTYPE",
            _ => "ERR",
        }
    }

    /// The fixed start of the message after the code, which tells the kinds apart.
    pub const fn prefix(self) -> &'static str {
        match self {
            ReplyError::BadTtl => "ttl must be a positive integer",
            ReplyError::TtlTooLarge => "ttl exceeds",
            ReplyError::BadToken => "token must be",
            ReplyError::BadFence => "fence must be",
            ReplyError::BadTimeout => "timeout must be",
            ReplyError::BadLabel => "label must be",
            ReplyError::BadPermits => "permits must be",
            ReplyError::BadKeys => "numkeys must be",
            ReplyError::Syntax => "syntax error",
            ReplyError::PermitsMismatch => "permits mismatch",
            ReplyError::UpgradeRefused => "upgrade refused",
            ReplyError::FencesExhausted => "fence space exhausted",
            ReplyError::RestartGrace => "fencedlock restart grace",
            ReplyError::WaitInterrupted => "fencedlock wait interrupted",
            ReplyError::WrongType => "Operation against a key holding the wrong kind of value",
            ReplyError::InternalCommand => "FENCEDLOCK.APPLY is internal",
            ReplyError::BadRecord => "malformed FENCEDLOCK.APPLY record",
            ReplyError::Internal => "fencedlock internal error",
        }
    }

    /// The whole reply text. `value` fills the kinds that carry a number ([`TtlTooLarge`]:
    /// the maximum ttl in ms; [`RestartGrace`]: the ms left; [`PermitsMismatch`]: the key's
    /// count) and is ignored by the others.
    ///
    /// [`TtlTooLarge`]: ReplyError::TtlTooLarge
    /// [`RestartGrace`]: ReplyError::RestartGrace
    /// [`PermitsMismatch`]: ReplyError::PermitsMismatch
    pub fn message(self, value: u64) -> String {
        let (code, prefix) = (self.code(), self.prefix());
        match self {
            ReplyError::BadTtl => format!("{code} {prefix} number of milliseconds"),
            ReplyError::TtlTooLarge => format!("{code} {prefix} {} ({value})", MAX_TTL_MS.full_name),
            ReplyError::BadToken => format!("{code} {prefix} 1 to {MAX_TOKEN_LEN} bytes"),
            ReplyError::BadFence => format!("{code} {prefix} an integer from 1 to {MAX_FENCE}"),
            ReplyError::BadTimeout => {
                format!("{code} {prefix} an integer number of milliseconds from 0 (no limit) to {MAX_BLOCK_MS}")
            }
            ReplyError::BadLabel => {
                format!("{code} {prefix} 1 to {MAX_LABEL_LEN} bytes (it is public: STATUS shows it)")
            }
            ReplyError::BadPermits => format!("{code} {prefix} an integer from 1 to {MAX_PERMITS}"),
            ReplyError::BadKeys => format!(
                "{code} {prefix} an integer from 1 to {MAX_ACQUIRE_KEYS}, followed by that many distinct keys"
            ),
            ReplyError::Syntax => format!(
                "{code} {prefix}: the options are {BLOCK} timeout_ms, {LABEL} label, and {PERMITS} n or {SHARED}, each at most once"
            ),
            ReplyError::PermitsMismatch if value == u64::from(SHARED_PERMITS) => format!(
                "{code} {prefix}: the key is held {SHARED}; ask with {SHARED} (it changes only while nobody holds the key)"
            ),
            ReplyError::PermitsMismatch => format!(
                "{code} {prefix}: the key is held with {PERMITS} {value}; ask with the same count (it changes only while nobody holds the key)"
            ),
            ReplyError::UpgradeRefused => format!(
                "{code} {prefix}: the token holds the key {SHARED}; release it, then acquire without {SHARED} (a new, higher fence)"
            ),
            ReplyError::WaitInterrupted => format!(
                "{code} {prefix}: the lock key was deleted or its slot moved on this cluster node; nothing was granted, ask again"
            ),
            ReplyError::FencesExhausted => {
                format!("{code} {prefix}: no fence above {MAX_FENCE} can be issued")
            }
            ReplyError::RestartGrace => {
                format!("{code} {prefix}: new grants are refused for another {value} ms")
            }
            ReplyError::WrongType | ReplyError::BadRecord => format!("{code} {prefix}"),
            ReplyError::InternalCommand => {
                format!("{code} {prefix}: only the replication link and AOF loading may send it")
            }
            ReplyError::Internal => format!("{code} {prefix}, nothing was changed (see the server log)"),
        }
    }

    /// The kind of an error reply, from its code and the text after it; `None` for errors the
    /// module does not send (an unknown command, `NOPERM`, `OOM`, ...). `WRONGTYPE` is
    /// recognised by its code alone, whoever sent it.
    pub fn classify(code: &str, detail: &str) -> Option<ReplyError> {
        ReplyError::ALL.into_iter().find(|kind| {
            code == kind.code() && (*kind == ReplyError::WrongType || detail.starts_with(kind.prefix()))
        })
    }

    /// Whether the request itself was wrong (ttl, token, fence, label, permits or keys out of range): sending it
    /// again cannot succeed, and the fix is the caller's.
    pub const fn is_bad_request(self) -> bool {
        matches!(
            self,
            ReplyError::BadTtl
                | ReplyError::TtlTooLarge
                | ReplyError::BadToken
                | ReplyError::BadFence
                | ReplyError::BadTimeout
                | ReplyError::BadLabel
                | ReplyError::BadPermits
                | ReplyError::BadKeys
                | ReplyError::Syntax
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_starts_with_its_code_and_prefix_and_classifies_back() {
        for kind in ReplyError::ALL {
            let text = kind.message(42);
            let (code, detail) = text.split_once(' ').expect("code and detail");
            assert_eq!(code, kind.code());
            assert!(detail.starts_with(kind.prefix()), "{text}");
            assert_eq!(ReplyError::classify(code, detail), Some(kind), "{text}");
            assert!(!text.contains(['\r', '\n']));
        }
    }

    #[test]
    fn messages_carry_their_values() {
        let shared = u64::from(SHARED_PERMITS);
        for (kind, value, message) in [
            (ReplyError::TtlTooLarge, 86_400_000, "ERR ttl exceeds fencedlock.max-ttl-ms (86400000)"),
            (
                ReplyError::RestartGrace,
                1500,
                "TRYAGAIN fencedlock restart grace: new grants are refused for another 1500 ms",
            ),
            (ReplyError::BadToken, 0, "ERR token must be 1 to 512 bytes"),
            (
                ReplyError::PermitsMismatch,
                3,
                "ERR permits mismatch: the key is held with PERMITS 3; ask with the same count (it changes only while nobody holds the key)",
            ),
            (
                ReplyError::PermitsMismatch,
                shared,
                "ERR permits mismatch: the key is held SHARED; ask with SHARED (it changes only while nobody holds the key)",
            ),
            (
                ReplyError::UpgradeRefused,
                0,
                "ERR upgrade refused: the token holds the key SHARED; release it, then acquire without SHARED (a new, higher fence)",
            ),
            (ReplyError::BadLabel, 0, "ERR label must be 1 to 256 bytes (it is public: STATUS shows it)"),
        ] {
            assert_eq!(kind.message(value), message, "{kind:?} of {value}");
        }
    }

    #[test]
    fn foreign_errors_are_not_ours() {
        assert_eq!(ReplyError::classify("ERR", "unknown command 'FENCEDLOCK.ACQUIRE'"), None);
        assert_eq!(ReplyError::classify("NOPERM", "User x has no permissions"), None);
        assert_eq!(ReplyError::classify("TRYAGAIN", "Multiple keys request during rehashing"), None);
        assert_eq!(ReplyError::classify("WRONGTYPE", "anything"), Some(ReplyError::WrongType));
    }
}
