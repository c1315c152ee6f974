//! `acquire`, `renew`, `release` and `status`: the lease lifecycle as separate commands, for
//! shell scripts that cannot wrap their work in `fencedlock run`.

use std::time::Duration;

use fencedlock::{Engine, LastRun, Redlock};
use serde_json::json;

use crate::args::{AcquireArgs, AcquireOnUnavailable, ReleaseArgs, RenewArgs, ServerArgs, StatusArgs};
use crate::diagnose::{self, Context};
use crate::duration;
use crate::error::{code, CliError};
use crate::output::Output;
use crate::servers::{self, LeaseOptions, NodeStatus};
use crate::show::{
    describe, describe_last_run, describe_semaphore, label_text, last_run_json, semaphore_json,
};
use crate::token_io;

/// The servers, for a request that takes no lease (so it carries no label).
fn open(server: &ServerArgs, ttl: Duration, wait: Duration) -> Result<Redlock, CliError> {
    servers::open(server, LeaseOptions { ttl, wait, timeout: server.timeout, label: None })
}

/// Takes a lease and leaves it held (detached) for later `renew` / `release`.
pub async fn acquire(args: &AcquireArgs, out: Output) -> Result<u8, CliError> {
    let server = &args.server;
    let options =
        LeaseOptions { ttl: args.ttl, wait: args.wait, timeout: server.timeout, label: args.label.value() };
    let lock = servers::open_confirmed(server, options, Some(&args.confirm))?;
    let ctx = Context::new(args.key.name(), args.wait, &args.server);
    // With no --wait (max_wait zero) this is a single attempt.
    let holding = servers::holding(&lock, args.key.name(), args.permits.count, false)?;
    let acquired = holding.take(&lock, args.key.name(), true).await;
    let lease = match acquired {
        Ok(lease) => lease,
        Err(e) if e.is_unavailable() && args.on_unavailable == AcquireOnUnavailable::Skip => {
            return Ok(crate::run::skip_unavailable(args.key.name(), &diagnose::explain(&e, ctx), out));
        }
        Err(e) => return Err(diagnose::explain(&e, ctx)),
    };
    crate::run::warn_about_minority(&lease, out);
    let fence = lease.fence();
    let valid_ms = lease.remaining().as_millis() as u64;
    let mut record = json!({ "key": args.key.name(), "fence": fence, "ttl_ms": lock.config().ttl_ms(), "valid_ms": valid_ms });
    let token = lease.detach();
    let text = match &args.token_file {
        Some(path) => {
            if let Err(err) = token_io::write(path, &token) {
                // Nobody could ever release it: give it back now rather than block the key.
                let _ = lock.release_token(args.key.name(), &token).await;
                return Err(err);
            }
            record["token_file"] = json!(path);
            fence.to_string()
        }
        None => {
            let token_text = token_io::to_text(&token);
            let text = format!("{token_text} {fence}");
            record["token"] = json!(token_text);
            text
        }
    };
    out.result(&text, record);
    Ok(code::OK)
}

/// Extends a lease by its token.
pub async fn renew(args: &RenewArgs, out: Output) -> Result<u8, CliError> {
    let token = token_io::read(&args.token)?;
    let lock = open(&args.server, args.ttl, Duration::ZERO)?;
    let ctx = Context::new(args.key.name(), Duration::ZERO, &args.server);
    let held = lock.renew_token(args.key.name(), &token).await.map_err(|e| diagnose::explain(&e, ctx))?;
    if !held {
        return Err(CliError::LeaseLost(format!(
            "the lease on {:?} is no longer held by this token (it expired or was taken over); acquire a new one",
            args.key.name()
        )));
    }
    out.result(
        &format!("renewed {:?} for {}", args.key.name(), duration::format(args.ttl)),
        json!({ "key": args.key.name(), "renewed": true, "ttl_ms": lock.config().ttl_ms() }),
    );
    Ok(code::OK)
}

/// Ends a lease by its token.
pub async fn release(args: &ReleaseArgs, out: Output) -> Result<u8, CliError> {
    let token = token_io::read(&args.token)?;
    let lock = open(&args.server, Duration::from_secs(1), Duration::ZERO)?;
    let ctx = Context::new(args.key.name(), Duration::ZERO, &args.server);
    let held = lock.release_token(args.key.name(), &token).await;
    servers::settle(&lock).await;
    let held = held.map_err(|e| diagnose::explain(&e, ctx))?;
    if !held {
        return Err(CliError::LeaseLost(format!(
            "the lease on {:?} was no longer held by this token (it expired or was taken over before the release)",
            args.key.name()
        )));
    }
    if let Some(path) = &args.token.token_file {
        let _ = std::fs::remove_file(path);
    }
    out.result(
        &format!("released {:?}", args.key.name()),
        json!({ "key": args.key.name(), "released": true }),
    );
    Ok(code::OK)
}

