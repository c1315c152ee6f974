//! Every error a user can cause. The `Display` text is the Redis error reply, rendered by the
//! protocol crate (so clients classify it from the same definition); it never holds a token.

use fencedlock_protocol::ReplyError;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{}", self.reply().0.message(self.reply().1))]
pub enum LockError {
    BadTtl,
    TtlTooLarge {
        max_ms: u64,
    },
    BadToken,
    BadFence,
    BadTimeout,
    BadLabel,
    BadPermits,
    Syntax,
    /// A key held with another permit count (the key's count).
    PermitsMismatch {
        permits: u32,
    },
    FencesExhausted,
    RestartGrace {
        remaining_ms: u64,
    },
    /// A waiter's key left this cluster node (deleted, or its slot migrated): ask again.
    WaitInterrupted,
    WrongType,
    InternalCommand,
    BadRecord,
    /// A bug of ours. Replied instead of unwinding into Redis, which would abort the server.
    Internal,
}

impl LockError {
    /// A request the protocol's parser refused (`fencedlock_protocol::request`), as the error
    /// the module replies; `max_ttl_ms` is the bound the parser was given.
    pub fn refused(kind: ReplyError, max_ttl_ms: u64) -> LockError {
        match kind {
            ReplyError::BadTtl => LockError::BadTtl,
            ReplyError::TtlTooLarge => LockError::TtlTooLarge { max_ms: max_ttl_ms },
            ReplyError::BadToken => LockError::BadToken,
            ReplyError::BadTimeout => LockError::BadTimeout,
            ReplyError::BadLabel => LockError::BadLabel,
            ReplyError::BadPermits => LockError::BadPermits,
            ReplyError::Syntax => LockError::Syntax,
            // The parser refuses nothing else: anything more is a bug of ours.
            _ => LockError::Internal,
        }
    }

    /// The reply's kind and the number it carries (0 where it has none).
    fn reply(&self) -> (ReplyError, u64) {
        match *self {
            LockError::BadTtl => (ReplyError::BadTtl, 0),
            LockError::TtlTooLarge { max_ms } => (ReplyError::TtlTooLarge, max_ms),
            LockError::BadToken => (ReplyError::BadToken, 0),
            LockError::BadFence => (ReplyError::BadFence, 0),
            LockError::BadTimeout => (ReplyError::BadTimeout, 0),
            LockError::BadLabel => (ReplyError::BadLabel, 0),
            LockError::BadPermits => (ReplyError::BadPermits, 0),
            LockError::Syntax => (ReplyError::Syntax, 0),
            LockError::PermitsMismatch { permits } => (ReplyError::PermitsMismatch, u64::from(permits)),
            LockError::WaitInterrupted => (ReplyError::WaitInterrupted, 0),
            LockError::FencesExhausted => (ReplyError::FencesExhausted, 0),
            LockError::RestartGrace { remaining_ms } => (ReplyError::RestartGrace, remaining_ms),
            LockError::WrongType => (ReplyError::WrongType, 0),
            LockError::InternalCommand => (ReplyError::InternalCommand, 0),
            LockError::BadRecord => (ReplyError::BadRecord, 0),
            LockError::Internal => (ReplyError::Internal, 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_keep_their_wording() {
        assert_eq!(
            LockError::BadTtl.to_string(),
            "ERR ttl must be a positive integer number of milliseconds"
        );
        assert_eq!(
            LockError::TtlTooLarge { max_ms: 100 }.to_string(),
            "ERR ttl exceeds fencedlock.max-ttl-ms (100)"
        );
        assert_eq!(
            LockError::RestartGrace { remaining_ms: 7 }.to_string(),
            "TRYAGAIN fencedlock restart grace: new grants are refused for another 7 ms"
        );
        assert_eq!(
            LockError::WrongType.to_string(),
            "WRONGTYPE Operation against a key holding the wrong kind of value"
        );
    }
}
