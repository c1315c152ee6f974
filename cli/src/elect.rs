//! `fencedlock elect NAME -- CMD` and `fencedlock leader NAME [--watch]`: leader election from
//! the shell, after `etcdctl elect`, over the client's [`Election`]. The elected command runs
//! under `run`'s machinery (the guardian, the supervisor): it never outlives leadership.

use std::io::IsTerminal;
use std::time::Duration;

use fencedlock::{Election, Leader, Leadership, Redlock};
use futures::StreamExt;
use serde_json::json;

use crate::args::{ElectArgs, LeaderArgs, ServerArgs};
use crate::diagnose::{self, Context};
use crate::duration;
use crate::error::{code, CliError};
use crate::output::Output;
use crate::run::signals::Signals;
use crate::run::{self, exit_code, Held, Job, LeaseEnv, Supervised};
use crate::servers::{self, LeaseOptions};

/// Pause before campaigning again after the server could not answer: long enough not to
/// hammer a server that refuses connections at once, short beside any useful ttl.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// The election on `key` over `server` (one server or a cluster), with leases of `ttl`.
fn election(server: &ServerArgs, key: &str, ttl: Duration) -> Result<(Redlock, Election), CliError> {
    let options = LeaseOptions { ttl, wait: Duration::ZERO, timeout: server.timeout, label: None };
    let lock = servers::open(server, options)?;
    let Some(locker) = lock.as_locker() else {
        return Err(CliError::Usage(format!(
            "an election needs one --redis server (or a --cluster), not {}: a Redlock majority has no single leader to show",
            servers::describe(&lock)
        )));
    };
    Ok((lock, Election::new(locker, key)))
}

/// Campaigns, then runs the command while leader; its exit code, or 76 if leadership was lost.
pub async fn elect(args: &ElectArgs, out: Output, signals: &mut Signals) -> Result<u8, CliError> {
    let key = args.key.name();
    let Some(label) = args.label.value() else {
        return Err(CliError::Usage(
            "a leader has a label (`fencedlock leader` shows it): leave out --no-label, or give --label TEXT"
                .into(),
        ));
    };
    let (lock, election) = election(&args.server, key, args.ttl)?;
    let ctx = Context::new(key, Duration::ZERO, &args.server);
    let leadership = tokio::select! {
        elected = campaign(&election, &label, ctx, out) => elected?,
        sig = signals.recv() => {
            out.notice(&format!("signal {sig} received before this candidate was elected; nothing was run"));
            return Ok(code::SIGNAL_BASE.saturating_add(u8::try_from(sig).unwrap_or(0)));
        }
    };
    let epoch = leadership.epoch();
    out.record(
        Some(&format!("elected leader of {key:?} (epoch {epoch}, label {label:?})")),
        json!({ "outcome": "elected", "key": key, "epoch": epoch, "label": label }),
    );
    // Under cron or systemd, the command's own group, so a lost leadership stops all of it.
    let own_group = !std::io::stdin().is_terminal();
    let env = LeaseEnv { key, fence: epoch, ttl_ms: lock.config().ttl_ms(), epoch: true };
    let mut job = match Job::spawn(&args.command.argv(), Some(env), own_group).await {
        Ok(job) => job,
        Err(err) => {
            resign(&lock, leadership, out).await;
            return Err(err);
        }
    };
    let held = Held::leadership(leadership.handle());
    match run::supervise(&mut job, &held, args.kill_grace, signals, out).await {
        Supervised::Exited(status) => {
            run::stop_left_behind(job, args.kill_grace, out).await;
            resign(&lock, leadership, out).await;
            let exit = exit_code(status);
            out.record(
                None,
                json!({ "outcome": "completed", "key": key, "epoch": epoch, "exit_code": exit }),
            );
            Ok(exit)
        }
        Supervised::Lost { reason, status } => {
            resign(&lock, leadership, out).await;
            let msg = format!(
                "the command was terminated because the leadership of {key:?} (epoch {epoch}) was lost ({reason}); {}",
                run::describe_status(status)
            );
            run::ended_by_loss(out, json!({ "outcome": "leadership_lost", "key": key, "epoch": epoch }), msg)
        }
        Supervised::Failed(err) => {
            drop(job);
            resign(&lock, leadership, out).await;
            Err(run::lost_track(err))
        }
    }
}

