//! The crate's single error type.

use std::time::Duration;

use fencedlock_protocol::command::{label_len_ok, permits_ok};
use fencedlock_protocol::key::KeyProblem;
use fencedlock_protocol::limits::{MAX_LABEL_LEN, MAX_PERMITS};
use fencedlock_protocol::periodic::MalformedRecord;
use fencedlock_protocol::{ReplyError, StatusError};

use crate::cause::Cause;
use crate::quorum::QuorumReport;

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

    /// A periodic job's run record (`fencedlock:last-run:{tag}:key`) is not one fencedlock
    /// wrote: whether the job is due cannot be told, so it is not run.
    #[error("the run record of {key:?} on {node} is malformed: {source}")]
    BadRecord {
        /// The node's address.
        node: String,
        /// The job's lock key.
        key: String,
        /// What the record broke.
        #[source]
        source: MalformedRecord,
    },

    /// A grant was not confirmed by enough replicas within the confirm timeout
    /// ([`LockConfigBuilder::confirm_replicas`](crate::LockConfigBuilder::confirm_replicas)):
    /// it was released, not handed out, because a failover could lose it.
    #[error("grant on {node} confirmed by {confirmed} of {wanted} replicas in time; released")]
    NotConfirmed {
        /// The node's address.
        node: String,
        /// Replicas asked for.
        wanted: usize,
        /// Replicas that confirmed in time.
        confirmed: usize,
    },

    /// The configuration or an argument is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// A lock key the clients refuse (empty, blank, or with a control character): nothing was
    /// sent. An unset variable in a crontab line makes an empty key, and every job with one
    /// would share a single lock.
    #[error("invalid lock key {key:?}: {problem}")]
    InvalidKey {
        /// The key as given.
        key: String,
        /// What is wrong with it.
        problem: KeyProblem,
    },

    /// The key is a semaphore or held by readers (several holders at once), which a lock's
    /// status cannot show: [`Node::status`](crate::Node::status) on it. Read it with
    /// [`Node::semaphore_status`](crate::Node::semaphore_status),
    /// [`Semaphore::status`](crate::Semaphore::status) or
    /// [`ReadWriteLock::status`](crate::ReadWriteLock::status).
    #[error("{key:?} on {node} is {}, not a lock", held_as(.permits))]
    Semaphore {
        /// The node's address.
        node: String,
        /// The key.
        key: String,
        /// The key's permit count.
        permits: u32,
    },
}

