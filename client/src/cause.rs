//! What a failed request means: the one classification of server and connection errors.
//! The client's retries ([`Error::is_retryable`](crate::Error::is_retryable), a Redlock round's
//! "a majority failed for good"), its failure policy
//! ([`Error::is_unavailable`](crate::Error::is_unavailable)) and the CLI's messages and exit
//! codes all ask [`Cause::of`], so they never disagree about an error.
//!
//! Errors are told apart by the `redis` crate's kind and the reply's code. The one exception is
//! an unknown command: the servers give it no code of its own, only a plain `ERR` whose text
//! starts "unknown command", which clients have relied on for years.

use fencedlock_protocol::cause as kind;
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// Why a server did not do what was asked (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Cause {
    /// No answer in time.
    TimedOut,
    /// No connection: refused, reset, closed, unresolvable.
    Unreachable,
    /// Loading its data, in the module's restart grace, or its cluster reconfiguring
    /// (`LOADING`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`).
    NotReady,
    /// The sentinels name no primary that answers as one: a failover under way (or a service
    /// name they do not monitor).
    NoPrimary,
    /// A replica (`READONLY`): not, or no longer, the primary.
    ReadOnly,
    /// A cluster node that does not own the key (`MOVED`, `ASK`) reached the caller: the
    /// cluster is addressed as a single server.
    Misrouted,
    /// Out of memory (`OOM`).
    OutOfMemory,
    /// Busy running a script (`BUSY`).
    Busy,
    /// Refusing writes for lack of replicas (`NOREPLICAS`, `min-replicas-to-write`).
    NoReplicas,
    /// The fencedlock module is not loaded (an unknown command, or the client's own error of
    /// code `NOMODULE` where only the module may serve).
    NoModule,
    /// The ACL user may not run the command or touch the key (`NOPERM`).
    NoPermission,
    /// Other credentials are wanted (`NOAUTH`, `WRONGPASS`, a failed `AUTH`).
    Credentials,
    /// The TLS handshake failed: the certificates do not match.
    Tls,
    /// Neither engine: no module, and the Functions library could not be loaded (the client's
    /// own error, code `NOENGINE`).
    NoEngine,
    /// Anything else: the module's own refusals ([`crate::ReplyError`]), `WRONGTYPE`, a
    /// broken reply.
    Other,
}

impl Cause {
    /// The cause of `err`.
    pub fn of(err: &RedisError) -> Cause {
        if err.is_timeout() {
            return Cause::TimedOut;
        }
        match (err.kind(), err.code()) {
            (_, Some(NO_ENGINE)) => Cause::NoEngine,
            (_, Some(NO_MODULE)) => Cause::NoModule,
            // The verdict of `tls::classify` on a failed handshake.
            (ErrorKind::InvalidClientConfig, _) => Cause::Tls,
            (ErrorKind::MasterNameNotFoundBySentinel, _) => Cause::NoPrimary,
            (ErrorKind::ClusterConnectionNotFound, _) => Cause::NotReady,
            (ErrorKind::Server(ServerErrorKind::NoPerm), _) => Cause::NoPermission,
            (ErrorKind::AuthenticationFailed, _) | (_, Some("NOAUTH" | "WRONGPASS")) => Cause::Credentials,
            (ErrorKind::Server(ServerErrorKind::ReadOnly), _) => Cause::ReadOnly,
            (ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask), _) => Cause::Misrouted,
            (
                ErrorKind::Server(
                    ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown,
                ),
                _,
            ) => Cause::NotReady,
            // These codes have no kind of their own in the `redis` crate; the code is the contract.
            (_, Some("OOM")) => Cause::OutOfMemory,
            (_, Some("BUSY")) => Cause::Busy,
            (_, Some("NOREPLICAS")) => Cause::NoReplicas,
            (ErrorKind::Server(ServerErrorKind::ResponseError), _) if is_unknown_command(err) => {
                Cause::NoModule
            }
            _ if err.is_io_error() || err.is_connection_refusal() || err.is_connection_dropped() => {
                Cause::Unreachable
            }
            _ => Cause::Other,
        }
    }

    /// Whether a later attempt may not meet it: timeouts and lost connections, a server not
    /// ready yet, a failover or resharding under way. Everything else is final.
    pub fn is_retryable(self) -> bool {
        self.kind().retryable
    }

    /// Whether the lock service cannot serve requests right now (what a declared
    /// [`OnUnavailable`](crate::OnUnavailable) policy decides): the retryable causes, and a
    /// server out of memory, busy, or without its replicas. Never a misconfiguration (a missing
    /// module or permission, credentials, certificates, a cluster addressed as one server):
    /// fail-open must not turn those into silently unlocked work.
    pub fn is_outage(self) -> bool {
        self.kind().outage
    }

    /// This cause's row of the contract's table (`fencedlock_protocol::cause`), which the
    /// other clients read from `contract.json`.
    fn kind(self) -> &'static kind::Kind {
        match self {
            Cause::TimedOut => &kind::TIMED_OUT,
            Cause::Unreachable => &kind::UNREACHABLE,
            Cause::NotReady => &kind::NOT_READY,
            Cause::NoPrimary => &kind::NO_PRIMARY,
            Cause::ReadOnly => &kind::READ_ONLY,
            Cause::Misrouted => &kind::MISROUTED,
            Cause::OutOfMemory => &kind::OUT_OF_MEMORY,
            Cause::Busy => &kind::BUSY,
            Cause::NoReplicas => &kind::NO_REPLICAS,
            Cause::NoModule => &kind::NO_MODULE,
            Cause::NoPermission => &kind::NO_PERMISSION,
            Cause::Credentials => &kind::CREDENTIALS,
            Cause::Tls => &kind::TLS,
            Cause::NoEngine => &kind::NO_ENGINE,
            Cause::Other => &kind::OTHER,
        }
    }
}

