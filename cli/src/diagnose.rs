//! Turns client errors into one-line messages that tell the operator what to do.
//!
//! Errors are told apart by kind, never by their wording: the module's refusals by
//! [`ReplyError`], the server's own and the connection's by the client's [`Cause`], the classification its own
//! retries and failure policy use, so the exit code and `--on-unavailable` always agree.

use std::time::Duration;

use fencedlock::redis::RedisError;
use fencedlock::{Cause, Error, QuorumReport, ReplyError, Vote};
use fencedlock_protocol::command::{ACL_CATEGORY, ACQUIRE, RAISE, RELEASE, RENEW, STATUS};

use crate::args::ServerArgs;
use crate::duration;
use crate::error::CliError;

/// What the failing request was about, for the message.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The lock key.
    pub key: &'a str,
    /// How long `--wait` allowed (zero: a single attempt).
    pub waited: Duration,
    /// Whether the `--redis` URLs carry credentials (a refused login then means wrong ones,
    /// not missing ones).
    pub credentials: bool,
}

impl<'a> Context<'a> {
    /// The context of a request on `key` to the servers of `server`, after waiting up to
    /// `waited`.
    pub fn new(key: &'a str, waited: Duration, server: &ServerArgs) -> Context<'a> {
        Context { key, waited, credentials: crate::urls::has_credentials(server) }
    }
}

/// The CLI error for a client error.
pub fn explain(err: &Error, ctx: Context<'_>) -> CliError {
    match err {
        Error::Contended { .. } => busy(ctx),
        Error::Timeout { node, operation, after } => CliError::Unavailable(format!(
            "no answer from {node} to {operation} within {}: check that the server is up and not paused, or raise --timeout",
            duration::format(*after)
        )),
        Error::LeaseLost { key, cause } => CliError::LeaseLost(format!(
            "the lease on {key:?} is no longer held ({cause}): the work it protected may overlap with another owner's"
        )),
        Error::QuorumNotReached(report) => quorum(report, ctx),
        Error::NotConfirmed { node, wanted, confirmed } => CliError::Unavailable(format!(
            "the grant of {:?} on {node} was confirmed by {confirmed} of {wanted} replicas in time, so it was released: check the replicas (INFO replication), or lower --confirm-replicas / raise --confirm-timeout",
            ctx.key
        )),
        Error::Server { node, source } => match err.reply_error() {
            Some(refusal) => module_refusal(node, refusal, source, ctx),
            None => server(node, source, err.is_unavailable(), ctx),
        },
        Error::Config(msg) => CliError::Usage(format!("{msg}; see `fencedlock --help`")),
        Error::InvalidKey { .. } => CliError::Usage(err.to_string()),
        other => CliError::Internal(other.to_string()),
    }
}

fn busy(ctx: Context<'_>) -> CliError {
    if ctx.waited.is_zero() {
        CliError::Busy(format!(
            "lock {:?} is held by another owner; skipped (use --wait 30s to wait for it)",
            ctx.key
        ))
    } else {
        CliError::Busy(format!(
            "lock {:?} is still held by another owner after waiting {}; skipped",
            ctx.key,
            duration::format(ctx.waited)
        ))
    }
}

fn quorum(report: &QuorumReport, ctx: Context<'_>) -> CliError {
    if report.majority_refused() {
        return busy(ctx);
    }
    // A node without the module, or that denies us the commands, is a configuration error
    // worth naming on its own.
    for vote in &report.votes {
        if let Vote::Failed { error } = &vote.vote {
            match Cause::of(error) {
                Cause::NoModule => return no_module(&vote.node),
                Cause::NoPermission => return no_permission(&vote.node, error, ctx),
                Cause::Tls => return tls(&vote.node, error),
                Cause::NoEngine => return no_engine(&vote.node, error),
                _ => {}
            }
        }
    }
    let nodes = report.votes.len();
    let all_refusals = report.refused() + report.yes();
    if all_refusals == nodes && report.validity.is_none() {
        return CliError::Unavailable(format!(
            "the servers answered too slowly for the ttl (a round took {:?}); use a longer --ttl",
            report.elapsed
        ));
    }
    CliError::Unavailable(format!(
        "no majority ({} of {nodes}) of the servers granted {:?} ({}); check each --redis server",
        report.quorum,
        ctx.key,
        votes(report)
    ))
}

/// Each node's vote. (The client crate already strips tokens and echoed arguments from
/// server errors, so any vote is safe to print.)
pub fn votes(report: &QuorumReport) -> String {
    report.votes.iter().map(|v| format!("{}: {}", v.node, vote(&v.vote))).collect::<Vec<_>>().join("; ")
}

/// One vote as text, with a missing module named as such and server errors as the server
/// sent them.
pub fn vote(vote: &Vote) -> String {
    match vote {
        Vote::Failed { error } if Cause::of(error) == Cause::NoModule => {
            "fencedlock module not loaded".into()
        }
        Vote::Failed { error } => format!("failed ({})", error_text(error)),
        other => other.to_string(),
    }
}

/// One of the module's refusals: the request, the key or the server's state is the problem.
fn module_refusal(node: &str, refusal: ReplyError, source: &RedisError, ctx: Context<'_>) -> CliError {
    let text = error_text(source);
    match refusal {
        // The server cannot answer for the lock yet (it may have lost leases in a restart):
        // unavailable, not "someone holds it".
        ReplyError::RestartGrace => CliError::Unavailable(format!(
            "the server at {node} refuses new leases during its restart grace ({text}); try again shortly or use --wait"
        )),
        ReplyError::WaitInterrupted => CliError::Busy(format!(
            "the lock key moved away from {node} while waiting for it (a cluster slot migration or a deletion: {text}); try again"
        )),
        ReplyError::PermitsMismatch => CliError::Usage(format!(
            "key {:?} on {node} is held with another --permits count, or by --shared readers ({text}); every holder of a key must use the same count",
            ctx.key
        )),
        ReplyError::UpgradeRefused => CliError::Usage(format!(
            "key {:?} on {node} is read-shared by this very token ({text}); release the read lease first",
            ctx.key
        )),
        ReplyError::WrongType => CliError::Usage(format!(
            "key {:?} on {node} holds another kind of data, not a lock; choose another --key",
            ctx.key
        )),
        bad if bad.is_bad_request() => {
            CliError::Usage(format!("the server at {node} refused the request: {text}"))
        }
        _ => CliError::Internal(format!("unexpected reply from {node}: {text}")),
    }
}

/// The server's own refusals and connection failures. `unavailable` is the crate's verdict
/// ([`Error::is_unavailable`]): a refusal without a message of its own here (`NOREPLICAS`,
/// `BUSY`, ...) still exits as unavailable, so `--on-unavailable` and the exit code agree.
fn server(node: &str, source: &RedisError, unavailable: bool, ctx: Context<'_>) -> CliError {
    let text = error_text(source);
    match Cause::of(source) {
        Cause::NoModule => no_module(node),
        Cause::Unreachable => CliError::Unavailable(format!(
            "cannot reach the server at {node} ({text}): start it, or fix --redis / FENCEDLOCK_REDIS"
        )),
        Cause::TimedOut => CliError::Unavailable(format!(
            "no answer from {node} ({text}): check that the server is up and not paused, or raise --timeout"
        )),
        Cause::Credentials if ctx.credentials => CliError::Unavailable(format!(
            "the server at {node} refused the user or password in the URL ({text}): check them (redis://USER:PASSWORD@HOST:PORT; a password alone: redis://:PASSWORD@HOST:PORT), and that the user is enabled (ACL LIST)"
        )),
        Cause::Credentials => CliError::Unavailable(format!(
            "the server at {node} requires a login ({text}): give the credentials in the URL, redis://USER:PASSWORD@HOST:PORT (a password alone: redis://:PASSWORD@HOST:PORT)"
        )),
        Cause::NoPermission => no_permission(node, source, ctx),
        Cause::Tls => tls(node, source),
        Cause::NoEngine => no_engine(node, source),
        Cause::Misrouted => CliError::Usage(format!(
            "the server at {node} is a Redis Cluster node that does not own {:?} ({text}): pass --cluster, with any node of the cluster as --redis",
            ctx.key
        )),
        Cause::NoPrimary => CliError::Unavailable(format!(
            "the sentinels of {node} name no primary now ({text}): a failover may be in progress (use --wait), or check the service name in the URL"
        )),
        Cause::ReadOnly => CliError::Unavailable(format!(
            "the server at {node} is a read-only replica; point --redis at the primary"
        )),
        Cause::NotReady => CliError::Unavailable(format!(
            "the server at {node} is not ready ({text}); try again shortly or use --wait"
        )),
        Cause::OutOfMemory => CliError::Unavailable(format!(
            "the server at {node} is out of memory ({text}): raise its maxmemory or free memory"
        )),
        // BUSY, NOREPLICAS and what the client may add: its verdict decides.
        _ if unavailable => CliError::Unavailable(format!(
            "the server at {node} cannot grant leases now ({text}); try again shortly or use --wait"
        )),
        _ => CliError::Internal(format!("unexpected reply from {node}: {text}")),
    }
}

/// Whether `err` is a cluster node's `MOVED` or `ASK` seen without `--cluster`: asking again
/// cannot help.
pub fn is_misrouted(err: &Error) -> bool {
    matches!(err, Error::Server { source, .. } if Cause::of(source) == Cause::Misrouted)
}

/// The TLS handshake failed: the certificates, not the server's state, must change.
fn tls(node: &str, source: &RedisError) -> CliError {
    CliError::Config(format!(
        "the TLS handshake with {node} failed ({}): pass the CA that signed the server's certificate with --tls-cacert, and for mutual TLS a client certificate it accepts with --tls-cert/--tls-key",
        error_text(source)
    ))
}

/// Neither the module nor the Functions library (nor its script): the client's error already
/// says the ways out.
fn no_engine(node: &str, source: &RedisError) -> CliError {
    CliError::Config(format!("{node}: {}", source.detail().unwrap_or_default()))
}

fn no_module(node: &str) -> CliError {
    CliError::Unavailable(format!(
        "the server at {node} does not have the fencedlock module loaded: add `loadmodule /path/to/libfencedlock_module.so` to its configuration file, or pass `--loadmodule /path/to/libfencedlock_module.so` when starting it; or leave out --engine module, and the Functions library serves leases where the module cannot be loaded"
    ))
}

/// The ACL user lacks the commands or the key: the server's configuration must change.
fn no_permission(node: &str, source: &RedisError, ctx: Context<'_>) -> CliError {
    let commands: Vec<String> = [ACQUIRE, RENEW, RELEASE, RAISE, STATUS]
        .iter()
        .map(|command| format!("+{}", command.name.to_ascii_lowercase()))
        .collect();
    CliError::Unavailable(format!(
        "the server at {node} does not allow this user to run the fencedlock commands on key {:?} ({}): grant them with `ACL SETUSER <user> +@{ACL_CATEGORY} ~<key pattern>` (Redis 7.4+, Valkey 8+; on older servers `{}` instead of +@{ACL_CATEGORY})",
        ctx.key,
        error_text(source),
        commands.join(" ")
    ))
}

/// The server's error as it sent it (`ERR ...`, `WRONGTYPE ...`), or the client error.
pub fn error_text(err: &RedisError) -> String {
    match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use fencedlock::redis::{self, Value};

    use super::*;
    use crate::error::code;
    use fencedlock::redis::ErrorKind;

    const CTX: Context<'static> = Context { key: "k", waited: Duration::ZERO, credentials: false };

    /// A server's error reply `line` (code and detail) as the client hands it over.
    fn reply(line: &str) -> RedisError {
        match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
            Ok(Value::ServerError(e)) => e.into(),
            other => panic!("not an error reply: {other:?}"),
        }
    }

