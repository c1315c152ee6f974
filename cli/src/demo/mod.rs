//! The billing demo: three workers race to send invoice inv_72. The first to win the lock
//! stalls (a stop-the-world pause between its lease check and its write) longer than its
//! lease; another worker takes over with a higher fence and sends the invoice. When the
//! stalled worker wakes up, only the fence check in the SQL `UPDATE` stops it from sending the
//! invoice a second time. `--no-fence` removes that check and shows the double send.
//!
//! `--stale-first` is the lesson's other ordering: the stalled worker's write reaches the table
//! after the new owner read the invoice but before its first write. The table has nothing newer
//! to compare against, so the stale write is accepted and the new owner then sends from what it
//! read before. `--claim` makes every owner's first step a claim (`fencedlock-guard`'s
//! `claim`) that raises the row's fence in the statement that reads it: the stale write is then
//! refused wherever it lands.
//!
//! The invoices live in SQLite (a temporary file, or `--db PATH`) or in PostgreSQL
//! (`--database postgres://…`, in a schema of the demo's own); the fenced writes and the claim
//! are `fencedlock-guard`'s, the same on both. The workers take these decisions from the arguments; a watch channel
//! orders them, so each combination's verdict is deterministic.

mod ledger;
mod timeline;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencedlock::Redlock;
use futures::future::join_all;
use serde_json::json;
use tokio::sync::watch;

use crate::args::DemoArgs;
use crate::diagnose::{self, Context};
use crate::duration;
use crate::error::{code, CliError};
use crate::output::Output;
use crate::servers::{self, LeaseOptions};
use ledger::{Claim, Database, Guard, Invoice, Ledger, LedgerError, Write};
use timeline::Timeline;

const INVOICE: &str = "inv_72";
const AMOUNT_CENTS: i64 = 12_900;
const WORKERS: usize = 3;

/// What the demo checks, as printed and reported in `--json`.
const INVARIANT: &str = "the invoice is sent exactly once, the paused worker's stale write is refused, \
and no worker sends from state that changed after it read it";

/// What one worker did, for the final check.
#[derive(Debug, Default)]
struct Report {
    stale_writes_refused: usize,
    stale_writes_accepted: usize,
    /// Sends whose writer had read the invoice as unsent but found it sent when it wrote.
    sent_on_changed_state: usize,
}

/// Which of the demo's two orderings runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    /// The new owner sends first; the stale write arrives after it.
    NewOwnerFirst,
    /// `--stale-first`: the stale write lands between the new owner's read and its send.
    StaleFirst,
}

/// A worker's part in the race, by the order the lock was granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The first owner: stalls past its lease between its check and its write.
    Stalled,
    /// The owner after the stalled one: the one the stale write races with.
    Takeover,
    /// Any later owner: finds the work done.
    Later,
}

/// How far the race has got; the workers wait on it instead of sleeping.
#[derive(Debug, Default, Clone, Copy)]
struct Progress {
    /// How many workers are done.
    done: usize,
    /// The takeover worker has read (with `--claim`: claimed) the invoice.
    takeover_read: bool,
    /// The stalled worker's write reached the table (accepted or refused).
    stale_landed: bool,
}

/// State shared by the racing workers.
struct Race {
    key: String,
    ttl: Duration,
    guard: Guard,
    order: Order,
    /// `--claim`: each owner claims the row (raises its fence) in the transaction that reads it.
    claim: bool,
    db: Database,
    timeline: Timeline,
    /// Grants so far: a worker's role is the order it was granted the lock in.
    grants: AtomicUsize,
    progress: watch::Sender<Progress>,
}

impl Race {
    /// How long a worker waits for another's step before going on anyway: only reached if
    /// that worker failed (the stalled one needs up to four leases for the takeover).
    fn patience(&self) -> Duration {
        self.ttl * 4 + Duration::from_secs(20)
    }

    /// Waits (bounded by [`Race::patience`]) until `ready` holds.
    async fn wait_until(&self, ready: impl FnMut(&Progress) -> bool) {
        let mut progress = self.progress.subscribe();
        let _ = tokio::time::timeout(self.patience(), progress.wait_for(ready)).await;
    }
}

