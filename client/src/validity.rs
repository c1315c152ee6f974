//! Pure validity and clock-drift arithmetic (Redlock's "validity = ttl - elapsed - drift").
//!
//! Every duration is measured on the client's monotonic clock ([`std::time::Instant`]) starting
//! *before* the first request of a round was sent, so the time the request spent in flight and
//! queued on the server is charged against the lease rather than granted for free.

use std::time::{Duration, Instant};

/// The allowance for clock-rate differences between the client and the servers:
/// `ttl * factor + constant`.
pub(crate) fn drift(ttl: Duration, factor: f64, constant: Duration) -> Duration {
    ttl.mul_f64(factor) + constant
}

/// The time a holder may still rely on a lease that the servers granted for `ttl`, when
/// `elapsed` passed between sending the requests and deciding the round.
///
/// `None` when nothing is left: the round was slower than the lease.
pub(crate) fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)?.checked_sub(drift).filter(|left| !left.is_zero())
}

/// The instant at which a lease granted for `ttl` to requests sent at `sent` stops being
/// safe to rely on. Saturates at `sent` if the drift exceeds the ttl.
pub(crate) fn deadline(sent: Instant, ttl: Duration, drift: Duration) -> Instant {
    sent + ttl.saturating_sub(drift)
}

/// Time left until `deadline` as seen at `now` (zero once passed).
pub(crate) fn remaining(deadline: Instant, now: Instant) -> Duration {
    deadline.saturating_duration_since(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn default_drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(Duration::from_secs(10), 0.01, 2 * MS), 102 * MS);
        assert_eq!(drift(Duration::from_millis(300), 0.01, 2 * MS), 5 * MS);
        assert_eq!(drift(Duration::from_secs(1), 0.0, Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        let ttl = Duration::from_secs(10);
        let d = drift(ttl, 0.01, 2 * MS);
        assert_eq!(validity(ttl, 50 * MS, d), Some(10_000 * MS - 50 * MS - 102 * MS));
        assert_eq!(validity(ttl, Duration::ZERO, d), Some(ttl - d));
    }

    #[test]
    fn a_round_slower_than_the_lease_has_no_validity() {
        let ttl = Duration::from_millis(100);
        let d = drift(ttl, 0.01, 2 * MS);
        assert_eq!(validity(ttl, 200 * MS, d), None);
        // Exactly used up is not valid either.
        assert_eq!(validity(ttl, ttl - d, d), None);
        // One millisecond short of used up is.
        assert_eq!(validity(ttl, ttl - d - MS, d), Some(MS));
        // Drift alone can exhaust a tiny lease.
        assert_eq!(validity(MS, Duration::ZERO, 2 * MS), None);
    }

    #[test]
    fn deadline_and_remaining_agree_with_validity() {
        let sent = Instant::now();
        let ttl = Duration::from_secs(2);
        let d = drift(ttl, 0.01, 2 * MS);
        let dl = deadline(sent, ttl, d);
        let decided = sent + 30 * MS;
        assert_eq!(remaining(dl, decided), validity(ttl, 30 * MS, d).unwrap());
        assert_eq!(remaining(dl, dl + MS), Duration::ZERO);
        assert_eq!(deadline(sent, MS, 5 * MS), sent);
    }
}