/// What [`Error::Semaphore`] says a key is held as.
fn held_as(permits: &u32) -> String {
    if *permits == fencedlock_protocol::command::SHARED_PERMITS {
        "held by read leases".to_owned()
    } else {
        format!("a semaphore of {permits} permits")
    }
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
            Error::Contended { .. } | Error::Timeout { .. } | Error::NotConfirmed { .. } => true,
            Error::QuorumNotReached(report) => report.could_still_succeed(),
            Error::Server { source, .. } => Cause::of(source).is_retryable(),
            Error::LeaseLost { .. }
            | Error::BadReply { .. }
            | Error::BadRecord { .. }
            | Error::Config(_)
            | Error::InvalidKey { .. }
            | Error::Semaphore { .. } => false,
        }
    }

    /// Whether the lock service could not answer, as opposed to answering "someone holds it"
    /// ([`Error::Contended`]) or "your request is wrong": a node unreachable or timed out, no
    /// quorum for lack of answers, a server loading, out of memory, in its restart grace or
    /// reconfiguring, a grant not confirmed by replicas. This is the case a declared
    /// [`OnUnavailable`](crate::OnUnavailable) policy decides.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Timeout { .. } | Error::NotConfirmed { .. } => true,
            // A key that moved away while we waited is answered: retry where it lives now.
            Error::Server { .. } if self.reply_error() == Some(ReplyError::WaitInterrupted) => false,
            Error::Server { source, .. } => Cause::of(source).is_outage(),
            // No majority because nodes did not answer, and none that did said another owner
            // holds it. Any refusal counts, not only a majority of them: a round ends as soon
            // as a majority is out of reach, without waiting for the rest, so whether a
            // majority would have refused depends on which answers came first. A refusal is
            // the service answering "held", which fail-open must not override.
            Error::QuorumNotReached(report) => {
                report.refused() == 0 && report.votes.iter().any(|v| v.vote.is_outage())
            }
            Error::Contended { .. }
            | Error::LeaseLost { .. }
            | Error::BadReply { .. }
            | Error::BadRecord { .. }
            | Error::Config(_)
            | Error::InvalidKey { .. }
            | Error::Semaphore { .. } => false,
        }
    }

    /// `Ok` for a key the clients send ([`fencedlock_protocol::key::check`]), else
    /// [`Error::InvalidKey`]: checked before any request.
    pub(crate) fn check_key(key: &str) -> Result<(), Error> {
        fencedlock_protocol::key::check(key)
            .map_err(|problem| Error::InvalidKey { key: key.to_owned(), problem })
    }

    /// `label` as bytes, once [`Error::check_label`] admits it.
    pub(crate) fn checked_label(label: impl Into<Vec<u8>>) -> Result<Vec<u8>, Error> {
        let label = label.into();
        Error::check_label(&label)?;
        Ok(label)
    }

    /// The label rules of the protocol, checked before anything is sent.
    pub(crate) fn check_label(label: &[u8]) -> Result<(), Error> {
        if !label_len_ok(label) {
            return Err(Error::Config(format!(
                "a label must be 1 to {MAX_LABEL_LEN} bytes (it is public: STATUS shows it), got {}",
                label.len()
            )));
        }
        Ok(())
    }

    /// The permit rules of the protocol, checked before anything is sent.
    pub(crate) fn check_permits(permits: u32) -> Result<(), Error> {
        if !permits_ok(u64::from(permits)) {
            return Err(Error::Config(format!("a semaphore has 1 to {MAX_PERMITS} permits, got {permits}")));
        }
        Ok(())
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

    /// What went wrong with the server or the connection to it, for a timeout or a server
    /// error ([`Cause::of`] its source); `None` for every other error. The retry and
    /// unavailability verdicts above are this cause's.
    pub fn cause(&self) -> Option<Cause> {
        match self {
            Error::Timeout { .. } => Some(Cause::TimedOut),
            Error::Server { source, .. } => Some(Cause::of(source)),
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
    use crate::quorum::Vote;
    use redis::{ErrorKind, RedisError, ServerErrorKind};

    #[test]
    fn labels_follow_the_protocol_limits() {
        assert!(matches!(Error::check_label(b""), Err(Error::Config(_))));
        assert!(Error::check_label(b"a").is_ok());
        assert!(Error::check_label(&[b'x'; MAX_LABEL_LEN]).is_ok());
        assert!(matches!(Error::check_label(&[b'x'; MAX_LABEL_LEN + 1]), Err(Error::Config(_))));
    }

    #[test]
    fn permits_follow_the_protocol_limits() {
        assert!(matches!(Error::check_permits(0), Err(Error::Config(_))));
        assert!(Error::check_permits(1).is_ok() && Error::check_permits(MAX_PERMITS).is_ok());
        assert!(matches!(Error::check_permits(MAX_PERMITS + 1), Err(Error::Config(_))));
    }

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
        let empty = Error::check_key("").expect_err("refused");
        assert!(!empty.is_retryable() && !empty.is_unavailable());
        assert_eq!(
            empty.to_string(),
            "invalid lock key \"\": the lock key is empty (an unset variable expands to nothing)"
        );
        assert!(Error::check_key("invoice:inv_72").is_ok());
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

    fn quorum_failed(votes: Vec<Vote>) -> Error {
        Error::QuorumNotReached(Box::new(crate::quorum::report(votes)))
    }

    #[test]
    fn the_service_not_answering_is_unavailable() {
        let timeout =
            Error::Timeout { node: "n".into(), operation: "ACQUIRE", after: Duration::from_millis(5) };
        assert!(timeout.is_unavailable());
        for kind in [ErrorKind::Io, ErrorKind::Server(ServerErrorKind::ClusterDown)] {
            assert!(server(kind, "down").is_unavailable(), "{kind:?}");
        }
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(Error::Server { node: "n".into(), source: refused }.is_unavailable());
        for line in [
            "LOADING Redis is loading the dataset in memory",
            "OOM command not allowed when used memory > 'maxmemory'.",
            "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.",
            "NOREPLICAS Not enough good replicas to write.",
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            "READONLY You can't write against a read only replica.",
            &ReplyError::RestartGrace.message(1500),
        ] {
            assert!(replied(line).is_unavailable(), "{line}");
        }
        let not_confirmed = Error::NotConfirmed { node: "n".into(), wanted: 2, confirmed: 1 };
        assert!(not_confirmed.is_unavailable());
    }

    #[test]
    fn answers_and_mistakes_are_not_unavailable() {
        assert!(!Error::Contended { key: "k".into() }.is_unavailable());
        assert!(!Error::LeaseLost { key: "k".into(), cause: LossCause::Expired }.is_unavailable());
        assert!(!Error::Config("bad".into()).is_unavailable());
        // A key that moved (or was deleted) while we waited: answered, not an outage.
        assert!(!replied(&ReplyError::WaitInterrupted.message(0)).is_unavailable());
        for line in [
            "NOPERM User app has no permissions to run the 'fencedlock.acquire' command",
            "ERR unknown command 'FENCEDLOCK.ACQUIRE'",
            "WRONGTYPE Operation against a key holding the wrong kind of value",
            "NOSCRIPT No matching script.",
        ] {
            assert!(!replied(line).is_unavailable(), "{line}");
        }
        assert!(!replied(&ReplyError::BadToken.message(0)).is_unavailable());
        // Another permit count than the key's: the caller's mistake, answered at once.
        let mismatch = replied(&ReplyError::PermitsMismatch.message(3));
        assert!(!mismatch.is_unavailable() && !mismatch.is_retryable(), "{mismatch:?}");
        let semaphore = Error::Semaphore { node: "n".into(), key: "k".into(), permits: 3 };
        assert!(!semaphore.is_unavailable() && !semaphore.is_retryable());
        let Err(source) = fencedlock_protocol::LockStatus::decode([0, 2, -1], None) else {
            panic!("a broken reply")
        };
        assert!(!Error::BadReply { node: "n".into(), source }.is_unavailable());
    }

    #[test]
    fn a_quorum_is_unavailable_only_for_lack_of_answers() {
        let io = || Vote::Failed { error: RedisError::from((ErrorKind::Io, "connection refused")) };
        let loading = || match replied("LOADING Redis is loading the dataset in memory") {
            Error::Server { source, .. } => Vote::Failed { error: source },
            other => panic!("{other:?}"),
        };
        let wrongtype = || Vote::Failed {
            error: RedisError::from((ErrorKind::Server(ServerErrorKind::ResponseError), "WRONGTYPE")),
        };
        let yes = || Vote::Granted { fence: 1 };
        // A majority down (timed out, unreachable, loading): nobody could answer.
        assert!(quorum_failed(vec![yes(), Vote::TimedOut, io()]).is_unavailable());
        assert!(quorum_failed(vec![Vote::NotAwaited, Vote::TimedOut, loading()]).is_unavailable());
        assert!(quorum_failed(vec![io(), io(), io()]).is_unavailable());
        // A refusal: someone holds it, whatever the others did or would have said (a round
        // decided early leaves nodes not awaited).
        assert!(!quorum_failed(vec![Vote::Refused, Vote::TimedOut, loading()]).is_unavailable());
        assert!(!quorum_failed(vec![Vote::NotAwaited, Vote::Refused, io()]).is_unavailable());
        assert!(!quorum_failed(vec![Vote::Refused, Vote::Refused, Vote::TimedOut]).is_unavailable());
        assert!(!quorum_failed(vec![Vote::Refused, Vote::Refused, Vote::Refused]).is_unavailable());
        // Failures that are the caller's doing, not the service's.
        assert!(!quorum_failed(vec![yes(), wrongtype(), wrongtype()]).is_unavailable());
        assert!(!quorum_failed(vec![Vote::Refused, wrongtype(), yes()]).is_unavailable());
    }
}
