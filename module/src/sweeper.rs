//! Reclaims idle lock keys in bounded slices of a module timer: the FFI side of `reclaim`.
//!
//! Only a primary deletes, and each deletion reaches replicas and the AOF as `DEL key`, so they
//! agree with it. Replicas and loading servers keep the index too (every stored lock is tracked,
//! whatever stored it), so a promoted replica takes over reclaiming at once; their sweep only
//! drops entries of keys that are already gone.
//!
//! Keys deleted by other means (`DEL`, `FLUSHALL`, eviction, migration) leave their entries
//! behind until they fall due; the sweep then finds the key gone and forgets the entry, so the
//! index holds no more than the keys filed within one ttl plus one retention period. `RENAME`
//! and `MOVE` give no callback with the new name: the value is marked unfiled (`unlink2`) and
//! filed again by the next command that opens it, so an idle key renamed or moved is reclaimed
//! only after its next use.
//!
//! Fences do not depend on the keys: a new grant is above the server's high-water mark, which
//! outlives every key (see `fence.rs`), so deleting an idle key never lets a fence repeat.

use crate::counters;
use crate::ffi::{clock, Names, Timer};
use crate::lock::Micros;
use crate::reclaim::{decide, Due, Verdict, GRAIN};
use crate::server::SERVER;
use crate::store::Store;

/// How long one sweep may run: a bounded slice, so a million idle keys never stall the event
/// loop (Redis's own active expiry works the same way).
const BUDGET: Micros = 2_000;
/// Entries handled between two looks at the clock.
const CHECK_EVERY: usize = 32;
/// Delay before the next sweep: soon while a backlog is due, otherwise at Redis's default `hz`.
pub const BUSY_DELAY_MS: i64 = 10;
pub const IDLE_DELAY_MS: i64 = 100;

/// One sweep: handles due entries until none is left or the budget is spent. Returns the delay
/// before the next sweep.
pub fn sweep(timer: &Timer) -> i64 {
    let deciding = timer.is_deciding_primary();
    let after = SERVER.reclaim_after();
    let start = clock::now();
    let mut now = start;
    let mut handled = 0;
    loop {
        if handled % CHECK_EVERY == CHECK_EVERY - 1 {
            now = clock::now();
            if now.saturating_sub(start) >= BUDGET {
                return BUSY_DELAY_MS;
            }
        }
        let Some(due) = SERVER.reclaim_index().pop_due(now, after) else { return IDLE_DELAY_MS };
        handled += 1;
        if !visit(timer, due, now, after, deciding) {
            return IDLE_DELAY_MS;
        }
    }
}

/// Handles one due entry; false when the sweep must stop here: a replica at a key only its
/// primary may delete (the entry goes back and waits for the primary's `DEL`), or a failure.
fn visit(timer: &Timer, due: Due, now: Micros, after: Micros, deciding: bool) -> bool {
    if !timer.select_db(due.db) {
        return true; // the database is gone (fewer databases after a restart): forget it
    }
    let Some(name) = timer.string(&due.key) else {
        refile(due);
        return false;
    };
    let mut key = Store::named(&name);
    // Another type under the name is not ours to track; an error reads as that.
    let mut found = key.lock().ok().flatten();
    match decide(found.as_deref(), due.bucket, now, after) {
        Verdict::Forget => true,
        Verdict::Requeue { .. } => {
            if let Some(lock) = found.as_mut() {
                lock.file();
            }
            true
        }
        // Someone waits for it: the wake-up hands it over instead; or its slot is moving away,
        // and a delete made during the hand-over may not reach the new owner. Look again later.
        Verdict::Delete if SERVER.is_waited_at(due.db, &due.key) || SERVER.is_leaving(&due.key) => {
            drop(key);
            drop(name);
            refile(due);
            false
        }
        Verdict::Delete if deciding => {
            // An expired lease nobody looked at since is counted here, at the latest.
            if let Some(lock) = found.as_mut() {
                lock.take_expiries(now, counters::lease_expired);
            }
            if key.delete().is_err() {
                drop(key);
                drop(name);
                refile(due);
                return false;
            }
            timer.replicate_del(&name);
            counters::RECLAIMED.incr();
            true
        }
        Verdict::Delete => {
            drop(key);
            drop(name);
            refile(due);
            false
        }
    }
}

/// Files a due entry again, unchanged (its key keeps its bucket, so the entry stays live).
fn refile(due: Due) {
    SERVER.reclaim_index().track(due.bucket.saturating_mul(GRAIN), due.db, &due.key);
}
