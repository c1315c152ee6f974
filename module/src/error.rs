//! Every error a user can cause. The `Display` text is the Redis error reply, rendered by the
//! protocol crate (so clients classify it from the same definition); it never holds a token.

use fencedlock_protocol::ReplyError;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{}", self.reply().0.message(self.reply().1))]
pub enum LockError {
    /// A request the protocol's parser refused (`fencedlock_protocol::request`): a bad ttl,
    /// token, fence, timeout, label, permit count or option; `number` is what the reply names
    /// (the maximum ttl for [`ReplyError::TtlTooLarge`], else 0).
    Refused {
        kind: ReplyError,
        number: u64,
    },
    /// A key held with another permit count (the key's count).
    PermitsMismatch {
        permits: u32,
    },
    /// A read lease's holder asked for the write lease.
    UpgradeRefused,
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
    /// A request the protocol's parser refused, as the error the module replies; `max_ttl_ms`
    /// is the bound the parser was given, which a ttl above it is told.
    pub fn refused(kind: ReplyError, max_ttl_ms: u64) -> LockError {
        let number = if kind == ReplyError::TtlTooLarge { max_ttl_ms } else { 0 };
        LockError::Refused { kind, number }
    }

    /// The reply's kind and the number it carries (0 where it has none).
    fn reply(&self) -> (ReplyError, u64) {
        match *self {
            LockError::Refused { kind, number } => (kind, number),
            LockError::PermitsMismatch { permits } => (ReplyError::PermitsMismatch, u64::from(permits)),
            LockError::UpgradeRefused => (ReplyError::UpgradeRefused, 0),
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
            LockError::refused(ReplyError::BadTtl, 100).to_string(),
            "ERR ttl must be a positive integer number of milliseconds"
        );
        assert_eq!(
            LockError::refused(ReplyError::TtlTooLarge, 100).to_string(),
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
