//! The `INFO fencedlock` section: the counters and distributions (`counters.rs`), the waiters,
//! the high-water mark and epoch, and the reclaim index's size.

use crate::counters::*;
use crate::ffi::info::Section;
use crate::histogram::{Snapshot, PERCENTILES};
use crate::lock::Micros;
use crate::server::SERVER;

/// A field's value: counts and marks past `i64::MAX` show as `i64::MAX`.
fn field(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub fn render(info: &Section<'_>) {
    let mark = SERVER.high_water();
    for (name, counter) in [
        ("grants", &GRANTS),
        ("reentries", &REENTRIES),
        ("contended", &CONTENDED),
        ("renew_failures", &RENEW_FAILURES),
        ("release_failures", &RELEASE_FAILURES),
        ("takeovers", &TAKEOVERS),
        ("grace_refusals", &GRACE_REFUSALS),
        ("permits_mismatches", &PERMITS_MISMATCHES),
        ("reclaimed", &RECLAIMED),
        ("blocked_acquires", &BLOCKED_ACQUIRES),
        ("handoffs", &HANDOFFS),
        ("wait_timeouts", &WAIT_TIMEOUTS),
        ("wait_abandoned", &WAIT_ABANDONED),
        ("leases_released", &LEASES_RELEASED),
        ("leases_expired", &LEASES_EXPIRED),
    ] {
        info.field(name, counter.get());
    }
    info.field("waiters", field(SERVER.waiters() as u64));
    info.field("wait_time_ms", WAIT_TIME_US.get() / 1000);
    info.field("wait_time_max_ms", WAIT_TIME_MAX_US.get() / 1000);
    info.field("high_water_mark", field(mark.get()));
    info.field("epoch", field(mark.epoch()));
    // Entries in the reclaim index (see `reclaim.rs`: a key may have an older, stale one) and
    // the index's memory.
    let (tracked, bytes) = {
        let index = SERVER.reclaim_index();
        (index.len(), index.bytes())
    };
    info.field("reclaim_tracked", field(tracked as u64));
    info.field("reclaim_index_bytes", field(bytes as u64));
    add_histogram(info, "hold_time_ms", &HOLD_TIME.snapshot(), 1000);
    add_histogram(info, "hold_share_pct", &HOLD_SHARE.snapshot(), 1);
    add_histogram(info, "expired_lifetime_ms", &EXPIRED_LIFETIME.snapshot(), 1000);
}

/// One distribution as a dict field, `fencedlock_<name>:le_<bound>=..,...,le_inf=..,count=..,
/// sum=..,max=..,p50=..,p90=..,p99=..`: cumulative counts per bound (Prometheus's `le`), then
/// the estimates (see `histogram`). Values are divided by `unit` (µs → ms); the sum rounds to
/// the nearest, the maximum and the percentiles up (so a sub-millisecond hold never shows 0).
fn add_histogram<const N: usize>(info: &Section<'_>, name: &str, h: &Snapshot<N>, unit: Micros) {
    info.dict(name, |info| {
        for (bound, count) in h.bounds.iter().zip(h.cumulative()) {
            let label = match *bound {
                u64::MAX => "le_inf".to_string(),
                b => format!("le_{}", b / unit),
            };
            info.field(&label, field(count));
        }
        info.field("count", field(h.count()));
        info.field("sum", field(h.sum.saturating_add(unit / 2) / unit));
        info.field("max", field(h.max.div_ceil(unit)));
        for (label, per_mille) in PERCENTILES {
            info.field(label, field(h.percentile(per_mille).div_ceil(unit)));
        }
    });
}
