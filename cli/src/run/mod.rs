//! `fencedlock run`: acquire, run the command with the lease kept alive, and release.
//!
//! The order of events matters for safety: the lease is acquired before the command starts,
//! renewed while it runs, and if a renewal fails the command is stopped, because from that
//! moment another host may already be running the same job. Signals arriving at any point
//! are handled: before the command starts they abort the run, afterwards they are forwarded.

mod child;
pub mod guardian;
pub mod signals;
mod tree;

pub(crate) use child::{exit_code, Job, LeaseEnv};

use std::io::IsTerminal;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use fencedlock::{Cause, Due, Error, KeptLease, LastRun, Lease, LeaseHandle, Redlock, Schedule, Vote};
use fencedlock_protocol::periodic::{record_key, RECORD_KEY_PREFIX};
use serde_json::json;
use tokio::time::Instant;

use crate::args::{OnUnavailable, RunArgs};
use crate::diagnose::{self, Context};
use crate::duration;
use crate::error::{code, CliError};
use crate::output::Output;
use crate::servers::{self, LeaseOptions};
use crate::show::{describe_last_run, last_run_json};
use signals::Signals;

/// Runs the command under the lease; the exit code to leave with.
pub async fn run(args: &RunArgs, out: Output, signals: &mut Signals) -> Result<u8, CliError> {
    if args.every.is_some() && (args.permits.count != 1 || args.shared) {
        return Err(CliError::Usage(
            "--every runs a job once per period, one holder at a time; it does not combine with --permits or --shared"
                .into(),
        ));
    }
    let server = &args.server;
    let options =
        LeaseOptions { ttl: args.ttl, wait: args.wait, timeout: server.timeout, label: args.label.value() };
    let lock = servers::open_confirmed(server, options, Some(&args.confirm))?;
    if args.every.is_some() && lock.as_locker().is_none() {
        return Err(CliError::Usage(
            "--every needs one server (or one Redis Cluster): the period is measured on its clock, and independent servers have none in common".into(),
        ));
    }
    let holding = servers::holding(&lock, args.key.name(), args.permits.count, args.shared)?;
    let ctx = Context::new(args.key.name(), args.wait, &args.server);

    let acquire = servers::acquire(&lock, args.key.name(), &holding, |err| {
        tracing::info!(key = %args.key.name(), error = %err, "lock busy, waiting up to {}", duration::format(args.wait));
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
            let unavailable = err.is_unavailable();
            let err = diagnose::explain(&err, ctx);
            if let CliError::Busy(msg) = &err {
                // Skipping is the normal outcome on all but one host: a notice, not an error.
                let exit = args.conflict_exit_code;
                out.record(
                    Some(msg),
                    json!({ "outcome": "skipped", "key": args.key.name(), "exit_code": exit, "message": msg }),
                );
                return Ok(exit);
            }
            if !unavailable {
                return Err(err);
            }
            return match args.on_unavailable {
                OnUnavailable::Fail => Err(err),
                OnUnavailable::Skip => Ok(skip_unavailable(args.key.name(), &err, out)),
                OnUnavailable::Run => run_unlocked(args, &err, out, signals).await,
            };
        }
    };

    let granted_at = Instant::now();
    let fence = lease.fence();
    warn_about_minority(&lease, out);
    tracing::info!(key = %args.key.name(), fence, servers = %servers::describe(&lock), valid = ?lease.remaining(), "lease acquired");
    let due = match args.every {
        None => None,
        Some(every) => match lock.schedule(&lease, every).await {
            Ok(Schedule::Due(due)) => Some(due),
            Ok(Schedule::NotDue { last, due_in }) => {
                release_lease(lease, out).await;
                return Ok(not_due(args, &last, due_in, out));
            }
            Err(err) => {
                release_lease(lease, out).await;
                return Err(schedule_failed(&err, args.key.name(), ctx));
            }
        },
    };
    // A terminal's Ctrl-C reaches the whole foreground group anyway, and an interactive
    // command must stay in it to read the terminal; under cron it gets a group of its own.
    let own_group = !std::io::stdin().is_terminal();
    let env = LeaseEnv { key: args.key.name(), fence, ttl_ms: lock.config().ttl_ms(), epoch: false };
    let mut job = match Job::spawn(&args.command.argv(), Some(env), own_group).await {
        Ok(job) => job,
        Err(err) => {
            release_lease(lease, out).await;
            return Err(err);
        }
    };
    tracing::debug!(pid = job.pid(), own_group, "command started");
    let kept = lease.keep_alive();
    let held = Held::lease(kept.handle());
    let outcome = supervise(&mut job, &held, args.kill_grace, signals, out).await;
    match outcome {
        Supervised::Exited(status) => {
            hold(&kept, granted_at + args.min_hold, signals).await;
            stop_left_behind(job, args.kill_grace, out).await;
            if let Some(due) = due {
                record_run(due, exit_code(status), args.count_failures, out).await;
            }
            release(&lock, kept, out).await;
            let exit = exit_code(status);
            tracing::info!(key = %args.key.name(), fence, exit, "command finished, lease released");
            out.record(
                None,
                json!({ "outcome": "completed", "key": args.key.name(), "fence": fence, "exit_code": exit }),
            );
            Ok(exit)
        }
        Supervised::Lost { reason, status } => {
            release(&lock, kept, out).await;
            let msg = format!(
                "the command was terminated because the lease on {:?} (fence {fence}) was lost ({reason}); {}",
                args.key.name(),
                describe_status(status)
            );
            ended_by_loss(
                out,
                json!({ "outcome": "lease_lost", "key": args.key.name(), "fence": fence }),
                msg,
            )
        }
        Supervised::Failed(err) => {
            // Dropping the job has its guardian kill the whole tree.
            drop(job);
            release(&lock, kept, out).await;
            Err(lost_track(err))
        }
    }
}

