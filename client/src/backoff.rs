//! Retry delays: exponential growth with full jitter, so contending clients spread out
//! instead of retrying in lock-step.

use std::time::Duration;

use rand::Rng;

/// Delay between acquisition attempts: attempt `n` waits a uniformly random time in
/// `[min, min(max, min * 2^n)]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The shortest delay (and the upper bound of the first one).
    pub min: Duration,
    /// The longest delay.
    pub max: Duration,
}

impl Backoff {
    /// Upper bound of the delay before retry number `attempt` (0-based).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(30)).unwrap_or(u32::MAX);
        self.min.saturating_mul(factor).min(self.max).max(self.min)
    }

    /// A random delay before retry number `attempt`, drawn from `rng`.
    pub fn delay(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        let hi = self.ceiling(attempt);
        if hi <= self.min {
            return self.min;
        }
        let span = (hi - self.min).as_nanos().min(u64::MAX as u128) as u64;
        self.min + Duration::from_nanos(rng.random_range(0..=span))
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { min: Duration::from_millis(20), max: Duration::from_millis(400) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_stay_within_bounds_and_grow() {
        let b = Backoff { min: Duration::from_millis(10), max: Duration::from_millis(300) };
        let mut rng = rand::rng();
        for attempt in 0..80 {
            let hi = b.ceiling(attempt);
            assert!(hi >= b.min && hi <= b.max);
            for _ in 0..50 {
                let d = b.delay(attempt, &mut rng);
                assert!(d >= b.min && d <= hi, "attempt {attempt}: {d:?} not in [{:?}, {hi:?}]", b.min);
            }
        }
        assert_eq!(b.ceiling(0), Duration::from_millis(10));
        assert_eq!(b.ceiling(1), Duration::from_millis(20));
        assert_eq!(b.ceiling(4), Duration::from_millis(160));
        assert_eq!(b.ceiling(5), Duration::from_millis(300));
        assert_eq!(b.ceiling(u32::MAX), Duration::from_millis(300));
    }

    #[test]
    fn delays_are_jittered() {
        let b = Backoff { min: Duration::from_millis(1), max: Duration::from_secs(1) };
        let mut rng = rand::rng();
        let samples: std::collections::HashSet<Duration> = (0..100).map(|_| b.delay(10, &mut rng)).collect();
        assert!(samples.len() > 90, "only {} distinct delays", samples.len());
    }

    #[test]
    fn equal_bounds_give_a_fixed_delay() {
        let b = Backoff { min: Duration::from_millis(7), max: Duration::from_millis(7) };
        let mut rng = rand::rng();
        assert_eq!(b.delay(3, &mut rng), Duration::from_millis(7));
    }
}
