//! Every error a user can cause. The `Display` text is the Redis error reply, so it starts with
//! the error code (`ERR`, `WRONGTYPE`, `TRYAGAIN`) and never contains a token.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LockError {
    #[error("ERR ttl must be a positive integer number of milliseconds")]
    BadTtl,
    #[error("ERR ttl exceeds fencedlock.max-ttl-ms ({max_ms})")]
    TtlTooLarge { max_ms: u64 },
    #[error("ERR token must be 1 to {} bytes", crate::lease::MAX_TOKEN_LEN)]
    BadToken,
    #[error("ERR fence must be an integer from 1 to {}", crate::fence::MAX_FENCE)]
    BadFence,
    #[error("ERR fence space exhausted: no fence above {} can be issued", crate::fence::MAX_FENCE)]
    FencesExhausted,
    #[error("TRYAGAIN fencedlock restart grace: new grants are refused for another {remaining_ms} ms")]
    RestartGrace { remaining_ms: u64 },
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    #[error("ERR FENCEDLOCK.APPLY is internal: only the replication link and AOF loading may send it")]
    InternalCommand,
    #[error("ERR malformed FENCEDLOCK.APPLY record")]
    BadRecord,
    /// A bug of ours. Replied instead of unwinding into Redis, which would abort the server.
    #[error("ERR fencedlock internal error, nothing was changed (see the server log)")]
    Internal,
}
