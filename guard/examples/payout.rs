//! The lesson's payout pattern: a side effect no fence can stop, made safe anyway.
//!
//! A payment provider does not check fences. A holder that called it and then lost its lease
//! (a pause, a timeout before the answer came back) has paid, whatever the database says, and
//! the next holder's retry would pay again. Three things make that safe, and the fence guards
//! every one of them:
//!
//! 1. **Intent first.** Before calling the provider, the holder claims the row and moves it to
//!    `SUBMITTING` with its fence, and commits. A later holder that finds `SUBMITTING` knows an
//!    attempt may already have reached the provider.
//! 2. **A stable idempotency key.** `provider_key` is derived once, when the payout is created,
//!    and sent on every attempt, so the provider answers a repeat with the original payment.
//! 3. **Reconciliation.** A job takes each row stuck in `SUBMITTING`, asks the provider by key
//!    what happened, and records it (`SUBMITTED`), or, if the provider never saw the key, puts
//!    the row back to `PENDING` for the next attempt (with the same key).
//!
//! The state transitions are guarded writes: a holder whose lease was taken over cannot record
//! its (late) answer over the newer holder's, and cannot move a finished payout back.
//!
//! Run it against a PostgreSQL database and a Redis server with the module (the tables
//! `payouts` is created, or emptied):
//!
//! ```sh
//! cargo run -p fencedlock-guard --features postgres --example payout -- \
//!     postgres://postgres@127.0.0.1:5432/postgres redis://127.0.0.1:6379
//! ```
//!
//! The crate's tests (`tests/payout.rs`) run these functions across a lease loss and a retry,
//! and a crash before and after the provider call, and check the provider paid once.
#![allow(dead_code)] // the tests use what `main` does not

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use fencedlock::Locker;
use fencedlock_guard::postgres::{self, Update};
use fencedlock_guard::{Error, Table, Written};
use tokio_postgres::GenericClient;

/// The lesson's table, plus the schema step's column.
pub const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS payouts (
    payout_id    text   PRIMARY KEY,
    amount_cents bigint NOT NULL,
    state        text   NOT NULL DEFAULT 'PENDING'
                        CHECK (state IN ('PENDING', 'SUBMITTING', 'SUBMITTED', 'FAILED')),
    provider_key text   NOT NULL UNIQUE,
    provider_ref text,
    last_fence   bigint NOT NULL DEFAULT 0
)";

pub fn payouts() -> Table {
    Table::new("payouts").id_column("payout_id")
}

/// The lock key of one payout.
pub fn lock_key(payout_id: &str) -> String {
    format!("payout:{payout_id}")
}

/// Creates a payout, deriving its idempotency key once, here, from its id.
pub async fn create_payout(
    client: &impl GenericClient,
    payout_id: &str,
    amount_cents: i64,
) -> Result<(), Error> {
    let key = format!("payout-{payout_id}");
    client
        .execute(
            "INSERT INTO payouts (payout_id, amount_cents, provider_key) VALUES ($1, $2, $3)",
            &[&payout_id, &amount_cents, &key],
        )
        .await?;
    Ok(())
}

/// A payment provider: it knows nothing of fences, and honours idempotency keys.
pub trait Provider {
    /// Pays `amount_cents` once per `key`: a repeat returns the first payment's reference.
    fn pay(
        &self,
        key: &str,
        amount_cents: i64,
    ) -> impl std::future::Future<Output = Result<String, ProviderError>>;
    /// The payment made under `key`, if any.
    fn lookup(&self, key: &str) -> impl std::future::Future<Output = Option<String>>;
}

/// A call to the provider that gave no answer: it may or may not have paid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderError(pub String);

impl std::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "provider: {}", self.0)
    }
}

impl std::error::Error for ProviderError {}

/// An in-memory provider that can lose its answers (the payment is made, the reply never
/// arrives): what a timeout looks like from the caller's side.
#[derive(Debug, Default)]
pub struct SimulatedProvider {
    state: Mutex<SimulatedState>,
}

#[derive(Debug, Default)]
struct SimulatedState {
    /// Payments by idempotency key: (reference, amount).
    payments: HashMap<String, (String, i64)>,
    /// Money moved, one entry per payment actually made.
    transfers: Vec<(String, i64)>,
    lose_replies: usize,
}

impl SimulatedProvider {
    /// The next `n` calls pay (or repeat) but their answers are lost.
    pub fn lose_next_replies(&self, n: usize) {
        self.lock().lose_replies = n;
    }