/// Releases a lease no command ran under; a failure only costs the next holder the ttl.
async fn release_lease(lease: Lease, out: Output) {
    if let Err(e) = lease.release().await {
        out.warning(&format!("could not release the lease ({e}); it expires after its ttl"));
    }
}

/// `--every`, the last counted run less than a period ago: skipped as for a busy lock (a
/// notice, silent with -q, and the conflict exit code).
fn not_due(args: &RunArgs, last: &LastRun, due_in: Duration, out: Output) -> u8 {
    let msg = format!(
        "not due: {:?} {}; due again in {}",
        args.key.name(),
        describe_last_run(last),
        duration::format_approx(due_in)
    );
    let exit = args.conflict_exit_code;
    out.record(
        Some(&msg),
        json!({ "outcome": "skipped", "reason": "not_due", "key": args.key.name(), "exit_code": exit,
                "last_run": last_run_json(last), "due_in_ms": due_in.as_millis() as u64, "message": msg }),
    );
    exit
}

/// Why `--every` could not read the job's record. The record is read and written with
/// `EVAL`, which an ACL may deny while it allows the fencedlock commands: say so, rather
/// than blame the lock commands.
fn schedule_failed(err: &Error, key: &str, ctx: Context<'_>) -> CliError {
    match err {
        Error::Server { node, source } if Cause::of(source) == Cause::NoPermission => CliError::Unavailable(format!(
            "--every keeps the job's run record in {:?} with EVAL, which the server at {node} does not allow this user ({}): grant `+eval ~{}*`",
            String::from_utf8_lossy(&record_key(key.as_bytes())),
            diagnose::error_text(source),
            RECORD_KEY_PREFIX.trim_end_matches('{')
        )),
        _ => diagnose::explain(err, ctx),
    }
}

/// `--every`: counts the run (a failed one only with --count-failures) before the lease is
/// released, so the next holder finds it on record.
async fn record_run(due: Due, exit: u8, count_failures: bool, out: Output) {
    if exit != 0 && !count_failures {
        tracing::info!(exit, "the command failed; the run is not counted (--count-failures counts it)");
        return;
    }
    match due.record(i64::from(exit)).await {
        Ok(true) => tracing::info!(exit, "run recorded"),
        Ok(false) => out.warning(
            "the run was not recorded: a newer holder's run is on record (this lease was lost during the run)",
        ),
        Err(e) => out.warning(&format!(
            "the run could not be recorded ({e}); the job may run again within the period"
        )),
    }
}

/// `--on-unavailable skip`: like a busy lock, a notice (silent with -q) and exit 75.
pub(crate) fn skip_unavailable(key: &str, err: &CliError, out: Output) -> u8 {
    let msg = format!("skipped (--on-unavailable skip): {}", err.one_line());
    out.record(
        Some(&msg),
        json!({ "outcome": "skipped", "reason": "unavailable", "key": key, "exit_code": code::BUSY,
                "message": msg }),
    );
    code::BUSY
}