/// Runs the demo; exit 0 if [`INVARIANT`] holds, 65 if it was violated.
pub async fn run(args: &DemoArgs, out: Output) -> Result<u8, CliError> {
    let global = &args.server;
    let guard = if args.no_fence { Guard::Unguarded } else { Guard::Fenced };
    let options = LeaseOptions {
        ttl: args.ttl,
        // Long enough for the takeover after the stalled lease expires.
        wait: args.ttl * 4 + Duration::from_secs(10),
        timeout: global.timeout,
        label: None,
    };
    let probe = servers::open(global, options.clone())?;
    preflight(&probe, &args.key).await?;

    let tmp;
    let db = match (&args.database, &args.db) {
        (Some(url), _) => Database::Postgres(url.clone()),
        (None, Some(path)) => Database::Sqlite(path.clone()),
        (None, None) => {
            tmp = tempfile::Builder::new().prefix("fencedlock-demo-").tempdir().map_err(|e| {
                CliError::Io(format!("cannot create a temporary directory: {e}; pass --db PATH"))
            })?;
            Database::Sqlite(tmp.path().join("billing.db"))
        }
    };
    db.create(INVOICE, AMOUNT_CENTS).await.map_err(|e| ledger_error(&db, e))?;

    let race = Arc::new(Race {
        key: args.key.clone(),
        ttl: args.ttl,
        guard,
        order: if args.stale_first { Order::StaleFirst } else { Order::NewOwnerFirst },
        claim: args.claim,
        db,
        timeline: Timeline::new(!out.json),
        grants: AtomicUsize::new(0),
        progress: watch::channel(Progress::default()).0,
    });
    header(&race, &probe);

    let workers = (1..=WORKERS).map(|i| {
        let race = Arc::clone(&race);
        let lock = servers::open(global, options.clone());
        async move {
            let name = format!("worker-{i}");
            let result = match lock {
                Ok(lock) => worker(&name, &lock, &race).await,
                Err(e) => Err(e),
            };
            if let Err(e) = &result {
                race.timeline.log(&name, format!("failed: {}", e.one_line()));
            }
            race.progress.send_modify(|p| p.done += 1);
            result
        }
    });
    let mut report = Report::default();
    for result in join_all(workers).await {
        let r = result?;
        report.stale_writes_refused += r.stale_writes_refused;
        report.stale_writes_accepted += r.stale_writes_accepted;
        report.sent_on_changed_state += r.sent_on_changed_state;
    }
    conclude(&race, &report, out).await
}

/// Fails early, with the usual one-line advice, if the server is unusable.
async fn preflight(lock: &Redlock, key: &str) -> Result<(), CliError> {
    let ctx = Context { key, waited: Duration::ZERO, credentials: false };
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
    t.say(format!("Resource: {}; each send runs", race.db.describe()));
    t.say(format!("  {}", race.db.send_sql(race.guard).unwrap_or_else(|e| e.to_string())));
    if race.guard == Guard::Unguarded {
        t.say("  (--no-fence: the table does not check the fence; the lock alone must prevent double sends)");
    }
    if race.claim {
        t.say("Each new owner first claims the row, reading the invoice in the same statement (--claim):");
        t.say(format!("  {}", race.db.claim_sql().unwrap_or_else(|e| e.to_string())));
    }
    t.say(match race.order {
        Order::NewOwnerFirst => "Ordering: the new owner sends before the paused worker's write arrives.",
        Order::StaleFirst => {
            "Ordering (--stale-first): the paused worker's write arrives after the new owner read the invoice, before its send."
        }
    });
    t.say(format!("Invariant: {INVARIANT}."));
    t.say("");
}

async fn worker(name: &str, lock: &Redlock, race: &Race) -> Result<Report, CliError> {
    let t = &race.timeline;
    let mut ledger = race.db.open().await.map_err(|e| ledger_error(&race.db, e))?;
    let lease = servers::acquire(lock, &race.key, &servers::Holding::Lock, |_| {
        t.log(name, "lock busy (another worker holds it); waiting for it");
    })
    .await
    .map_err(|e| {
        diagnose::explain(
            &e,
            Context { key: &race.key, waited: lock.config().max_wait(), credentials: false },
        )
    })?;
    let fence = lease.fence();
    let role = match race.grants.fetch_add(1, Ordering::SeqCst) {
        0 => Role::Stalled,
        1 => Role::Takeover,
        _ => Role::Later,
    };
    t.log(
        name,
        format!("acquired the lock with fence {fence} (lease valid {} ms)", lease.remaining().as_millis()),
    );

    let Some(invoice) = read(name, &mut ledger, fence, race).await? else {
        release(name, lease, t).await;
        return Ok(Report::default());
    };
    if role == Role::Takeover {
        race.progress.send_modify(|p| p.takeover_read = true);
    }
    if invoice.sent > 0 {
        t.log(name, "invoice already sent: nothing to do");
        release(name, lease, t).await;
        return Ok(Report::default());
    }
    match role {
        Role::Stalled => return stalled(name, &mut ledger, lease, race).await,
        Role::Takeover if race.order == Order::StaleFirst => {
            t.log(name, "invoice not sent yet: preparing it (rendering the PDF takes a moment)");
            race.wait_until(|p| p.stale_landed).await;
            t.log(name, "sending, from the state it read");
        }
        _ => t.log(name, "invoice not sent yet: sending"),
    }
    let mut report = Report::default();
    if let Write::Accepted { sent, .. } = write(name, &mut ledger, fence, race, false).await? {
        report.sent_on_changed_state = usize::from(sent > invoice.sent + 1);
    }
    release(name, lease, t).await;
    Ok(report)
}