/// Shows the key's state on every server, and the majority's view.
pub async fn status(args: &StatusArgs, out: Output) -> Result<u8, CliError> {
    let lock = open(&args.server, Duration::from_secs(1), Duration::ZERO)?;
    let ctx = Context::new(args.key.name(), Duration::ZERO, &args.server);
    let answers = servers::status(&lock, args.key.name()).await;
    let quorum = lock.quorum();
    let mut lines = Vec::new();
    let mut per_server = Vec::new();
    let mut fences = Vec::new();
    let mut remaining = Vec::new();
    let mut labels = Vec::new();
    let mut answered = 0;
    let mut first_error = None;
    for answer in &answers {
        let engine = answer.engine.map(Engine::as_str);
        match &answer.status {
            // A semaphore's or readers' key: several holders.
            Ok(Some(semaphore)) if semaphore.permits != 1 => {
                answered += 1;
                fences.push(semaphore.fence);
                lines.push(format!("{}  {}", answer.server, describe_semaphore(semaphore)));
                per_server
                    .push(semaphore_json(semaphore, json!({ "server": answer.server, "engine": engine })));
            }
            Ok(state) => {
                answered += 1;
                // A lock key: at most one holder. No record, no fence (see `describe_lease`).
                let holder = state.as_ref().and_then(|s| s.holders.first());
                let fence = state.as_ref().map(|s| s.fence);
                let (held, pttl) = (holder.is_some(), holder.map(|h| h.remaining.as_millis() as u64));
                let label = holder.and_then(label_text);
                fences.extend(fence);
                if held {
                    remaining.push(pttl.unwrap_or(0));
                    labels.extend(label.clone());
                }
                lines.push(format!("{}  {}", answer.server, describe(fence, held, pttl, label.as_deref())));
                per_server.push(json!({
                    "server": answer.server, "engine": engine, "fence": fence, "held": held, "pttl_ms": pttl,
                    "label": label
                }));
            }
            Err(err) => {
                let explained = diagnose::explain(err, ctx);
                lines.push(format!("{}  error: {}", answer.server, explained.one_line()));
                per_server.push(
                    json!({ "server": answer.server, "engine": engine, "error": explained.one_line() }),
                );
                first_error.get_or_insert(explained);
            }
        }
    }
    if answered < quorum {
        return Err(first_error.unwrap_or_else(|| CliError::Unavailable("no server answered".into())));
    }
    // A semaphore, like readers, lives on one server (`--permits` and `--shared` refuse
    // several): shown holder by holder.
    if let [NodeStatus { status: Ok(Some(semaphore)), .. }] = answers.as_slice() {
        if semaphore.permits != 1 {
            let text = format!("{}  {}", args.key.name(), describe_semaphore(semaphore));
            // The lock's fields too, so a reader of either kind of key finds the same ones:
            // held until the last holder's lease ends; a semaphore has no one label.
            let last = semaphore.holders.iter().map(|h| h.remaining.as_millis() as u64).max();
            // No run record: a semaphore key is no `run --every` job (that takes one holder).
            let fields = json!({ "key": args.key.name(), "pttl_ms": last, "label": null, "servers": per_server,
                                 "last_run": null });
            out.result(&text, semaphore_json(semaphore, fields));
            return Ok(code::OK);
        }
    }
    // Held while a majority holds it: until the quorum-th longest remaining time runs out.
    remaining.sort_unstable_by(|a, b| b.cmp(a));
    let held = remaining.len() >= quorum;
    let pttl = held.then(|| remaining[quorum - 1]);
    let fence = fences.iter().copied().max();
    // The holder's label: the one a majority of servers show.
    let label =
        labels.iter().find(|l| held && labels.iter().filter(|other| other == l).count() >= quorum).cloned();
    let summary = describe(fence, held, pttl, label.as_deref());
    let mut text = if answers.len() == 1 {
        format!("{}  {summary}", args.key.name())
    } else {
        format!("{}\n{}  {summary} (majority of {})", lines.join("\n"), args.key.name(), answers.len())
    };
    let last_run = last_run(&lock, args.key.name()).await;
    if let Some(last) = &last_run {
        text.push_str(&format!("\n{}  {}", args.key.name(), describe_last_run(last)));
    }
    out.result(
        &text,
        json!({
            "key": args.key.name(), "fence": fence, "held": held, "pttl_ms": pttl, "label": label,
            "servers": per_server, "last_run": last_run.as_ref().map(last_run_json)
        }),
    );
    Ok(code::OK)
}

/// The last counted run of a `run --every` job on `key`, where one server keeps its record.
/// Best effort: a key that is no periodic job has none, and a server that denies scripts
/// (or a Redlock, whose masters keep no common record) shows the lock alone.
async fn last_run(lock: &Redlock, key: &str) -> Option<LastRun> {
    let locker = lock.as_locker()?;
    match locker.last_run(key).await {
        Ok(last) => last,
        Err(err) => {
            tracing::debug!(key, error = %err, "no run record read");
            None
        }
    }
}