/// Waits until elected. A server that cannot answer for a while (down, paused, failing
/// over) does not end the campaign: the candidate says so once and keeps trying, as a
/// standing candidate should; anything else (a misconfiguration) does.
async fn campaign(
    election: &Election,
    label: &str,
    ctx: Context<'_>,
    out: Output,
) -> Result<Leadership, CliError> {
    let mut told = false;
    loop {
        match election.campaign(label).await {
            Ok(leadership) => return Ok(leadership),
            Err(err) if err.is_retryable() => {
                if !told {
                    out.notice(&format!("{}; still campaigning", diagnose::explain(&err, ctx).one_line()));
                    told = true;
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(err) => return Err(diagnose::explain(&err, ctx)),
        }
    }
}

/// Steps down, which elects the next candidate at once; a failure only costs the rest of the
/// ttl (the next candidate is elected when it runs out).
async fn resign(lock: &Redlock, leadership: Leadership, out: Output) {
    let key = leadership.key().to_owned();
    match leadership.resign().await {
        Ok(_) => {}
        Err(err) if err.is_lease_lost() => tracing::info!(key, error = %err, "leadership already lost"),
        Err(err) => out.warning(&format!(
            "could not resign the leadership of {key:?} ({err}); the next candidate is elected when its ttl runs out"
        )),
    }
    servers::settle(lock).await;
}

/// Prints who leads, or (`--watch`) every change of leader until interrupted.
pub async fn leader(args: &LeaderArgs, out: Output, signals: &mut Signals) -> Result<u8, CliError> {
    let key = args.key.name();
    let (_lock, election) = election(&args.server, key, Duration::from_secs(1))?;
    let ctx = Context::new(key, Duration::ZERO, &args.server);
    if !args.watch {
        let leader = election.leader().await.map_err(|e| diagnose::explain(&e, ctx))?;
        let (text, value) = describe(key, leader.as_ref());
        out.result(&text, value);
        return Ok(code::OK);
    }
    let changes = election.with_poll_interval(args.interval).observe();
    tokio::pin!(changes);
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some(Ok(leader)) => {
                    let (text, value) = describe(key, leader.as_ref());
                    if !out.stream(&text, value) {
                        return Ok(code::OK);
                    }
                }
                // The stream goes on polling; say what failed, once per failure.
                Some(Err(err)) => out.warning(&diagnose::explain(&err, ctx).one_line()),
                None => return Ok(code::OK),
            },
            _ = signals.recv() => return Ok(code::OK),
        }
    }
}

/// A leader (or nobody) as a line and as `--json`. A leader with no time left is one the
/// election's journal recorded and a poll no longer found leading.
fn describe(key: &str, leader: Option<&Leader>) -> (String, serde_json::Value) {
    let Some(leader) = leader else {
        return (
            format!("{key}  no leader"),
            json!({ "key": key, "leader": null, "epoch": null, "pttl_ms": null }),
        );
    };
    let label = leader.label_lossy();
    let who = match &label {
        Some(label) => format!("leader {label:?}"),
        None => "leader (no label)".to_owned(),
    };
    let gone = leader.remaining.is_zero();
    let when = match gone {
        true => "resigned before this poll".to_owned(),
        false => format!("{} left", duration::format(leader.remaining)),
    };
    let text = format!("{key}  {who}  epoch {}  {when}", leader.epoch);
    let pttl = (!gone).then_some(leader.remaining.as_millis() as u64);
    (text, json!({ "key": key, "leader": label, "epoch": leader.epoch, "pttl_ms": pttl, "leading": !gone }))
}
