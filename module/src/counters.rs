//! Counters and distributions for `INFO fencedlock` (rendered by `info.rs`): what an operator of a lock service watches
//! (contention, failed renewals and releases, takeovers of expired leases = holders that lost
//! their lease without releasing it, how long critical sections hold their lease and how much of
//! it they use).
//!
//! How a lease's end is counted (once, on the primary that granted it):
//! - released in time: by the `RELEASE`, into `leases_released`, `hold_time_ms` (grant to
//!   release) and `hold_share_pct` (that hold as a share of the lease it had been given, grant
//!   to its last deadline, renewals included);
//! - expired: into `leases_expired` and `expired_lifetime_ms` (grant to deadline) when the
//!   expiry is first observed, which is not the deadline itself: by the next `ACQUIRE`, a
//!   refused `RENEW` or `RELEASE` (a late release), the waiters' handoff at the deadline, or
//!   the reclaim of the idle key. An expired lease nobody touches again is counted when its
//!   key is reclaimed (`fencedlock.reclaim-after-ms` later).
//!
//! Not counted: a lease whose key is deleted, overwritten, renamed, flushed or evicted while
//! held (the key went, not the lease), and a handoff given back because its waiter had left
//! (`wait_abandoned` counts that). Leases this server did not grant (loaded from RDB or AOF, or
//! applied from a primary) have no known grant time: their ends are counted in
//! `leases_released` / `leases_expired` but not in the distributions, whose `count` is then
//! lower. A replica decides nothing, so it counts nothing until it is promoted.
//!
//! Like every field here, none is reset by `CONFIG RESETSTAT` (Redis gives modules no event
//! for it): rates come from differences between two reads.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::histogram::Histogram;
use crate::lock::{Expired, Span};

pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    pub fn incr(&self) {
        self.0.fetch_add(1, Relaxed);
    }

    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Relaxed);
    }

    /// Keeps the largest value seen.
    pub fn max(&self, n: u64) {
        self.0.fetch_max(n, Relaxed);
    }

    pub fn get(&self) -> i64 {
        i64::try_from(self.0.load(Relaxed)).unwrap_or(i64::MAX)
    }
}

/// New leases, each with a new fence.
pub static GRANTS: Counter = Counter::new();
/// Acquires by the holder that kept its fence (lost replies, retries).
pub static REENTRIES: Counter = Counter::new();
/// Acquires refused because another token held the lease.
pub static CONTENDED: Counter = Counter::new();
/// Renewals refused: the caller's lease had expired or was never theirs.
pub static RENEW_FAILURES: Counter = Counter::new();
/// Releases by a non-owner or after the caller's lease expired.
pub static RELEASE_FAILURES: Counter = Counter::new();
/// Grants over another token's expired lease: that holder lost its lease without releasing.
pub static TAKEOVERS: Counter = Counter::new();
/// Grants refused during the restart grace window.
pub static GRACE_REFUSALS: Counter = Counter::new();
/// Acquires refused because the key was held with another permit count: two deployments that
/// disagree on a semaphore's bound.
pub static PERMITS_MISMATCHES: Counter = Counter::new();
/// Idle lock keys deleted by the module (`fencedlock.reclaim-after-ms`).
pub static RECLAIMED: Counter = Counter::new();
/// `ACQUIRE … BLOCK`s that found the key busy and queued.
pub static BLOCKED_ACQUIRES: Counter = Counter::new();
/// Grants to a waiter at the moment a lease ended (each is also one of `GRANTS`).
pub static HANDOFFS: Counter = Counter::new();
/// Waiters answered nil because their deadline passed (or `CLIENT UNBLOCK … TIMEOUT`); each is
/// also one of `CONTENDED`.
pub static WAIT_TIMEOUTS: Counter = Counter::new();
/// Waiters whose connection went away before they were granted (disconnect, `CLIENT KILL`), and
/// handoffs given back because their client went away before the reply reached it. Never a
/// waiter that is still connected: the module times waiters out itself (see `blocking`).
pub static WAIT_ABANDONED: Counter = Counter::new();
/// Microseconds waiters spent queued, whatever ended their wait, and the longest single wait.
pub static WAIT_TIME_US: Counter = Counter::new();
pub static WAIT_TIME_MAX_US: Counter = Counter::new();

/// Leases released in time by their holder.
pub static LEASES_RELEASED: Counter = Counter::new();
/// Leases that expired (counted when first observed, see the module doc).
pub static LEASES_EXPIRED: Counter = Counter::new();

/// Upper bounds of the time buckets, in ms: 1 ms to a minute, roughly 1-2-5 steps (a lease's
/// ttl is in this range; the max ttl is a day, which lands in `+inf`).
const TIME_BOUNDS_MS: [u64; 15] =
    [1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000];
/// Time buckets in µs (what the clock gives), the last one `+inf`.
const TIME_BOUNDS_US: [u64; 16] = {
    let mut us = [u64::MAX; 16];
    let mut i = 0;
    while i < TIME_BOUNDS_MS.len() {
        us[i] = TIME_BOUNDS_MS[i] * 1000;
        i += 1;
    }
    us
};
/// Share buckets in percent; a release in time is always at most 100 %.
const SHARE_BOUNDS_PCT: [u64; 7] = [10, 25, 50, 75, 90, 100, u64::MAX];

/// Grant to release, of leases released in time (µs).
pub static HOLD_TIME: Histogram<16> = Histogram::new(TIME_BOUNDS_US);
/// Hold time as a share of the lease it had been given, rounded up (percent).
pub static HOLD_SHARE: Histogram<7> = Histogram::new(SHARE_BOUNDS_PCT);
/// Grant to deadline, of leases that expired (µs).
pub static EXPIRED_LIFETIME: Histogram<16> = Histogram::new(TIME_BOUNDS_US);

/// Counts a lease released in time; `span` is `None` for one of unknown grant time.
pub fn lease_released(span: Option<Span>) {
    LEASES_RELEASED.incr();
    if let Some(Span { held, given }) = span {
        HOLD_TIME.record(held);
        // Rounded up, so a bucket's bound is exact: `le_50` holds releases at or before half.
        HOLD_SHARE.record(held.saturating_mul(100).div_ceil(given.max(1)));
    }
}

/// Counts a lease that expired (once: see `Lock::take_expiry`).
pub fn lease_expired(expired: Expired) {
    LEASES_EXPIRED.incr();
    if let Some(lifetime) = expired.lifetime {
        EXPIRED_LIFETIME.record(lifetime);
    }
}

/// Counts a wait that ended after `waited` µs.
pub fn waited(waited: u64) {
    WAIT_TIME_US.add(waited);
    WAIT_TIME_MAX_US.max(waited);
}
