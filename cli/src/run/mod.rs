//! `fencedlock run`: acquire, run the command with the lease kept alive, and release.
//!
//! The order of events matters for safety: the lease is acquired before the command starts,
//! renewed while it runs, and if a renewal fails the command is stopped, because from that
//! moment another host may already be running the same job. Signals arriving at any point
//! are handled: before the command starts they abort the run, afterwards they are forwarded.

mod child;
pub mod signals;

use std::io::IsTerminal;
use std::os::unix::process::ExitStatusExt;

use fencedlock::{KeptLease, Lease, Vote};
use serde_json::json;

use crate::args::{Global, RunArgs};
use crate::diagnose::{self, Context};
use crate::duration;
use crate::error::{code, CliError};
use crate::output::Output;
use crate::servers::{self, LeaseOptions};
use child::{exit_code, Job, LeaseEnv};
use signals::Signals;

/// Runs the command under the lease; the exit code to leave with.
pub async fn run(
    args: &RunArgs,
    global: &Global,
    out: Output,
    signals: &mut Signals,
) -> Result<u8, CliError> {
    let lock = servers::open(
        &global.redis,
        LeaseOptions { ttl: args.ttl, wait: args.wait, timeout: global.timeout },
    )?;
    let ctx = Context { key: &args.key, waited: args.wait };

    let acquire = servers::acquire(&lock, &args.key, |err| {
        tracing::info!(key = %args.key, error = %err, "lock busy, waiting up to {}", duration::format(args.wait));
    });
    let lease = tokio::select! {
        lease = acquire => lease,
        sig = signals.recv() => {
            out.notice(&format!("signal {sig} received before the lease was granted; nothing was run"));
            return Ok(code::SIGNAL_BASE.saturating_add(u8::try_from(sig).unwrap_or(0)));
        }
    };
    let lease = match lease {
        Ok(lease) => lease,
        Err(err) => {
            let err = diagnose::explain(&err, ctx);
            if let CliError::Busy(msg) = &err {
                // Skipping is the normal outcome on all but one host: a notice, not an error.
                out.record(
                    Some(msg),
                    json!({ "outcome": "skipped", "key": args.key, "exit_code": code::BUSY, "message": msg }),
                );
                return Ok(code::BUSY);
            }
            return Err(err);
        }
    };

    let granted_at = tokio::time::Instant::now();
    let fence = lease.fence();
    warn_about_minority(&lease, out);
    tracing::info!(key = %args.key, fence, servers = %servers::describe(&lock), valid = ?lease.remaining(), "lease acquired");
    // A terminal's Ctrl-C reaches the whole foreground group anyway, and an interactive
    // command must stay in it to read the terminal; under cron it gets a group of its own.
    let own_group = !std::io::stdin().is_terminal();
    let env = LeaseEnv { key: &args.key, fence, ttl_ms: lock.config().ttl_ms() };
    let mut job = match Job::spawn(&args.command, env, own_group) {
        Ok(job) => job,
        Err(err) => {
            if let Err(e) = lease.release().await {
                out.warning(&format!("could not release the lease ({e}); it expires after its ttl"));
            }
            return Err(err);
        }
    };
    tracing::debug!(pid = job.pid(), own_group, "command started");
    let kept = lease.keep_alive();
    let outcome = supervise(&mut job, &kept, args, signals, out).await;
    match outcome {
        Supervised::Exited(status) => {
            hold(&kept, granted_at + args.min_hold, signals).await;
            release(kept, out).await;
            let exit = exit_code(status);
            tracing::info!(key = %args.key, fence, exit, "command finished, lease released");
            out.record(
                None,
                json!({ "outcome": "completed", "key": args.key, "fence": fence, "exit_code": exit }),
            );
            Ok(exit)
        }
        Supervised::Lost { reason, status } => {
            release(kept, out).await;
            let msg = format!(
                "the command was terminated because the lease on {:?} (fence {fence}) was lost ({reason}); {}",
                args.key,
                describe_status(status)
            );
            if out.json {
                out.record(
                    None,
                    json!({ "outcome": "lease_lost", "key": args.key, "fence": fence,
                            "exit_code": code::LEASE_LOST, "message": msg }),
                );
                return Ok(code::LEASE_LOST);
            }
            Err(CliError::LeaseLost(msg))
        }
        Supervised::Failed(err) => {
            job.signal(libc::SIGKILL);
            release(kept, out).await;
            Err(CliError::Internal(format!("lost track of the command: {err}")))
        }
    }
}

