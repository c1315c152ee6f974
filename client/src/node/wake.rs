//! Waiting on the Functions engine, whose scripts cannot block: between attempts, a waiter
//! `BLPOP`s on the key's wake-up list ([`functions::wake_key`]), onto which a release pushes
//! one element per freed permit. The server hands each element to the longest-blocked
//! `BLPOP`, so the waiters are woken by the release, about in arrival order, and none polls.
//! An expiry runs no script and wakes nobody, so each `BLPOP` lasts no longer than the
//! holders' time left by `STATUS`; a wake-up nobody was blocked for stays in the list for
//! [`functions::WAKE_TTL_MS`], so a waiter between its refused attempt and its `BLPOP` still
//! finds it.
//!
//! Not FIFO as the module's queue is: a client that asks without waiting can be granted
//! before a woken waiter's next attempt, and that waiter then blocks again at the back.

use std::time::Duration;

use fencedlock_protocol::functions;
use redis::Cmd;

/// The shortest wait between two attempts: a holder whose lease `STATUS` shows as ending now
/// (or a key freed between the refusal and the `STATUS`) is asked for again soon, but a
/// disagreement between the two replies cannot turn into a tight loop.
pub(crate) const MIN_NAP: Duration = Duration::from_millis(5);

/// How long to stay in `BLPOP` after a refused attempt: until the holders' leases end
/// (`held_for`, one millisecond past `STATUS`'s whole milliseconds, which the server rounds
/// up), at least [`MIN_NAP`], and never past the wait's `left`.
pub(crate) fn nap(held_for: Duration, left: Duration) -> Duration {
    (held_for + Duration::from_millis(1)).max(MIN_NAP).min(left)
}

/// `BLPOP wake seconds` for a nap: the timeout in whole milliseconds rounded up (never 0,
/// which would mean "no limit"), written as decimal seconds, which Redis ≥ 6 and Valkey take.
pub(crate) fn blpop(key: &[u8], nap: Duration) -> Cmd {
    let ms = nap.as_nanos().div_ceil(1_000_000).max(1);
    let mut cmd = redis::cmd("BLPOP");
    cmd.arg(functions::wake_key(key)).arg(format!("{}.{:03}", ms / 1000, ms % 1000));
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::tests::words;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_nap_lasts_until_the_lease_ends_within_the_wait() {
        assert_eq!(nap(200 * MS, 10_000 * MS), 201 * MS);
        assert_eq!(nap(Duration::ZERO, 10_000 * MS), MIN_NAP, "a key shown free is asked for again soon");
        assert_eq!(nap(200 * MS, 50 * MS), 50 * MS, "never past the wait");
        assert_eq!(nap(200 * MS, Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn the_blpop_timeout_is_decimal_seconds_rounded_up_and_never_zero() {
        let timeout = |nap: Duration| words(&blpop(b"k", nap))[2].clone();
        assert_eq!(timeout(1_500 * MS), "1.500");
        assert_eq!(timeout(Duration::from_micros(1_200)), "0.002");
        assert_eq!(timeout(Duration::ZERO), "0.001");
        assert_eq!(timeout(86_400_000 * MS), "86400.000");
        let key = String::from_utf8(functions::wake_key(b"k")).expect("ascii");
        assert_eq!(words(&blpop(b"k", MS))[..2], ["BLPOP".to_owned(), key]);
    }
}
