//! The billing demo: three workers race to send invoice inv_72. The first to win the lock
//! stalls (a stop-the-world pause between its lease check and its write) longer than its
//! lease; another worker takes over with a higher fence and sends the invoice. When the
//! stalled worker wakes up, only the fence check in the SQL `UPDATE` stops it from sending the
//! invoice a second time. `--no-fence` removes that check and shows the double send.

mod ledger;
mod timeline;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencedlock::Redlock;
use futures::future::join_all;
use serde_json::json;
use tokio::sync::watch;

use crate::args::{DemoArgs, Global};
use crate::diagnose::{self, Context};
use crate::duration;
use crate::error::{code, CliError};
use crate::output::Output;
use crate::servers::{self, LeaseOptions};
use ledger::{Guard, Ledger, Write};
use timeline::Timeline;

const INVOICE: &str = "inv_72";
const AMOUNT_CENTS: i64 = 12_900;
const WORKERS: usize = 3;

/// What one worker did, for the final check.
#[derive(Debug, Default)]
struct Report {
    stale_writes_refused: usize,
    stale_writes_accepted: usize,
}

/// State shared by the racing workers.
struct Race {
    key: String,
    ttl: Duration,
    guard: Guard,
    db: PathBuf,
    timeline: Timeline,
    /// Set by the first worker to be granted the lock: that one stalls.
    first_grant: AtomicBool,
    /// How many of the other workers are done; the stalled worker wakes when they all are.
    done: watch::Sender<usize>,
}

/// Runs the demo; exit 0 if the invoice was sent exactly once and the stale write refused,
/// 65 if the invariant was violated.
pub async fn run(args: &DemoArgs, global: &Global, out: Output) -> Result<u8, CliError> {
    let guard = if args.no_fence { Guard::Unguarded } else { Guard::Fenced };
    let options = LeaseOptions {
        ttl: args.ttl,
        // Long enough for the takeover after the stalled lease expires.
        wait: args.ttl * 4 + Duration::from_secs(10),
        timeout: global.timeout,
    };
    let probe = servers::open(&global.redis, options)?;
    preflight(&probe, &args.key).await?;

    let tmp;
    let db = match &args.db {
        Some(path) => path.clone(),
        None => {
            tmp = tempfile::Builder::new().prefix("fencedlock-demo-").tempdir().map_err(|e| {
                CliError::Io(format!("cannot create a temporary directory: {e}; pass --db PATH"))
            })?;
            tmp.path().join("billing.db")
        }
    };
    Ledger::create(&db, INVOICE, AMOUNT_CENTS).map_err(|e| sqlite(&db, e))?;

    let race = Arc::new(Race {
        key: args.key.clone(),
        ttl: args.ttl,
        guard,
        db: db.clone(),
        timeline: Timeline::new(!out.json),
        first_grant: AtomicBool::new(false),
        done: watch::channel(0).0,
    });
    header(&race, &probe);

    let workers = (1..=WORKERS).map(|i| {
        let race = Arc::clone(&race);
        let lock = servers::open(&global.redis, options);
        async move {
            let name = format!("worker-{i}");
            let result = match lock {
                Ok(lock) => worker(&name, &lock, &race).await,
                Err(e) => Err(e),
            };
            if let Err(e) = &result {
                race.timeline.log(&name, format!("failed: {}", e.one_line()));
            }
            race.done.send_modify(|n| *n += 1);
            result
        }
    });
    let mut report = Report::default();
    for result in join_all(workers).await {
        let r = result?;
        report.stale_writes_refused += r.stale_writes_refused;
        report.stale_writes_accepted += r.stale_writes_accepted;
    }
    conclude(&race, &report, out)
}

/// Fails early, with the usual one-line advice, if the server is unusable.
async fn preflight(lock: &Redlock, key: &str) -> Result<(), CliError> {
    let ctx = Context { key, waited: Duration::ZERO };
    let answers = servers::status(lock, key).await;
    let mut ok = 0;
    let mut first_error = None;
    for answer in answers {
        match answer.status {
            Ok(_) => ok += 1,
            Err(e) => {
                first_error.get_or_insert(diagnose::explain(&e, ctx));
            }
        }
    }
    match first_error {
        Some(err) if ok < lock.quorum() => Err(err),
        _ => Ok(()),
    }
}

fn header(race: &Race, lock: &Redlock) {
    let t = &race.timeline;
    t.say(format!(
        "Billing demo: {WORKERS} workers race to send invoice {INVOICE} (lock {:?}, lease {}, server {}).",
        race.key,
        duration::format(race.ttl),
        servers::describe(lock)
    ));
    t.say(format!("Resource: SQLite {}; each send runs", race.db.display()));
    t.say(format!("  {}", race.guard.sql()));
    if race.guard == Guard::Unguarded {
        t.say("  (--no-fence: the table does not check the fence; the lock alone must prevent double sends)");
    }
    t.say("");
}