/// The read an owner decides from: with `--claim`, the claim (which raises the row's fence in
/// the same statement); `None` if a newer fence already holds the row.
async fn read(name: &str, ledger: &mut Ledger, fence: u64, race: &Race) -> Result<Option<Invoice>, CliError> {
    let t = &race.timeline;
    if !race.claim {
        let invoice = ledger.invoice(INVOICE).await.map_err(|e| ledger_error(&race.db, e))?;
        t.log(
            name,
            format!("read the invoice: {} (table's last_fence {})", state(invoice.sent), invoice.last_fence),
        );
        return Ok(Some(invoice));
    }
    match ledger.claim(INVOICE, fence).await.map_err(|e| ledger_error(&race.db, e))? {
        Claim::Claimed { sent } => {
            t.log(
                name,
                format!(
                    "claimed the invoice: last_fence raised to {fence} in the statement that read it ({})",
                    state(sent)
                ),
            );
            Ok(Some(Invoice { sent, last_fence: fence }))
        }
        Claim::Newer { last_fence } => {
            t.log(name, format!("claim REFUSED: a newer fence ({last_fence}) holds the invoice; abandoning"));
            Ok(None)
        }
    }
}

fn state(sent: u32) -> String {
    match sent {
        0 => "not sent".to_owned(),
        n => format!("sent {n} time{}", if n == 1 { "" } else { "s" }),
    }
}

/// The stalled worker: its check passes, then the pause hits before the write. It wakes when
/// the ordering wants its write to land, and never before its lease is surely gone.
async fn stalled(
    name: &str,
    ledger: &mut Ledger,
    lease: fencedlock::Lease,
    race: &Race,
) -> Result<Report, CliError> {
    let t = &race.timeline;
    let fence = lease.fence();
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
    match race.order {
        Order::NewOwnerFirst => race.wait_until(|p| p.done >= WORKERS - 1).await,
        Order::StaleFirst => race.wait_until(|p| p.takeover_read || p.done >= WORKERS - 1).await,
    }
    tokio::time::sleep(lease.remaining()).await;
    t.log(
        name,
        format!(
            "resumed after {} ms, still believing it holds fence {fence}: writes without checking again",
            paused.elapsed().as_millis()
        ),
    );
    let written = write(name, ledger, fence, race, true).await;
    race.progress.send_modify(|p| p.stale_landed = true);
    let accepted = matches!(written?, Write::Accepted { .. });
    match lease.release().await {
        Ok(false) => t.log(name, "release: the lease was no longer its own (it expired during the pause)"),
        Ok(true) => t.log(name, "released"),
        Err(e) => t.log(name, format!("release failed: {e}")),
    }
    Ok(Report {
        stale_writes_refused: usize::from(!accepted),
        stale_writes_accepted: usize::from(accepted),
        sent_on_changed_state: 0,
    })
}

/// The send, logged as the table answered it.
async fn write(
    name: &str,
    ledger: &mut Ledger,
    fence: u64,
    race: &Race,
    stale: bool,
) -> Result<Write, CliError> {
    let t = &race.timeline;
    let written =
        ledger.send(INVOICE, name, fence, race.guard).await.map_err(|e| ledger_error(&race.db, e))?;
    let what = match written {
        Write::Accepted { outbox_id, sent } => {
            let again = if sent > 1 { " AGAIN" } else { "" };
            if stale {
                let why = if sent > 1 { "" } else { ": no newer fence had reached the table yet" };
                format!("UPDATE with stale fence {fence} ACCEPTED: invoice sent{again} (outbox #{outbox_id}){why}")
            } else if sent > 1 {
                format!(
                    "UPDATE with fence {fence} accepted: invoice sent AGAIN (outbox #{outbox_id}), \
                     from state it read before the stale write"
                )
            } else {
                format!("UPDATE with fence {fence} accepted: invoice sent (outbox #{outbox_id})")
            }
        }
        Write::Refused { last_fence } => format!(
            "UPDATE with fence {fence} REFUSED by the table (last_fence is {last_fence}): stale write stopped"
        ),
    };
    t.log(name, what);
    Ok(written)
}