/// A Redlock grant can hide failing servers; an operator wants to hear about them before
/// the majority is gone too. Only failures seen before the majority was in can be reported:
/// servers the round did not wait for ([`Vote::NotAwaited`]) are not counted as failing.
pub(crate) fn warn_about_minority(lease: &Lease, out: Output) {
    let failing: Vec<String> = lease
        .report()
        .votes
        .iter()
        .filter(|v| matches!(v.vote, Vote::TimedOut | Vote::Failed { .. }))
        .map(|v| format!("{}: {}", v.node, crate::diagnose::vote(&v.vote)))
        .collect();
    if !failing.is_empty() {
        out.notice(&format!(
            "granted by a majority, but {} of {} servers failed: {}",
            failing.len(),
            lease.report().votes.len(),
            failing.join("; ")
        ));
    }
}

enum Supervised {
    Exited(std::process::ExitStatus),
    Lost { reason: String, status: std::io::Result<std::process::ExitStatus> },
    Failed(std::io::Error),
}

async fn supervise(
    job: &mut Job,
    kept: &KeptLease,
    args: &RunArgs,
    signals: &mut Signals,
    out: Output,
) -> Supervised {
    let lost = kept.cancellation();
    loop {
        tokio::select! {
            biased;
            status = job.wait() => {
                return match status {
                    Ok(status) => {
                        if lost.is_cancelled() {
                            out.warning(&format!("the lease on {:?} was lost shortly before the command exited", args.key));
                        }
                        Supervised::Exited(status)
                    }
                    Err(err) => Supervised::Failed(err),
                };
            }
            _ = lost.cancelled() => {
                let reason = match kept.handle().loss() {
                    Some(fencedlock::Error::LeaseLost { cause, .. }) => cause.to_string(),
                    Some(other) => other.to_string(),
                    None => "the keep-alive stopped".into(),
                };
                out.warning(&format!(
                    "lease on {:?} (fence {}) lost: {reason}; sending SIGTERM to the command, SIGKILL in {}",
                    args.key,
                    kept.fence(),
                    duration::format(args.kill_grace)
                ));
                let status = terminate(job, args, signals).await;
                return Supervised::Lost { reason, status };
            }
            sig = signals.recv() => {
                tracing::info!(signal = sig, pid = job.pid(), "forwarding signal to the command");
                job.signal(sig);
            }
        }
    }
}

/// Terminates the command after a lost lease, still forwarding signals meanwhile.
async fn terminate(
    job: &mut Job,
    args: &RunArgs,
    signals: &mut Signals,
) -> std::io::Result<std::process::ExitStatus> {
    let grace = args.kill_grace;
    let stopping = job.terminate(grace);
    tokio::pin!(stopping);
    loop {
        tokio::select! {
            status = &mut stopping => return status,
            sig = signals.recv() => tracing::info!(signal = sig, "signal received while terminating the command"),
        }
    }
}

/// `--min-hold`: keeps the (kept-alive) lease until `until`, unless it is lost or a signal
/// asks fencedlock to stop.
async fn hold(kept: &KeptLease, until: tokio::time::Instant, signals: &mut Signals) {
    if until <= tokio::time::Instant::now() {
        return;
    }
    tracing::info!(key = kept.key(), "holding the lease for --min-hold");
    let lost = kept.cancellation();
    tokio::select! {
        _ = tokio::time::sleep_until(until) => {}
        _ = lost.cancelled() => {}
        sig = signals.recv() => tracing::info!(signal = sig, "signal during --min-hold, releasing now"),
    }
}

/// Stops the keep-alive and gives the lease back; a failure only costs the rest of the ttl.
async fn release(kept: KeptLease, out: Output) {
    let key = kept.key().to_owned();
    match kept.release().await {
        Ok(true) => {}
        Ok(false) => tracing::info!(key, "the lease had already ended before the release"),
        Err(err) if err.is_lease_lost() => tracing::info!(key, error = %err, "lease already lost"),
        Err(err) => out.warning(&format!(
            "could not release the lease on {key:?} ({err}); it expires by itself after its ttl"
        )),
    }
}

/// How the terminated command ended. Asks the status for a signal rather than reading it back
/// from the shell-style exit code: a command that itself exits with 130 was not killed.
fn describe_status(status: std::io::Result<std::process::ExitStatus>) -> String {
    match status {
        Ok(s) => match s.signal() {
            Some(sig) => format!("killed by signal {sig}"),
            None => format!("it exited with {}", exit_code(s)),
        },
        Err(e) => format!("its status is unknown: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::ExitStatus;

    #[test]
    fn a_high_exit_code_is_not_mistaken_for_a_signal() {
        // Wait statuses: exit code in the high byte, terminating signal in the low bits.
        let exited = |code: i32| Ok(ExitStatus::from_raw(code << 8));
        assert_eq!(describe_status(exited(130)), "it exited with 130");
        assert_eq!(describe_status(exited(3)), "it exited with 3");
        assert_eq!(describe_status(Ok(ExitStatus::from_raw(libc::SIGKILL))), "killed by signal 9");
        assert_eq!(describe_status(Ok(ExitStatus::from_raw(libc::SIGTERM))), "killed by signal 15");
    }
}