/// The code of the client's error for a server with neither engine. No server sends it; it
/// is made by the node, so it is told apart by code like the servers' own errors.
pub(crate) const NO_ENGINE: &str = kind::NO_ENGINE_CODE;

/// The code of the client's error for a server without the module where only the module may
/// serve ([`crate::EngineChoice::Only`]), found before any token is sent.
pub(crate) const NO_MODULE: &str = kind::NO_MODULE_CODE;

/// Redis and Valkey give an unknown command no error code of its own (see the module docs).
fn is_unknown_command(err: &RedisError) -> bool {
    err.detail().is_some_and(|detail| kind::UNKNOWN_COMMAND.iter().any(|start| detail.starts_with(start)))
}

/// Whether `err` is an error reply of the server (the connection worked and is in step), as
/// opposed to an I/O, protocol or client-side failure after which the connection is unusable.
pub(crate) fn answered(err: &RedisError) -> bool {
    matches!(err.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
}

/// Whether a multiplexed connection that returned `err` can no longer be trusted.
pub(crate) fn breaks_connection(err: &RedisError) -> bool {
    err.is_io_error() || err.is_connection_dropped() || err.is_unrecoverable_error()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `err` as it arrives from a server that replied `line`.
    pub(crate) fn replied(line: &str) -> RedisError {
        match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
            Ok(redis::Value::ServerError(e)) => e.into(),
            other => panic!("not an error reply: {other:?}"),
        }
    }

    fn io(kind: std::io::ErrorKind) -> RedisError {
        RedisError::from(std::io::Error::from(kind))
    }

    #[test]
    fn each_error_has_one_cause_by_kind_and_code() {
        for (err, cause) in [
            (io(std::io::ErrorKind::TimedOut), Cause::TimedOut),
            (io(std::io::ErrorKind::ConnectionRefused), Cause::Unreachable),
            (io(std::io::ErrorKind::ConnectionReset), Cause::Unreachable),
            (replied("LOADING Redis is loading the dataset in memory"), Cause::NotReady),
            (replied("TRYAGAIN fencedlock restart grace: new grants are refused"), Cause::NotReady),
            (replied("CLUSTERDOWN The cluster is down"), Cause::NotReady),
            (replied("READONLY You can't write against a read only replica."), Cause::ReadOnly),
            (replied("MOVED 15495 127.0.0.1:7002"), Cause::Misrouted),
            (replied("ASK 15495 127.0.0.1:7002"), Cause::Misrouted),
            (replied("OOM command not allowed when used memory > 'maxmemory'."), Cause::OutOfMemory),
            (replied("BUSY Redis is busy running a script."), Cause::Busy),
            (replied("NOREPLICAS Not enough good replicas to write."), Cause::NoReplicas),
            (
                replied("ERR unknown command 'FENCEDLOCK.ACQUIRE', with args beginning with: <redacted>"),
                Cause::NoModule,
            ),
            (replied("NOPERM User app has no permissions to run the 'x' command"), Cause::NoPermission),
            (replied("NOAUTH Authentication required."), Cause::Credentials),
            (replied("WRONGPASS invalid username-password pair"), Cause::Credentials),
            (
                RedisError::from((ErrorKind::AuthenticationFailed, "Password authentication failed")),
                Cause::Credentials,
            ),
            (
                RedisError::from((ErrorKind::InvalidClientConfig, "TLS handshake failed", "x".into())),
                Cause::Tls,
            ),
            (RedisError::from((ErrorKind::MasterNameNotFoundBySentinel, "none")), Cause::NoPrimary),
            (redis::make_extension_error(NO_ENGINE.into(), Some("no module".into())), Cause::NoEngine),
            (redis::make_extension_error(NO_MODULE.into(), Some("no module".into())), Cause::NoModule),
            (replied("ERR ttl exceeds fencedlock.max-ttl-ms (1000)"), Cause::Other),
            (replied("WRONGTYPE Operation against a key holding the wrong kind of value"), Cause::Other),
        ] {
            assert_eq!(Cause::of(&err), cause, "{err}");
        }
    }

    #[test]
    fn retries_and_outages_never_cover_a_misconfiguration() {
        use Cause::*;
        for cause in [TimedOut, Unreachable, NotReady, NoPrimary, ReadOnly] {
            assert!(cause.is_retryable() && cause.is_outage(), "{cause:?}");
        }
        // Retried while a cluster reshards, but never an outage to fail open on.
        assert!(Misrouted.is_retryable() && !Misrouted.is_outage());
        for cause in [OutOfMemory, Busy, NoReplicas] {
            assert!(!cause.is_retryable() && cause.is_outage(), "{cause:?}");
        }
        for cause in [NoModule, NoPermission, Credentials, Tls, Other] {
            assert!(!cause.is_retryable() && !cause.is_outage(), "{cause:?}");
        }
    }

    /// Every cause in the order of the contract's table.
    const ALL: [Cause; 15] = {
        use Cause::*;
        [
            TimedOut,
            Unreachable,
            NotReady,
            NoPrimary,
            ReadOnly,
            Misrouted,
            OutOfMemory,
            Busy,
            NoReplicas,
            NoModule,
            NoPermission,
            Credentials,
            Tls,
            NoEngine,
            Other,
        ]
    };

    #[test]
    fn each_cause_is_its_row_of_the_contract_and_its_codes_name_it() {
        assert_eq!(ALL.len(), kind::ALL.len());
        for (cause, row) in ALL.into_iter().zip(kind::ALL) {
            assert_eq!(*cause.kind(), row);
            assert_eq!(format!("{cause:?}"), row.name);
            for code in row.codes {
                assert_eq!(Cause::of(&replied(&format!("{code} anything"))), cause, "{code}");
            }
            for code in row.client_codes {
                let err = redis::make_extension_error((*code).into(), Some("x".into()));
                assert_eq!(Cause::of(&err), cause, "{code}");
            }
            for detail in row.err_details {
                assert_eq!(Cause::of(&replied(&format!("ERR {detail} 'X'"))), cause, "{detail}");
            }
        }
    }

    #[test]
    fn replies_are_told_from_broken_connections() {
        assert!(answered(&replied("ERR wrong number of arguments for 'x' command")));
        assert!(answered(&replied("TRYAGAIN fencedlock restart grace: new grants are refused")));
        assert!(!answered(&io(std::io::ErrorKind::ConnectionReset)));
        assert!(!answered(&io(std::io::ErrorKind::TimedOut)));
        assert!(breaks_connection(&io(std::io::ErrorKind::ConnectionReset)));
        assert!(!breaks_connection(&replied("READONLY You can't write against a read only replica.")));
    }
}