/// `--on-unavailable run`: the command runs without a lease, so it gets no fence (a missing
/// `FENCEDLOCK_FENCE` is how it can tell), and the warning is shown even with `-q`.
async fn run_unlocked(
    args: &RunArgs,
    err: &CliError,
    out: Output,
    signals: &mut Signals,
) -> Result<u8, CliError> {
    out.warning(&format!(
        "running the command WITHOUT the lock on {:?} (--on-unavailable run; FENCEDLOCK_FENCE is not set): {}",
        args.key.name(),
        err.one_line()
    ));
    let own_group = !std::io::stdin().is_terminal();
    let mut job = Job::spawn(&args.command.argv(), None, own_group).await?;
    let status = loop {
        tokio::select! {
            biased;
            status = job.wait() => break status,
            sig = signals.recv() => {
                tracing::info!(signal = sig, pid = job.pid(), "forwarding signal to the command");
                job.signal(sig);
            }
        }
    };
    let status = status.map_err(|e| CliError::Internal(format!("lost track of the command: {e}")))?;
    stop_left_behind(job, args.kill_grace, out).await;
    let exit = exit_code(status);
    out.record(None, json!({ "outcome": "unlocked", "key": args.key.name(), "exit_code": exit }));
    Ok(exit)
}

/// Stops what the exited command left running (background processes, daemons) before the
/// lease is released: once it is, another host may run the job, and nothing of this run may
/// still be at work.
pub(crate) async fn stop_left_behind(job: Job, grace: Duration, out: Output) {
    let left = job.finish(grace).await;
    if left > 0 {
        out.warning(&format!(
            "the command exited but left {left} process(es) running; they were stopped (SIGTERM, SIGKILL after {}) before the lease was released",
            duration::format(grace)
        ));
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

/// How a command's run under a kept-alive lease ended.
pub(crate) enum Supervised {
    /// The command exited (the lease is still held, or was lost just before).
    Exited(std::process::ExitStatus),
    /// The lease was lost and the command terminated.
    Lost { reason: String, status: std::io::Result<std::process::ExitStatus> },
    /// fencedlock lost track of the command.
    Failed(std::io::Error),
}

/// What the command runs under, for the supervisor's messages: a lease (`run`) or a
/// leadership (`elect`), and its number (the fence, the epoch).
pub(crate) struct Held {
    handle: LeaseHandle,
    /// "the lease on" / "the leadership of".
    what: &'static str,
    /// "fence" / "epoch".
    number: &'static str,
}

impl Held {
    /// A lease, as `run` holds it.
    pub(crate) fn lease(handle: LeaseHandle) -> Held {
        Held { handle, what: "the lease on", number: "fence" }
    }

    /// A leadership, as `elect` holds it.
    pub(crate) fn leadership(handle: LeaseHandle) -> Held {
        Held { handle, what: "the leadership of", number: "epoch" }
    }

    /// "the lease on \"k\" (fence 7)".
    fn describe(&self) -> String {
        format!("{} {:?} ({} {})", self.what, self.handle.key(), self.number, self.handle.fence())
    }
}

/// Waits for the command while the lease is kept alive, forwarding signals; terminates it
/// (SIGTERM, SIGKILL after `kill_grace` or at the lease's validity end) once the lease is lost.
pub(crate) async fn supervise(
    job: &mut Job,
    held: &Held,
    kill_grace: Duration,
    signals: &mut Signals,
    out: Output,
) -> Supervised {
    let lost = held.handle.cancellation();
    loop {
        tokio::select! {
            biased;
            status = job.wait() => {
                return match status {
                    Ok(status) => {
                        if lost.is_cancelled() {
                            out.warning(&format!("{} was lost shortly before the command exited", held.describe()));
                        }
                        Supervised::Exited(status)
                    }
                    Err(err) => Supervised::Failed(err),
                };
            }
            _ = lost.cancelled() => {
                let reason = match held.handle.loss() {
                    Some(fencedlock::Error::LeaseLost { cause, .. }) => cause.to_string(),
                    Some(other) => other.to_string(),
                    None => "the keep-alive stopped".into(),
                };
                let now = Instant::now();
                let valid_until = Instant::from_std(held.handle.valid_until());
                let kill_at = kill_deadline(now, kill_grace, valid_until);
                let when = if kill_at <= now {
                    "at once (the lease's validity has ended; a command that needs a graceful shutdown needs a longer --ttl)".to_string()
                } else if kill_at < now + kill_grace {
                    format!(
                        "in {} (the lease's validity ends then; --kill-grace is longer, and a command that needs a longer shutdown needs a longer --ttl)",
                        duration::format(round_to_ms(kill_at - now))
                    )
                } else {
                    format!("in {}", duration::format(kill_grace))
                };
                out.warning(&format!(
                    "{} lost: {reason}; sending SIGTERM to the command, SIGKILL {when}",
                    held.describe(),
                ));
                let status = terminate(job, kill_at, signals).await;
                return Supervised::Lost { reason, status };
            }
            sig = signals.recv() => {
                tracing::info!(signal = sig, pid = job.pid(), "forwarding signal to the command");
                job.signal(sig);
            }
        }
    }
}

/// When a command whose lease was lost at `now` gets SIGKILL: after `kill_grace`, but never
/// after the lease's local validity ends (at once if it already has), since past that moment
/// another owner may hold the lock and the command would run beside it.
fn kill_deadline(now: Instant, kill_grace: Duration, valid_until: Instant) -> Instant {
    (now + kill_grace).min(valid_until).max(now)
}

/// For messages: `duration::format` shows whole milliseconds.
fn round_to_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Terminates the command after a lost lease (SIGTERM now, SIGKILL at `kill_at`), still
/// forwarding signals meanwhile.
async fn terminate(
    job: &mut Job,
    kill_at: Instant,
    signals: &mut Signals,
) -> std::io::Result<std::process::ExitStatus> {
    let stopping = job.terminate(kill_at);
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
async fn hold(kept: &KeptLease, until: Instant, signals: &mut Signals) {
    if until <= Instant::now() {
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
/// Releases to servers that had not answered when a majority did get a short grace to land.
pub(crate) async fn release(lock: &Redlock, kept: KeptLease, out: Output) {
    let key = kept.key().to_owned();
    match kept.release().await {
        Ok(true) => {}
        Ok(false) => tracing::info!(key, "the lease had already ended before the release"),
        Err(err) if err.is_lease_lost() => tracing::info!(key, error = %err, "lease already lost"),
        Err(err) => out.warning(&format!(
            "could not release the lease on {key:?} ({err}); it expires by itself after its ttl"
        )),
    }
    servers::settle(lock).await;
}

/// How a command ends when the lease (or leadership) it ran under was lost: with `--json`,
/// `record` with the exit code and `message` added, and exit 76; otherwise the error that
/// prints `message` and exits 76.
pub(crate) fn ended_by_loss(
    out: Output,
    mut record: serde_json::Value,
    message: String,
) -> Result<u8, CliError> {
    if out.json {
        if let serde_json::Value::Object(fields) = &mut record {
            fields.insert("exit_code".to_owned(), code::LEASE_LOST.into());
            fields.insert("message".to_owned(), message.into());
        }
        out.record(None, record);
        return Ok(code::LEASE_LOST);
    }
    Err(CliError::LeaseLost(message))
}

/// The error for a command whose supervision failed (its process could not be waited for).
pub(crate) fn lost_track(err: impl std::fmt::Display) -> CliError {
    CliError::Internal(format!("lost track of the command: {err}"))
}

/// How the terminated command ended. Asks the status for a signal rather than reading it back
/// from the shell-style exit code: a command that itself exits with 130 was not killed.
pub(crate) fn describe_status(status: std::io::Result<std::process::ExitStatus>) -> String {
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
    fn sigkill_comes_at_the_grace_or_the_validity_end_whichever_is_first() {
        let now = Instant::now();
        let s = Duration::from_secs;
        // Grace shorter than the validity left: the grace decides.
        assert_eq!(kill_deadline(now, s(2), now + s(5)), now + s(2));
        // Validity ends first (the 3 s ttl with the default 10 s grace).
        assert_eq!(kill_deadline(now, s(10), now + s(2)), now + s(2));
        // Validity already over (an expired lease): at once.
        assert_eq!(kill_deadline(now + s(3), s(10), now + s(2)), now + s(3));
        assert_eq!(kill_deadline(now, Duration::ZERO, now + s(2)), now);
    }

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