    /// Every transfer made: (reference, amount).
    pub fn transfers(&self) -> Vec<(String, i64)> {
        self.lock().transfers.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SimulatedState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Provider for SimulatedProvider {
    async fn pay(&self, key: &str, amount_cents: i64) -> Result<String, ProviderError> {
        let mut state = self.lock();
        let reference = match state.payments.get(key) {
            Some((reference, _)) => reference.clone(),
            None => {
                let reference = format!("tr_{}", state.transfers.len() + 1);
                state.payments.insert(key.to_owned(), (reference.clone(), amount_cents));
                state.transfers.push((reference.clone(), amount_cents));
                reference
            }
        };
        if state.lose_replies > 0 {
            state.lose_replies -= 1;
            return Err(ProviderError("timed out waiting for the answer".into()));
        }
        Ok(reference)
    }

    async fn lookup(&self, key: &str) -> Option<String> {
        self.lock().payments.get(key).map(|(reference, _)| reference.clone())
    }
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// The payout is recorded as submitted, with the provider's reference.
    Submitted(String),
    /// Already submitted (by an earlier attempt): nothing done.
    AlreadySubmitted(String),
    /// The provider's answer was lost: the row stays `SUBMITTING` for a retry or the
    /// reconciliation.
    Unknown,
    /// A newer holder has the payout: this attempt stopped (the refusal is counted).
    Stale,
}

/// What the intent step found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intent {
    /// The row is `SUBMITTING` with this holder's fence (committed): call the provider with
    /// `key` for `amount_cents`.
    Ready {
        /// The payout's idempotency key.
        key: String,
        /// What to pay.
        amount_cents: i64,
    },
    /// Already submitted (or failed, a human's call): nothing to do.
    Settled(Attempt),
}

/// Step 1, intent: claim the row (reading what this holder inherits) and move it to
/// `SUBMITTING` with the holder's fence, committed before any call goes out.
pub async fn record_intent(
    client: &mut tokio_postgres::Client,
    payout_id: &str,
    fence: u64,
) -> Result<Intent, Error> {
    let tx = client.transaction().await?;
    let columns = ["state", "provider_key", "amount_cents", "provider_ref"];
    let row = match postgres::claim(&tx, &payouts(), &payout_id, fence, &columns).await {
        Ok(row) => row,
        Err(Error::Stale { .. }) => return Ok(Intent::Settled(Attempt::Stale)),
        Err(other) => return Err(other),
    };
    let (state, key, amount_cents): (String, String, i64) = (row.get(0), row.get(1), row.get(2));
    if state == "SUBMITTED" {
        let reference: Option<String> = row.get(3);
        return Ok(Intent::Settled(Attempt::AlreadySubmitted(reference.unwrap_or_default())));
    }
    // PENDING, or SUBMITTING left by an earlier holder whose call may have reached the
    // provider: this attempt may repeat that call, which is what the stable key is for.
    let intent = Update::new().set("state", &"SUBMITTING").when_in("state", &[&"PENDING", &"SUBMITTING"]);
    if postgres::write(&tx, &payouts(), &payout_id, fence, &intent).await? == Written::PreconditionFailed {
        return Ok(Intent::Settled(Attempt::AlreadySubmitted(String::new()))); // FAILED
    }
    tx.commit().await?;
    Ok(Intent::Ready { key, amount_cents })
}

/// One attempt at a payout by the holder of `fence`: intent, the call with the payout's own
/// key, and the answer recorded, each step guarded.
pub async fn attempt(
    client: &mut tokio_postgres::Client,
    provider: &impl Provider,
    payout_id: &str,
    fence: u64,
) -> Result<Attempt, Error> {
    let (key, amount_cents) = match record_intent(client, payout_id, fence).await? {
        Intent::Ready { key, amount_cents } => (key, amount_cents),
        Intent::Settled(attempt) => return Ok(attempt),
    };
    // Step 2: the call, with the same key on every attempt.
    let Ok(reference) = provider.pay(&key, amount_cents).await else {
        return Ok(Attempt::Unknown);
    };
    // Step 3: the answer, only over this holder's own intent.
    record_submitted(&*client, payout_id, fence, &reference).await
}

/// Records the provider's reference over a `SUBMITTING` row, guarded by `fence`.
pub async fn record_submitted(
    client: &impl GenericClient,
    payout_id: &str,
    fence: u64,
    reference: &str,
) -> Result<Attempt, Error> {
    let submitted =
        Update::new().set("state", &"SUBMITTED").set("provider_ref", &reference).when("state", &"SUBMITTING");
    match postgres::write(client, &payouts(), &payout_id, fence, &submitted).await {
        Ok(Written::Applied(())) => Ok(Attempt::Submitted(reference.to_owned())),
        Ok(Written::PreconditionFailed) => Ok(Attempt::AlreadySubmitted(reference.to_owned())),
        Err(Error::Stale { .. }) => Ok(Attempt::Stale),
        Err(other) => Err(other),
    }
}

/// What the reconciliation did with one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled {
    /// The provider had paid: recorded as submitted.
    Submitted(String),
    /// The provider never saw the key: back to `PENDING`, for a retry with the same key.
    Reset,
    /// Another holder had the row (its lease, or a newer fence): left alone.
    Skipped,
}

