//! Counters for `INFO fencedlock`: what an operator of a lock service watches (contention,
//! failed renewals and releases, takeovers of expired leases = holders that lost their lease
//! without releasing it).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use redis_module::InfoContext;

use crate::{state, sweeper};

pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    pub fn incr(&self) {
        self.0.fetch_add(1, Relaxed);
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
    ] {
        ctx.add_info_field_long_long(name, counter.get());
    }
    let mark_field = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    ctx.add_info_field_long_long("high_water_mark", mark_field(mark.get()));
    ctx.add_info_field_long_long("epoch", mark_field(mark.epoch()));
    // Entries in the reclaim index (see `reclaim.rs`: a key may have an older, stale one) and
    // the index's memory.
    let (tracked, bytes) = sweeper::size();
    ctx.add_info_field_long_long("reclaim_tracked", mark_field(tracked as u64));
    ctx.add_info_field_long_long("reclaim_index_bytes", mark_field(bytes as u64));
}
