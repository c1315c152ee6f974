//! Fenced writes at the resource: the other half of a lock.
//!
//! A lock decides who may *try*; the resource decides which writes *count*. A holder that
//! pauses past its lease (GC, swap, a stopped VM) wakes up believing it still holds the lock,
//! while a newer holder has taken over. Only the resource can refuse the older holder's
//! writes, by comparing the fence each write carries with the newest one the row has seen.
//! This crate is that comparison, for rows in PostgreSQL (module `postgres`, feature `postgres`,
//! async on `tokio-postgres`) and SQLite (module `sqlite`, feature `sqlite`, `rusqlite`), as
//! functions called inside the caller's own transaction:
//!
//! | step | helper | SQL |
//! | --- | --- | --- |
//! | once per table | `add_fence_column` | `ALTER TABLE t ADD COLUMN last_fence bigint NOT NULL DEFAULT 0` |
//! | first, after acquiring | `claim` | `UPDATE t SET last_fence = $1 WHERE id = $2 AND last_fence <= $1 RETURNING …` |
//! | every write | `write`, `write_returning` | `UPDATE t SET …, last_fence = $1 WHERE id = $2 AND last_fence <= $1 [AND state = …]` |
//!
//! A claim or a write whose fence is older than the row's is [`Error::Stale`]: nothing is
//! written, the refusal is counted ([`metrics::STALE_REFUSALS_TOTAL`], labelled by resource)
//! and logged, and the holder abandons its attempt. `<=`, not `<`, lets one holder write as
//! many times as it needs with one fence.
//!
//! ```no_run
//! # async fn example(client: &mut tokio_postgres::Client) -> Result<(), Box<dyn std::error::Error>> {
//! # let lease_fence = 42_u64;
//! use fencedlock_guard::postgres::{self, Update};
//! use fencedlock_guard::{Error, Table, Written};
//!
//! let jobs = Table::new("invoice_jobs").id_column("job_id");
//! postgres::add_fence_column(&*client, &jobs).await?; // once; a no-op when the column exists
//!
//! let fence = lease_fence; // `lease.fence()` from the fencedlock client
//! let tx = client.transaction().await?;
//! let status: String = match postgres::claim(&tx, &jobs, &72_i64, fence, &["status"]).await {
//!     Ok(row) => row.get(0),
//!     Err(Error::Stale { .. }) => return Ok(()), // a newer holder has the job: abandon
//!     Err(other) => return Err(other.into()),
//! };
//! if status == "PENDING" {
//!     let sent = Update::new().set("status", &"SENT").when("status", &"PENDING");
//!     if let Written::PreconditionFailed = postgres::write(&tx, &jobs, &72_i64, fence, &sent).await? {
//!         // not stale, but the job is no longer PENDING: someone finished it
//!     }
//! }
//! tx.commit().await?;
//! # Ok(()) }
//! ```
//!
//! # Why claim first: the two orderings
//!
//! A fence is an ordering boundary, not a cancellation. The row can refuse an older fence
//! only once a newer one has reached it. If the new holder B (fence 8) reads the row, then
//! the stale holder A's write (fence 7) lands, then B writes, A's write was accepted (the row
//! still carried 6) and B acts on a state that changed after it read it: the lesson's invoice
//! goes out twice. The **claim** closes that gap: B's first statement raises the row's fence
//! to 8 *and* returns the state B inherits, in one `UPDATE … RETURNING`. From then on A's
//! write is refused wherever it lands, and what B read cannot have been changed by A. Without
//! claiming, a guarded write still refuses every stale write that arrives after the new
//! holder's first write.
//!
//! # Why one statement: the isolation argument
//!
//! The fence check and the write are the same `UPDATE`; the crate never checks with a
//! `SELECT` and then writes. That is what makes the guard hold at every isolation level:
//!
//! - **READ COMMITTED** (PostgreSQL's default). A check-then-write guard loses:
//!
//!   ```text
//!   A (fence 7): BEGIN; SELECT last_fence … → 6, "I am current"
//!   B (fence 8): BEGIN; UPDATE … SET last_fence = 8 …; COMMIT
//!   A (fence 7): UPDATE t SET status = … WHERE id = …; COMMIT      -- the stale write lands
//!   ```
//!
//!   Each READ COMMITTED statement takes a new snapshot, so nothing ties A's write to what
//!   its `SELECT` saw (a shipped guard that checked with `EXISTS` lost exactly this way). With
//!   the condition inside the `UPDATE`, PostgreSQL evaluates `last_fence <= 7` on the row
//!   version it is about to change, with the row locked: if B's transaction holds the row,
//!   A's `UPDATE` waits for it, and when B commits PostgreSQL re-evaluates A's condition on
//!   B's version (`last_fence` = 8), matches nothing, and A gets [`Error::Stale`].
//! - **REPEATABLE READ and SERIALIZABLE.** A's `UPDATE` of a row that B changed after A's
//!   snapshot fails with a serialization failure (SQLSTATE `40001`) instead of overwriting it.
//!   That failure is the caller's retry ([`Error::is_retryable`]): roll back and run the
//!   transaction again, claim first; the retry sees fence 8 and is [`Error::Stale`].
//! - **The row lock.** The claim's `UPDATE` locks the row until the transaction ends, so
//!   while the holder decides from what it read, no other holder can change the row; a newer
//!   holder's claim waits, then raises the fence over it.
//! - **SQLite** runs one writer at a time: the check inside the `UPDATE` cannot interleave
//!   with another write. Begin claiming transactions with `BEGIN IMMEDIATE`
//!   (`rusqlite::TransactionBehavior::Immediate`) so the write lock is taken before the read.
//!
//! A statement that matched no row is followed by one read of the row's fence, to tell a
//! stale fence ([`Error::Stale`]) from a missing row ([`Error::NotFound`]), a NULL fence
//! ([`Error::NullFence`]) and a state precondition that did not hold
//! ([`Written::PreconditionFailed`]). The write that was applied costs one statement on
//! PostgreSQL, the same as the write without the guard. SQLite reads a double-quoted name that
//! matches no column as a string literal, so there every helper first asks the table for the
//! names it was given (one in-process query): a misspelled name is [`Error::UnknownColumn`],
//! never a value, as PostgreSQL refuses it.
//!
//! # Fences in signed columns
//!
//! Fences are `u64`; PostgreSQL's `bigint` and SQLite's `INTEGER` are signed 64-bit. The
//! module never hands out a fence above `i64::MAX` (`MAX_FENCE` in `fencedlock-protocol`:
//! Redis integers are signed too), so every real fence is stored and compared exactly. A
//! fence of 0 or above `MAX_FENCE` is [`Error::InvalidFence`] before any statement runs: 0 is
//! the column's default, so a "fence" of 0 would pass on every row no holder has touched.
//!
//! # What fencing cannot protect
//!
//! A fence protects rows that check it. A payment provider, an email service or a device
//! does not: a holder that called the provider and then lost its lease has paid, whatever the
//! row says, and the next holder's retry pays again. For those side effects:
//!
//! 1. **Intent before the call.** Move the row to `SUBMITTING` with a guarded write (and the
//!    holder's fence) *before* calling out, in its own committed transaction, so a later
//!    holder sees that an attempt may be in flight.
//! 2. **A stable idempotency key**, derived once from the row (not per attempt) and sent on
//!    every attempt, so the provider answers a repeat with the original result.
//! 3. **Reconciliation**: a job that finds rows stuck in `SUBMITTING` and asks the provider,
//!    by key, what happened, instead of guessing.
//!
//! `examples/payout.rs` is that pattern, runnable (`cargo run -p fencedlock-guard --example
//! payout --features postgres -- POSTGRES_URL`), and the crate's tests run it across a lease
//! loss and a retry: the provider pays once.
//!
//! # Observability
//!
//! Every refusal increments [`metrics::STALE_REFUSALS_TOTAL`]
//! (`fencedlock_fence_refusals_total{resource="…"}`, the client's refusal counter with a
//! label) and logs a `WARN` event (target `fencedlock_guard`) with the resource, the step,
//! the stale fence and the row's fence. A non-zero rate is the mechanism working: each is a
//! paused or partitioned holder caught.

#![warn(missing_docs)]
// Without a driver feature only the statements (`Table`, `Update`, `Dialect`) are public; the
// helpers' shared parts then have no caller.
#![cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code, unused_imports))]

#[cfg(all(test, feature = "sqlite"))]
mod contract;
mod dialect;
mod error;
mod fence;
mod ident;
pub mod metrics;
mod outcome;
#[cfg(feature = "postgres")]
pub mod postgres;
mod sql;
#[cfg(feature = "sqlite")]
pub mod sqlite;
mod table;
mod update;

pub use dialect::Dialect;
pub use error::{Error, Result};
pub use ident::{quote as quote_identifier, MAX_IDENTIFIER_BYTES};
pub use outcome::Written;
pub use table::{Table, DEFAULT_FENCE_COLUMN, DEFAULT_ID_COLUMN};
pub use update::Update;
