//! The crate's single error type.

use std::time::Duration;

use crate::quorum::QuorumReport;

/// Everything that can go wrong when taking, keeping or giving back a lease.
///
/// The variants separate what a caller reacts to differently: somebody else holds the lock
/// ([`Error::Contended`]), a node did not answer in time ([`Error::Timeout`]), a lease we held
/// is gone and the critical section must stop ([`Error::LeaseLost`]), Redlock could not gather
/// a majority ([`Error::QuorumNotReached`]), the server said no for another reason
/// ([`Error::Server`]), or the options make no sense ([`Error::Config`]).
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
            Error::LeaseLost { .. } | Error::Config(_) => false,
        }
    }

    /// Whether the error says the lease is lost.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, Error::LeaseLost { .. })
    }
}

/// Transient server or connection conditions that a later attempt may not meet.
pub(crate) fn is_transient(err: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    if err.is_io_error() || err.is_connection_dropped() || err.is_timeout() {
        return true;
    }
    matches!(
        err.kind(),
        ErrorKind::Server(
            ServerErrorKind::TryAgain
                | ServerErrorKind::BusyLoading
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ReadOnly
                | ServerErrorKind::Moved
                | ServerErrorKind::Ask
        ) | ErrorKind::ClusterConnectionNotFound
    )
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
}