async fn worker(name: &str, lock: &Redlock, race: &Race) -> Result<Report, CliError> {
    let t = &race.timeline;
    let mut ledger = Ledger::open(&race.db).map_err(|e| sqlite(&race.db, e))?;
    let lease = servers::acquire(lock, &race.key, |_| {
        t.log(name, "lock busy (another worker holds it); waiting for it");
    })
    .await
    .map_err(|e| diagnose::explain(&e, Context { key: &race.key, waited: lock.config().max_wait() }))?;
    let fence = lease.fence();
    let stalls = !race.first_grant.swap(true, Ordering::SeqCst);
    t.log(
        name,
        format!("acquired the lock with fence {fence} (lease valid {} ms)", lease.remaining().as_millis()),
    );

    let invoice = ledger.invoice(INVOICE).map_err(|e| sqlite(&race.db, e))?;
    if invoice.sent > 0 {
        t.log(
            name,
            format!("invoice already sent (table's last_fence {}): nothing to do", invoice.last_fence),
        );
        release(name, lease, t).await;
        return Ok(Report::default());
    }
    if !stalls {
        t.log(name, "invoice not sent yet: sending");
        write(name, &mut ledger, fence, race, false)?;
        release(name, lease, t).await;
        return Ok(Report::default());
    }

    // The stalled worker: its check passes, then the pause hits before the write.
    if lease.ensure_valid().is_ok() {
        t.log(
            name,
            format!(
                "invoice not sent yet; lease check passed ({} ms left): about to send",
                lease.remaining().as_millis()
            ),
        );
    }
    t.log(
        name,
        format!(
            "PAUSED (stop-the-world GC between its check and its write), longer than its {} lease",
            duration::format(race.ttl)
        ),
    );
    let paused = Instant::now();
    let others = WORKERS - 1;
    let limit = race.ttl * 4 + Duration::from_secs(20);
    let mut done = race.done.subscribe();
    let _ = tokio::time::timeout(limit, done.wait_for(|n| *n >= others)).await;
    // Never wake before the lease is surely gone, even if the others failed.
    tokio::time::sleep(lease.remaining()).await;
    t.log(
        name,
        format!(
            "resumed after {} ms, still believing it holds fence {fence}: writes without checking again",
            paused.elapsed().as_millis()
        ),
    );
    let accepted = write(name, &mut ledger, fence, race, true)?;
    match lease.release().await {
        Ok(false) => t.log(name, "release: the lease was no longer its own (it expired during the pause)"),
        Ok(true) => t.log(name, "released"),
        Err(e) => t.log(name, format!("release failed: {e}")),
    }
    Ok(Report { stale_writes_refused: usize::from(!accepted), stale_writes_accepted: usize::from(accepted) })
}

/// The send; `Ok(true)` if the table accepted it.
fn write(name: &str, ledger: &mut Ledger, fence: u64, race: &Race, stale: bool) -> Result<bool, CliError> {
    let t = &race.timeline;
    match ledger.send(INVOICE, name, fence, race.guard).map_err(|e| sqlite(&race.db, e))? {
        Write::Accepted { outbox_id } => {
            if stale {
                t.log(
                    name,
                    format!(
                        "UPDATE with stale fence {fence} ACCEPTED: invoice sent AGAIN (outbox #{outbox_id})"
                    ),
                );
            } else {
                t.log(
                    name,
                    format!("UPDATE with fence {fence} accepted: invoice sent (outbox #{outbox_id})"),
                );
            }
            Ok(true)
        }
        Write::Refused { last_fence } => {
            t.log(
                name,
                format!("UPDATE with fence {fence} REFUSED by the table (last_fence is {last_fence}): stale write stopped"),
            );
            Ok(false)
        }
    }
}

async fn release(name: &str, lease: fencedlock::Lease, t: &Timeline) {
    match lease.release().await {
        Ok(true) => t.log(name, "released the lock"),
        Ok(false) => t.log(name, "release: the lease had already ended"),
        Err(e) => t.log(name, format!("release failed ({e}); it expires after its ttl")),
    }
}

fn conclude(race: &Race, report: &Report, out: Output) -> Result<u8, CliError> {
    let ledger = Ledger::open(&race.db).map_err(|e| sqlite(&race.db, e))?;
    let invoice = ledger.invoice(INVOICE).map_err(|e| sqlite(&race.db, e))?;
    let outbox = ledger.outbox(INVOICE).map_err(|e| sqlite(&race.db, e))?;
    let fenced = race.guard == Guard::Fenced;
    let holds = invoice.sent == 1
        && outbox.len() == 1
        && (!fenced || (report.stale_writes_refused == 1 && report.stale_writes_accepted == 0));
    let sends = outbox.iter().map(|(w, f)| format!("fence {f} by {w}")).collect::<Vec<_>>().join(", ");
    let t = &race.timeline;
    t.say("");
    t.say(format!(
        "Result: invoice {INVOICE} sent {} time{} ({sends}); stale writes refused by the table: {}.",
        invoice.sent,
        if invoice.sent == 1 { "" } else { "s" },
        report.stale_writes_refused
    ));
    if holds {
        t.say("Invariant holds: exactly one invoice sent, and the paused worker's stale write was refused.");
    } else if !fenced && invoice.sent > 1 {
        t.say(format!(
            "Invariant VIOLATED: the invoice was sent {} times. The lock alone cannot stop a paused worker; the fence checked by the table does (run without --no-fence).",
            invoice.sent
        ));
    } else {
        t.say(format!(
            "Invariant VIOLATED: sent {} time(s), {} outbox entries, {} stale write(s) refused, {} accepted.",
            invoice.sent,
            outbox.len(),
            report.stale_writes_refused,
            report.stale_writes_accepted
        ));
    }
    let exit = if holds { code::OK } else { code::INVARIANT };
    if out.json {
        out.result(
            "",
            json!({
                "mode": if fenced { "fenced" } else { "no-fence" },
                "key": race.key,
                "invoice": INVOICE,
                "sent": invoice.sent,
                "last_fence": invoice.last_fence,
                "outbox": outbox.iter().map(|(w, f)| json!({ "worker": w, "fence": f })).collect::<Vec<_>>(),
                "stale_writes_refused": report.stale_writes_refused,
                "stale_writes_accepted": report.stale_writes_accepted,
                "invariant_holds": holds,
                "exit_code": exit,
                "events": t.events(),
            }),
        );
    }
    Ok(exit)
}

fn sqlite(path: &Path, err: rusqlite::Error) -> CliError {
    CliError::Internal(format!("SQLite error on {}: {err}", path.display()))
}
