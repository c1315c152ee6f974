//! The crate's single error type.

use std::time::Duration;

use fencedlock_protocol::{ReplyError, StatusError};

use crate::quorum::QuorumReport;
use crate::transient::is_transient;

/// Everything that can go wrong when taking, keeping or giving back a lease.
///
/// The variants separate what a caller reacts to differently: somebody else holds the lock
/// ([`Error::Contended`]), a node did not answer in time ([`Error::Timeout`]), a lease we held
/// is gone and the critical section must stop ([`Error::LeaseLost`]), Redlock could not gather
/// a majority ([`Error::QuorumNotReached`]), the server said no for another reason
/// ([`Error::Server`]; [`Error::reply_error`] names the module's refusals by kind), a reply
/// broke the module's contract ([`Error::BadReply`]), or the options make no sense
/// ([`Error::Config`]).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another token holds an unexpired lease on the key.
    #[error("lock {key:?} is held by another owner")]
    Contended {
        /// The lock key.
        key: String,
    },

    /// A node did not answer within the per-node timeout.
    #[error("{operation} on {node} timed out after {after:?}")]
    Timeout {
        /// The node's address.
        node: String,
        /// Which command timed out (`ACQUIRE`, `RENEW`, ...).
        operation: &'static str,
        /// The per-node timeout that ran out.
        after: Duration,
    },

    /// The lease is gone (expired locally, refused by the server, or a renewal failed).
    /// Work protected by it must stop.
    #[error("lease on {key:?} lost: {cause}")]
    LeaseLost {
        /// The lock key.
        key: String,
        /// Why the lease is considered lost.
        cause: LossCause,
    },

    /// Redlock did not obtain a usable majority; the report says how every node voted.
    #[error("quorum not reached: {0}")]
    QuorumNotReached(Box<QuorumReport>),

    /// A node answered with an error or the connection failed.
    #[error("server error from {node}: {source}")]
    Server {
        /// The node's address.
        node: String,
        /// The underlying client or server error.
        #[source]
        source: redis::RedisError,
    },

    /// A node's reply does not have the shape the module's contract gives it (a different
    /// module under the same command name, or a bug): nothing in it can be trusted.
    #[error("unexpected reply from {node}: {source}")]
    BadReply {
        /// The node's address.
        node: String,
        /// What the reply broke.
        #[source]
        source: StatusError,
    },

    /// The configuration or an argument is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// Why a lease is considered lost.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LossCause {
    /// The lease's validity ran out on the client's monotonic clock.
    #[error("validity expired")]
    Expired,
    /// The server (or enough Redlock masters to rule out a majority) no longer holds our token.
    #[error("the server no longer holds our token")]
    Refused,
    /// A renewal failed for another reason (timeout, server error, no majority answered).
    /// The keep-alive treats its first failed renewal as a loss.
    #[error("renewal failed: {0}")]
    RenewFailed(Box<Error>),
    /// The keep-alive task ended without a recorded reason (the runtime shut down).
    #[error("the keep-alive task stopped")]
    KeepAliveStopped,
}

impl Error {
    /// Whether another attempt might succeed: contention, timeouts, missing quorum and
    /// transient server conditions (I/O errors, `TRYAGAIN`, `LOADING`, cluster reconfiguration).
    /// Configuration and argument errors, `WRONGTYPE` and unknown commands are final.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Contended { .. } | Error::Timeout { .. } => true,
            Error::QuorumNotReached(report) => report.could_still_succeed(),
            Error::Server { source, .. } => is_transient(source),
            Error::LeaseLost { .. } | Error::BadReply { .. } | Error::Config(_) => false,
        }
    }

    /// The module's error reply behind an [`Error::Server`], by kind: a bad request, the
    /// restart grace, a key of another type, ... `None` for every other error, including the
    /// server's own refusals (`NOPERM`, an unknown command), which [`redis::ErrorKind`] and
    /// [`redis::RedisError::code`] tell apart.
    pub fn reply_error(&self) -> Option<ReplyError> {
        match self {
            Error::Server { source, .. } => {
                ReplyError::classify(source.code()?, source.detail().unwrap_or_default())
            }
            _ => None,
        }
    }

    /// Whether the error says the lease is lost.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, Error::LeaseLost { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::{ErrorKind, RedisError, ServerErrorKind};

    fn server(kind: ErrorKind, text: &'static str) -> Error {
        Error::Server { node: "n".into(), source: RedisError::from((kind, text)) }
    }

    #[test]
    fn transient_conditions_are_retried_and_final_ones_are_not() {
        assert!(Error::Contended { key: "k".into() }.is_retryable());
        assert!(Error::Timeout { node: "n".into(), operation: "ACQUIRE", after: Duration::from_millis(5) }
            .is_retryable());
        assert!(server(ErrorKind::Io, "reset").is_retryable());
        assert!(server(ErrorKind::Server(ServerErrorKind::TryAgain), "restart grace").is_retryable());
        assert!(server(ErrorKind::Server(ServerErrorKind::BusyLoading), "loading").is_retryable());
        assert!(!server(ErrorKind::Server(ServerErrorKind::ResponseError), "WRONGTYPE").is_retryable());
        assert!(!Error::Config("bad".into()).is_retryable());
        let lost = Error::LeaseLost { key: "k".into(), cause: LossCause::Expired };
        assert!(!lost.is_retryable());
        assert!(lost.is_lease_lost());
        assert_eq!(lost.to_string(), "lease on \"k\" lost: validity expired");
    }

    /// `err` as it arrives from a server that replied `line`.
    fn replied(line: &str) -> Error {
        match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
            Ok(redis::Value::ServerError(e)) => Error::Server { node: "n".into(), source: e.into() },
            other => panic!("not an error reply: {other:?}"),
        }
    }

    #[test]
    fn the_modules_refusals_are_classified_by_kind() {
        for kind in ReplyError::ALL {
            assert_eq!(replied(&kind.message(1500)).reply_error(), Some(kind), "{kind:?}");
        }
        let grace = replied(&ReplyError::RestartGrace.message(1500));
        assert!(grace.is_retryable(), "the restart grace passes");
        assert!(!replied(&ReplyError::BadToken.message(0)).is_retryable());
    }

    #[test]
    fn other_errors_are_not_the_modules() {
        for line in [
            "NOPERM User app has no permissions to run the 'fencedlock.acquire' command",
            "ERR unknown command 'x'",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "READONLY You can't write against a read only replica.",
        ] {
            assert_eq!(replied(line).reply_error(), None, "{line}");
        }
        assert_eq!(server(ErrorKind::Io, "reset").reply_error(), None);
        assert_eq!(Error::Contended { key: "k".into() }.reply_error(), None);
    }
}
