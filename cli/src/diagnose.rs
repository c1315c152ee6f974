//! Turns client errors into one-line messages that tell the operator what to do.

use std::time::Duration;

use fencedlock::{Error, QuorumReport, Vote};
use redis::RedisError;

use crate::duration;
use crate::error::CliError;

/// What the failing request was about, for the message.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The lock key.
    pub key: &'a str,
    /// How long `--wait` allowed (zero: a single attempt).
    pub waited: Duration,
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
        Error::Server { node, source } => server(node, source, ctx),
        Error::Config(msg) => CliError::Usage(format!("{msg}; see `fencedlock --help`")),
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
    // A node without the module is a configuration error worth naming on its own.
    for vote in &report.votes {
        if let Vote::Failed { error } = &vote.vote {
            if is_unknown_command(error) {
                return no_module(&vote.node);
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
        Vote::Failed { error } if is_unknown_command(error) => "fencedlock module not loaded".into(),
        Vote::Failed { error } => format!("failed ({})", error_text(error)),
        other => other.to_string(),
    }
}

fn server(node: &str, source: &RedisError, ctx: Context<'_>) -> CliError {
    let text = error_text(source);
    if is_unknown_command(source) {
        return no_module(node);
    }
    if source.is_io_error() || source.is_connection_refusal() || source.is_connection_dropped() {
        return CliError::Unavailable(format!(
            "cannot reach the server at {node} ({text}): start it, or fix --redis / FENCEDLOCK_REDIS"
        ));
    }
    if source.is_timeout() {
        return CliError::Unavailable(format!(
            "no answer from {node} ({text}): check that the server is up and not paused, or raise --timeout"
        ));
    }
    if text.starts_with("NOAUTH") || text.starts_with("WRONGPASS") {
        return CliError::Unavailable(format!(
            "the server at {node} refused to authenticate ({text}): put the credentials in the URL, redis://USER:PASSWORD@HOST:PORT"
        ));
    }
    if text.starts_with("TRYAGAIN") {
        return CliError::Busy(format!(
            "the server at {node} refuses new leases during its restart grace ({text}); try again shortly or use --wait"
        ));
    }
    if text.starts_with("WRONGTYPE") {
        return CliError::Usage(format!(
            "key {:?} on {node} holds another kind of data, not a lock; choose another --key",
            ctx.key
        ));
    }
    if text.starts_with("READONLY") {
        return CliError::Unavailable(format!(
            "the server at {node} is a read-only replica; point --redis at the primary"
        ));
    }
    if text.starts_with("ERR ttl") || text.starts_with("ERR token") {
        return CliError::Usage(format!("the server at {node} refused the request: {text}"));
    }
    CliError::Internal(format!("unexpected reply from {node}: {text}"))
}

fn no_module(node: &str) -> CliError {
    CliError::Unavailable(format!(
        "the server at {node} does not have the fencedlock module loaded: add `loadmodule /path/to/libfencedlock_module.so` to its config (see redis.conf)"
    ))
}

fn is_unknown_command(err: &RedisError) -> bool {
    let text = error_text(err).to_ascii_lowercase();
    text.contains("unknown command") || text.contains("unknown subcommand")
}

/// The server's error as it sent it (`ERR ...`, `WRONGTYPE ...`), or the client error.
pub fn error_text(err: &RedisError) -> String {
    match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => err.to_string(),
    }
}
