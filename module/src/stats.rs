//! Counters for `INFO fencedlock`: what an operator of a lock service watches (contention,
//! failed renewals and releases, takeovers of expired leases = holders that lost their lease
//! without releasing it).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use redis_module::InfoContext;

use crate::{blocking, state, sweeper};

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

    fn get(&self) -> i64 {
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
/// Idle lock keys deleted by the module (`fencedlock.reclaim-after-ms`).
pub static RECLAIMED: Counter = Counter::new();
/// `ACQUIRE … BLOCK`s that found the key busy and queued.
pub static BLOCKED_ACQUIRES: Counter = Counter::new();
/// Grants to a waiter at the moment a lease ended (each is also one of `GRANTS`).
pub static HANDOFFS: Counter = Counter::new();
/// Waiters whose timeout passed (each is also one of `CONTENDED`).
pub static WAIT_TIMEOUTS: Counter = Counter::new();
/// Waiters that went away before they were granted (disconnect, `CLIENT KILL`), and handoffs
/// given back because their client went away before the reply reached it.
pub static WAIT_ABANDONED: Counter = Counter::new();
/// Microseconds waiters spent queued, whatever ended their wait, and the longest single wait.
pub static WAIT_TIME_US: Counter = Counter::new();
pub static WAIT_TIME_MAX_US: Counter = Counter::new();

/// Counts a wait that ended after `waited` µs.
pub fn waited(waited: u64) {
    WAIT_TIME_US.add(waited);
    WAIT_TIME_MAX_US.max(waited);
}

/// The flat (deprecated) info API is the one that names the section after the module, so
/// `INFO fencedlock` selects it and fields come out as `fencedlock_<name>`.
#[allow(deprecated)]
pub fn add_info_section(ctx: &InfoContext) {
    let mark = state::high_water();
    ctx.add_info_section(None);
    for (name, counter) in [
        ("grants", &GRANTS),
        ("reentries", &REENTRIES),
        ("contended", &CONTENDED),
        ("renew_failures", &RENEW_FAILURES),
        ("release_failures", &RELEASE_FAILURES),
        ("takeovers", &TAKEOVERS),
        ("grace_refusals", &GRACE_REFUSALS),
        ("reclaimed", &RECLAIMED),
        ("blocked_acquires", &BLOCKED_ACQUIRES),
        ("handoffs", &HANDOFFS),
        ("wait_timeouts", &WAIT_TIMEOUTS),
        ("wait_abandoned", &WAIT_ABANDONED),
    ] {
        ctx.add_info_field_long_long(name, counter.get());
    }
    let mark_field = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    ctx.add_info_field_long_long("waiters", mark_field(blocking::waiters() as u64));
    ctx.add_info_field_long_long("wait_time_ms", WAIT_TIME_US.get() / 1000);
    ctx.add_info_field_long_long("wait_time_max_ms", WAIT_TIME_MAX_US.get() / 1000);
    ctx.add_info_field_long_long("high_water_mark", mark_field(mark.get()));
    ctx.add_info_field_long_long("epoch", mark_field(mark.epoch()));
    // Entries in the reclaim index (see `reclaim.rs`: a key may have an older, stale one) and
    // the index's memory.
    let (tracked, bytes) = sweeper::size();
    ctx.add_info_field_long_long("reclaim_tracked", mark_field(tracked as u64));
    ctx.add_info_field_long_long("reclaim_index_bytes", mark_field(bytes as u64));
}
