//! Fixed-bucket histograms for `INFO fencedlock`: recording a value costs a short search over
//! the bounds and a few relaxed atomic adds, no allocation and no lock, so it can sit on the
//! RELEASE path. Pure Rust (no Redis), unit-tested here; `counters.rs` owns the instances and
//! writes them out.
//!
//! Percentiles are estimated from the buckets as the upper bound of the bucket the rank falls
//! in, capped by the largest value seen: an upper estimate, never below the true percentile
//! and never above the next bucket's edge. Exact enough to tell a 50 ms critical section from
//! a 5 s one, which is what an operator sizing a lease needs.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The percentiles `INFO` shows, in per mille (so 99.9 could be added without floats).
pub const PERCENTILES: [(&str, u64); 3] = [("p50", 500), ("p90", 900), ("p99", 990)];

/// Counts of values by bucket: bucket `i` holds the values `v` with `bounds[i-1] < v <=
/// bounds[i]`; the last bound is `u64::MAX` (`+inf`), so every value has a bucket.
pub struct Histogram<const N: usize> {
    bounds: [u64; N],
    counts: [AtomicU64; N],
    sum: AtomicU64,
    max: AtomicU64,
}

/// A consistent-enough copy of a histogram for display: `INFO` runs on the main thread, as
/// every recording does, so nothing changes while it is taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot<const N: usize> {
    pub bounds: [u64; N],
    pub counts: [u64; N],
    pub sum: u64,
    pub max: u64,
}

impl<const N: usize> Histogram<N> {
    /// `bounds` must increase strictly and end with `u64::MAX` (checked in const context: a
    /// bad table fails the build, not a server).
    pub const fn new(bounds: [u64; N]) -> Self {
        assert!(N > 0 && bounds[N - 1] == u64::MAX, "the last bucket is +inf");
        let mut i = 1;
        while i < N {
            assert!(bounds[i - 1] < bounds[i], "bounds increase strictly");
            i += 1;
        }
        Self {
            bounds,
            counts: [const { AtomicU64::new(0) }; N],
            sum: AtomicU64::new(0),
            max: AtomicU64::new(0),
        }
    }

    /// Counts one value.
    pub fn record(&self, value: u64) {
        // The first bound at or above the value; the last bound (+inf) always is.
        let i = self.bounds.partition_point(|&b| b < value).min(N - 1);
        self.counts[i].fetch_add(1, Relaxed);
        self.sum.fetch_add(value, Relaxed);
        self.max.fetch_max(value, Relaxed);
    }

    pub fn snapshot(&self) -> Snapshot<N> {
        Snapshot {
            bounds: self.bounds,
            counts: std::array::from_fn(|i| self.counts[i].load(Relaxed)),
            sum: self.sum.load(Relaxed),
            max: self.max.load(Relaxed),
        }
    }
}

impl<const N: usize> Snapshot<N> {
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Values at or below each bound (`le_<bound>` in Prometheus's sense), the last one being
    /// the count.
    pub fn cumulative(&self) -> [u64; N] {
        let mut total = 0;
        self.counts.map(|c| {
            total += c;
            total
        })
    }

    /// The `per_mille`-th percentile's estimate (see the module doc); 0 when empty.
    pub fn percentile(&self, per_mille: u64) -> u64 {
        let count = self.count();
        if count == 0 {
            return 0;
        }
        // The rank of the value that at least `per_mille`/1000 of the values do not exceed.
        let rank = (count.saturating_mul(per_mille)).div_ceil(1000).max(1);
        let bucket = self.cumulative().iter().position(|&c| c >= rank).unwrap_or(N - 1);
        self.bounds[bucket].min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Histogram<4> {
        Histogram::new([10, 20, 50, u64::MAX])
    }

    #[test]
    fn values_fall_in_the_first_bucket_whose_bound_they_do_not_exceed() {
        let h = small();
        for v in [0, 10, 11, 20, 21, 50, 51, u64::MAX] {
            h.record(v);
        }
        let s = h.snapshot();
        assert_eq!(s.counts, [2, 2, 2, 2]);
        assert_eq!(s.cumulative(), [2, 4, 6, 8]);
        assert_eq!(s.count(), 8);
        assert_eq!(s.max, u64::MAX);
    }

    #[test]
    fn sum_and_max_follow_the_values() {
        let h = small();
        h.record(3);
        h.record(40);
        let s = h.snapshot();
        assert_eq!((s.sum, s.max), (43, 40));
    }

    #[test]
    fn percentiles_are_the_bucket_edge_capped_by_the_largest_value() {
        let h = small();
        // 6 values ≤ 10, 3 in (20, 50], 1 far out.
        for v in [1, 2, 3, 4, 5, 6, 30, 31, 45, 700] {
            h.record(v);
        }
        let s = h.snapshot();
        assert_eq!(s.percentile(500), 10, "the 5th of 10 values is ≤ 10");
        assert_eq!(s.percentile(600), 10, "the 6th too");
        assert_eq!(s.percentile(700), 50, "the 7th is in (20, 50]");
        assert_eq!(s.percentile(900), 50);
        assert_eq!(s.percentile(990), 700, "the 10th is in +inf: the max");
    }

    #[test]
    fn a_percentile_never_exceeds_the_largest_value() {
        let h = small();
        h.record(12);
        h.record(13);
        assert_eq!(h.snapshot().percentile(500), 13, "not the bucket's edge, 20");
    }

    #[test]
    fn an_empty_histogram_reports_zeros() {
        let s = small().snapshot();
        assert_eq!((s.count(), s.sum, s.max, s.percentile(990)), (0, 0, 0, 0));
    }

    #[test]
    fn a_single_value_is_every_percentile() {
        let h = small();
        h.record(17);
        let s = h.snapshot();
        for (_, q) in PERCENTILES {
            assert_eq!(s.percentile(q), 17);
        }
    }

    #[test]
    fn percentile_ranks_round_up() {
        // 100 values: p99 is the 99th, not the 100th.
        let h = small();
        for _ in 0..99 {
            h.record(5);
        }
        h.record(1000);
        let s = h.snapshot();
        assert_eq!(s.percentile(990), 10);
        assert_eq!(s.percentile(1000), 1000);
    }
}