async fn release(name: &str, lease: fencedlock::Lease, t: &Timeline) {
    match lease.release().await {
        Ok(true) => t.log(name, "released the lock"),
        Ok(false) => t.log(name, "release: the lease had already ended"),
        Err(e) => t.log(name, format!("release failed ({e}); it expires after its ttl")),
    }
}

async fn conclude(race: &Race, report: &Report, out: Output) -> Result<u8, CliError> {
    let ledger = race.db.open().await.map_err(|e| ledger_error(&race.db, e))?;
    let invoice = ledger.invoice(INVOICE).await.map_err(|e| ledger_error(&race.db, e))?;
    let outbox = ledger.outbox(INVOICE).await.map_err(|e| ledger_error(&race.db, e))?;
    let fenced = race.guard == Guard::Fenced;
    let holds = invoice.sent == 1
        && outbox.len() == 1
        && report.stale_writes_refused == 1
        && report.stale_writes_accepted == 0
        && report.sent_on_changed_state == 0;
    let sends = outbox.iter().map(|(w, f)| format!("fence {f} by {w}")).collect::<Vec<_>>().join(", ");
    let t = &race.timeline;
    t.say("");
    t.say(format!(
        "Result: invoice {INVOICE} sent {} time{} ({sends}); stale writes refused by the table: {}.",
        invoice.sent,
        if invoice.sent == 1 { "" } else { "s" },
        report.stale_writes_refused
    ));
    t.say(verdict(race, report, &invoice, holds));
    let exit = if holds { code::OK } else { code::INVARIANT };
    if out.json {
        out.result(
            "",
            json!({
                "mode": if fenced { "fenced" } else { "no-fence" },
                "ordering": match race.order {
                    Order::NewOwnerFirst => "new-owner-first",
                    Order::StaleFirst => "stale-first",
                },
                "claim": race.claim,
                "database": race.db.kind(),
                "key": race.key,
                "invoice": INVOICE,
                "sent": invoice.sent,
                "last_fence": invoice.last_fence,
                "outbox": outbox.iter().map(|(w, f)| json!({ "worker": w, "fence": f })).collect::<Vec<_>>(),
                "stale_writes_refused": report.stale_writes_refused,
                "stale_writes_accepted": report.stale_writes_accepted,
                "sent_on_changed_state": report.sent_on_changed_state,
                "invariant": INVARIANT,
                "invariant_holds": holds,
                "exit_code": exit,
                "events": t.events(),
            }),
        );
    }
    Ok(exit)
}

/// The verdict line, with the lesson's explanation of what made it so.
fn verdict(race: &Race, report: &Report, invoice: &Invoice, holds: bool) -> String {
    if holds {
        return match race.order {
            Order::StaleFirst => "Invariant holds: exactly one invoice sent. The stale write arrived before the new owner's send, \
                 but the new owner had claimed the fence first, so the table refused it."
                .to_owned(),
            Order::NewOwnerFirst => {
                "Invariant holds: exactly one invoice sent, and the paused worker's stale write was refused.".to_owned()
            }
        };
    }
    if race.guard == Guard::Unguarded && invoice.sent > 1 {
        return format!(
            "Invariant VIOLATED: the invoice was sent {} times. The lock alone cannot stop a paused worker; \
             the fence checked by the table does (run without --no-fence).",
            invoice.sent
        );
    }
    if report.stale_writes_accepted > 0 && report.sent_on_changed_state > 0 {
        return format!(
            "Invariant VIOLATED: the invoice was sent {} times. The stale write reached the table before any newer fence \
             had, so the table had nothing newer to compare against and accepted it; the new owner then sent from \
             state it had read before that write. Fencing is an ordering boundary, not a cancellation: the new owner \
             must claim the fence first, in the transaction that reads the invoice (run with --claim).",
            invoice.sent
        );
    }
    format!(
        "Invariant VIOLATED: sent {} time(s), {} stale write(s) refused, {} accepted, {} send(s) from state changed after it was read.",
        invoice.sent, report.stale_writes_refused, report.stale_writes_accepted, report.sent_on_changed_state
    )
}

/// A database failure as the CLI reports it: a PostgreSQL that cannot be reached is
/// "unavailable" (69), anything else internal (70).
fn ledger_error(db: &Database, err: LedgerError) -> CliError {
    let message = format!("{}: {err}", db.describe());
    match (&err, db) {
        (LedgerError::Postgres(e), Database::Postgres(_)) if e.as_db_error().is_none() => {
            CliError::Unavailable(message)
        }
        _ => CliError::Internal(message),
    }
}