    fn from_server(source: RedisError) -> Error {
        Error::Server { node: "127.0.0.1:6379".into(), source }
    }

    fn exit_code(source: RedisError) -> u8 {
        explain(&from_server(source), CTX).exit_code()
    }

    #[test]
    fn the_modules_refusals_are_told_apart_by_kind() {
        let table = [
            (ReplyError::BadTtl, code::USAGE),
            (ReplyError::TtlTooLarge, code::USAGE),
            (ReplyError::BadToken, code::USAGE),
            (ReplyError::BadFence, code::USAGE),
            (ReplyError::BadTimeout, code::USAGE),
            (ReplyError::BadLabel, code::USAGE),
            (ReplyError::BadPermits, code::USAGE),
            (ReplyError::BadKeys, code::USAGE),
            (ReplyError::Syntax, code::USAGE),
            (ReplyError::PermitsMismatch, code::USAGE),
            (ReplyError::UpgradeRefused, code::USAGE),
            (ReplyError::WrongType, code::USAGE),
            (ReplyError::RestartGrace, code::UNAVAILABLE),
            (ReplyError::WaitInterrupted, code::BUSY),
            (ReplyError::FencesExhausted, code::INTERNAL),
            (ReplyError::InternalCommand, code::INTERNAL),
            (ReplyError::BadRecord, code::INTERNAL),
            (ReplyError::Internal, code::INTERNAL),
        ];
        for kind in ReplyError::ALL {
            assert!(table.iter().any(|(listed, _)| *listed == kind), "{kind:?} has no exit code");
        }
        for (kind, exit) in table {
            assert_eq!(exit_code(reply(&kind.message(1500))), exit, "{kind:?}");
        }
    }