/// The reconciliation job: every row stuck in `SUBMITTING`, under its own lease, asked about
/// by key.
pub async fn reconcile(
    locker: &Locker,
    client: &mut tokio_postgres::Client,
    provider: &impl Provider,
) -> Result<Vec<(String, Reconciled)>, Box<dyn std::error::Error>> {
    let stuck: Vec<String> = client
        .query("SELECT payout_id FROM payouts WHERE state = 'SUBMITTING' ORDER BY payout_id", &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let mut done = Vec::new();
    for payout_id in stuck {
        let Ok(lease) = locker.try_acquire(&lock_key(&payout_id)).await else {
            done.push((payout_id, Reconciled::Skipped)); // a worker is on it right now
            continue;
        };
        let outcome = reconcile_one(client, provider, &payout_id, lease.fence()).await?;
        let _ = lease.release().await;
        done.push((payout_id, outcome));
    }
    Ok(done)
}

async fn reconcile_one(
    client: &mut tokio_postgres::Client,
    provider: &impl Provider,
    payout_id: &str,
    fence: u64,
) -> Result<Reconciled, Error> {
    let tx = client.transaction().await?;
    let row = match postgres::claim(&tx, &payouts(), &payout_id, fence, &["state", "provider_key"]).await {
        Ok(row) => row,
        Err(Error::Stale { .. }) => return Ok(Reconciled::Skipped),
        Err(other) => return Err(other),
    };
    let (state, key): (String, String) = (row.get(0), row.get(1));
    if state != "SUBMITTING" {
        return Ok(Reconciled::Skipped);
    }
    let outcome = match provider.lookup(&key).await {
        Some(reference) => {
            let submitted = Update::new()
                .set("state", &"SUBMITTED")
                .set("provider_ref", &reference)
                .when("state", &"SUBMITTING");
            // The claim above read SUBMITTING under the row lock: the precondition holds.
            let _ = postgres::write(&tx, &payouts(), &payout_id, fence, &submitted).await?;
            Reconciled::Submitted(reference)
        }
        None => {
            let reset = Update::new().set("state", &"PENDING").when("state", &"SUBMITTING");
            let _ = postgres::write(&tx, &payouts(), &payout_id, fence, &reset).await?;
            Reconciled::Reset
        }
    };
    tx.commit().await?;
    Ok(outcome)
}

/// The story: a holder's answer is lost and its lease runs out; the next holder retries with
/// the same key; the first holder's late answer is refused; the provider paid once.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(pg_url), Some(redis_url)) = (args.next(), args.next()) else {
        eprintln!("usage: payout POSTGRES_URL REDIS_URL");
        std::process::exit(2);
    };
    let (mut client, connection) = tokio_postgres::connect(&pg_url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    client.batch_execute(SCHEMA).await?;
    client.batch_execute("DELETE FROM payouts").await?;
    create_payout(&client, "po_1", 12_900).await?;
    let config = fencedlock::LockConfig::builder().ttl(Duration::from_millis(300)).build()?;
    let locker = Locker::open(&redis_url, config)?;
    let provider = SimulatedProvider::default();

    let first = locker.acquire(&lock_key("po_1")).await?;
    provider.lose_next_replies(1);
    let a = attempt(&mut client, &provider, "po_1", first.fence()).await?;
    println!("holder with fence {}: {a:?} (the provider paid, the answer was lost)", first.fence());
    tokio::time::sleep(Duration::from_millis(400)).await; // its lease runs out

    let second = locker.acquire(&lock_key("po_1")).await?;
    let b = attempt(&mut client, &provider, "po_1", second.fence()).await?;
    println!(
        "holder with fence {}: {b:?} (same key: the provider returned the first payment)",
        second.fence()
    );
    let late = record_submitted(&client, "po_1", first.fence(), "tr_1").await?;
    println!("holder with fence {}, answer arriving late: {late:?}", first.fence());
    println!("transfers made by the provider: {:?}", provider.transfers());
    Ok(())
}
