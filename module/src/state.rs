//! Server-wide state: the fence high-water mark, the restart grace window, the configs and the
//! reclaim index.
//!
//! Redis runs commands, persistence callbacks and server events on its main thread; the atomics
//! are there because an RDB child reads the mark too, and they cost nothing uncontended.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

use fencedlock_protocol::limits::{DEFAULT_MAX_TTL_MS, DEFAULT_RECLAIM_AFTER_MS, MAX_MAX_TTL_MS};

use crate::fence::HighWater;
use crate::lease::{Lock, Micros};
use crate::reclaim::Index;
use crate::slot;

static HIGH_WATER: AtomicU64 = AtomicU64::new(0);

/// Every stored lock key, by when it falls idle (see `reclaim.rs`); swept by `sweeper.rs`.
static RECLAIM: Mutex<Index> = Mutex::new(Index::new());

/// `fencedlock.max-ttl-ms`: a typo'd ttl of years would otherwise lock a job out for good.
pub static MAX_TTL_MS: AtomicI64 = AtomicI64::new(CONFIG_DEFAULT_MAX_TTL_MS);

/// `fencedlock.reclaim-after-ms`: idle lock keys are deleted this long after their lease ended.
pub static RECLAIM_AFTER_MS: AtomicI64 = AtomicI64::new(CONFIG_DEFAULT_RECLAIM_AFTER_MS);

/// The configs' defaults and bound as Redis's integer configs take them; all fit an `i64`.
pub const CONFIG_DEFAULT_MAX_TTL_MS: i64 = DEFAULT_MAX_TTL_MS as i64;
pub const CONFIG_DEFAULT_RECLAIM_AFTER_MS: i64 = DEFAULT_RECLAIM_AFTER_MS as i64;
pub const CONFIG_MAX_MS: i64 = MAX_MAX_TTL_MS as i64;

/// `fencedlock.restart-grace-ms`: the Redlock spec's delayed restart.
pub static RESTART_GRACE_MS: AtomicI64 = AtomicI64::new(0);

/// When the current grace window started (module load, then the first load from disk).
static GRACE_FROM: AtomicU64 = AtomicU64::new(0);

pub fn high_water() -> HighWater {
    HighWater::new(HIGH_WATER.load(Relaxed))
}

pub fn set_high_water(mark: HighWater) {
    HIGH_WATER.store(mark.get(), Relaxed);
}

/// Applies `change` to the mark (a jump, or a fence seen in RDB aux data).
pub fn update_high_water(change: impl FnOnce(&mut HighWater)) -> HighWater {
    let mut mark = high_water();
    change(&mut mark);
    set_high_water(mark);
    mark
}

pub fn max_ttl_ms() -> u64 {
    u64::try_from(MAX_TTL_MS.load(Relaxed)).unwrap_or(1)
}

/// `fencedlock.reclaim-after-ms` in microseconds. Read at each sweep, so `CONFIG SET` applies at once.
pub fn reclaim_after() -> Micros {
    u64::try_from(RECLAIM_AFTER_MS.load(Relaxed)).unwrap_or(0).saturating_mul(1000)
}

pub fn start_grace(now: Micros) {
    GRACE_FROM.store(now, Relaxed);
}

/// How long new grants are still refused. Read at each grant, so `CONFIG SET` applies at once.
pub fn grace_left(now: Micros) -> Micros {
    let grace_ms = u64::try_from(RESTART_GRACE_MS.load(Relaxed)).unwrap_or(0);
    GRACE_FROM.load(Relaxed).saturating_add(grace_ms.saturating_mul(1000)).saturating_sub(now)
}

/// The reclaim index.
pub fn reclaim_index() -> MutexGuard<'static, Index> {
    // A panic while the lock was held leaves a consistent index (every method completes or
    // does nothing), so a poisoned lock is safe to keep using.
    RECLAIM.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Files the lock stored under `key` in `db` in the reclaim index as idle from its `idle_from`
/// on, moving the entry it had. Only `store.rs` (and the data type's loads, through the same
/// function) files: every way a lock key comes to exist, and every release.
pub fn file(lock: &mut Lock, db: i32, key: &[u8]) {
    if slot::is_floor_key(key) {
        return; // a slot's floor must outlive its lock keys
    }
    let bucket = reclaim_index().track(lock.idle_from(), db, key);
    lock.set_tracked_at(bucket);
}