    #[test]
    fn each_cause_of_a_server_failure_has_its_exit_code() {
        for (line, exit) in [
            ("NOPERM User app has no permissions to run the 'x' command", code::UNAVAILABLE),
            ("NOPERM No permissions to access a key", code::UNAVAILABLE),
            ("NOAUTH Authentication required.", code::UNAVAILABLE),
            ("WRONGPASS invalid username-password pair", code::UNAVAILABLE),
            ("READONLY You can't write against a read only replica.", code::UNAVAILABLE),
            ("LOADING Redis is loading the dataset in memory", code::UNAVAILABLE),
            ("CLUSTERDOWN The cluster is down", code::UNAVAILABLE),
            ("TRYAGAIN Multiple keys request during rehashing of slot", code::UNAVAILABLE),
            ("ERR unknown command 'x', with args beginning with: <redacted>", code::UNAVAILABLE),
            ("ERR Protocol error", code::INTERNAL),
            ("OOM command not allowed when used memory > 'maxmemory'.", code::UNAVAILABLE),
        ] {
            assert_eq!(exit_code(reply(line)), exit, "{line}");
        }
        let auth = RedisError::from((ErrorKind::AuthenticationFailed, "Password authentication failed"));
        assert_eq!(exit_code(auth), code::UNAVAILABLE);
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(exit_code(refused), code::UNAVAILABLE);
        let slow = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert_eq!(exit_code(slow), code::UNAVAILABLE);
        // The client crate's verdict on a failed TLS handshake.
        let tls = RedisError::from((
            ErrorKind::InvalidClientConfig,
            "TLS handshake failed",
            "UnknownIssuer".into(),
        ));
        assert_eq!(exit_code(tls), code::CONFIG);
        assert_eq!(exit_code(reply("MOVED 15495 127.0.0.1:7002")), code::USAGE);
        let failover =
            RedisError::from((ErrorKind::MasterNameNotFoundBySentinel, "Master with given name not found"));
        assert_eq!(exit_code(failover), code::UNAVAILABLE);
    }

    #[test]
    fn what_the_policy_may_fail_open_on_exits_69_and_a_misconfiguration_is_never_among_it() {
        // `--on-unavailable` decides by `is_unavailable()`; under `fail` each such error must
        // still exit 69, whatever its wording.
        let cannot_answer = [
            from_server(reply("LOADING Redis is loading the dataset in memory")),
            from_server(reply(&ReplyError::RestartGrace.message(1500))),
            from_server(reply("OOM command not allowed when used memory > 'maxmemory'.")),
            from_server(reply("CLUSTERDOWN The cluster is down")),
            from_server(reply("NOREPLICAS Not enough good replicas to write.")),
            from_server(reply("BUSY Redis is busy running a script.")),
            from_server(RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))),
            Error::Timeout { node: "a".into(), operation: "ACQUIRE", after: Duration::from_millis(500) },
            Error::NotConfirmed { node: "a".into(), wanted: 1, confirmed: 0 },
        ];
        for err in cannot_answer {
            assert!(err.is_unavailable(), "{err}");
            assert_eq!(explain(&err, CTX).exit_code(), code::UNAVAILABLE, "{err}");
        }
        let misconfigured = [
            from_server(reply("NOPERM No permissions to access a key")),
            from_server(reply("ERR unknown command 'x', with args beginning with: <redacted>")),
            from_server(reply(&ReplyError::WrongType.message(0))),
            from_server(reply(&ReplyError::BadTtl.message(0))),
            Error::Config("bad".into()),
        ];
        for err in misconfigured {
            assert!(!err.is_unavailable(), "a policy must not fail open on {err}");
        }
    }

    #[test]
    fn a_refused_login_blames_the_given_credentials_or_asks_for_them() {
        let wrong = from_server(reply("WRONGPASS invalid username-password pair or user is disabled."));
        let given = explain(&wrong, Context { credentials: true, ..CTX }).one_line();
        assert!(given.contains("refused the user or password in the URL"), "{given}");
        assert!(!given.contains("give the credentials"), "{given}");
        let missing = explain(&from_server(reply("NOAUTH Authentication required.")), CTX).one_line();
        assert!(missing.contains("give the credentials in the URL"), "{missing}");
    }

    #[test]
    fn a_missing_permission_names_the_acl_grant() {
        let err = explain(&from_server(reply("NOPERM No permissions to access a key")), CTX);
        assert_eq!(err.kind(), "unavailable");
        let message = err.one_line();
        assert!(message.contains(&format!("+@{ACL_CATEGORY}")), "{message}");
        for command in [ACQUIRE, RENEW, RELEASE, RAISE, STATUS] {
            assert!(message.contains(&command.name.to_ascii_lowercase()), "{message}");
        }
    }

    #[test]
    fn votes_that_name_a_configuration_problem_decide_a_failed_round() {
        let report = |error: RedisError| QuorumReport {
            key: "k".into(),
            phase: fencedlock::Phase::Acquire,
            quorum: 2,
            votes: ["a", "b", "c"]
                .into_iter()
                .map(|node| fencedlock::NodeVote {
                    node: node.into(),
                    vote: Vote::Failed { error: error.clone() },
                    raise: None,
                })
                .collect(),
            elapsed: Duration::from_millis(1),
            validity: Some(Duration::from_millis(900)),
        };
        let err = Error::QuorumNotReached(Box::new(report(reply("ERR unknown command 'x'"))));
        assert_eq!(explain(&err, CTX).one_line(), no_module("a").one_line());
        let denied = reply("NOPERM No permissions to access a key");
        let err = Error::QuorumNotReached(Box::new(report(denied.clone())));
        assert_eq!(explain(&err, CTX).one_line(), no_permission("a", &denied, CTX).one_line());
        let err = Error::QuorumNotReached(Box::new(report(reply("ERR Protocol error"))));
        assert_eq!(explain(&err, CTX).kind(), "unavailable");
    }
}
