//! The server-wide fence high-water mark.
//!
//! Every grant takes `max(key fence, high-water mark) + 1` and moves the mark to it, so a fence
//! can never repeat even when the key that carried it is deleted, evicted or migrated away.

use fencedlock_protocol::epoch;
use fencedlock_protocol::limits::{EPOCH_GAP, MAX_FENCE};

use crate::error::LockError;

/// The high-water mark of every fence this server (or its predecessors) issued.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HighWater(u64);

impl HighWater {
    pub const fn new(mark: u64) -> Self {
        Self(mark)
    }

    pub const fn get(self) -> u64 {
        self.0
    }

    /// When the epoch of the mark began, in ms of wall clock since 1970: the mark read as a
    /// time (see [`HighWater::start_epoch`]). A function of the mark alone, so a replica shows
    /// its primary's epoch; grants move it by 1 ms per 1,024,000.
    pub const fn epoch(self) -> u64 {
        epoch::epoch_of(self.0)
    }

    /// The fence for a new grant on a key whose last fence is `key_fence`; moves the mark.
    pub fn next(&mut self, key_fence: u64) -> Result<u64, LockError> {
        let fence = self
            .0
            .max(key_fence)
            .checked_add(1)
            .filter(|f| *f <= MAX_FENCE)
            .ok_or(LockError::FencesExhausted)?;
        self.0 = fence;
        Ok(fence)
    }

    /// The fence `next` would issue for a key whose last fence is `key_fence`, without issuing it.
    pub fn peek(mut self, key_fence: u64) -> Option<u64> {
        self.next(key_fence).ok()
    }

    /// Takes in a fence issued elsewhere (replication, AOF, RDB, RESTORE, a raise).
    pub fn observe(&mut self, fence: u64) {
        self.0 = self.0.max(fence);
    }

    /// Starts a new epoch at wall-clock time `unix_micros`: on a promotion, and on a load from
    /// disk as primary. The node may have missed the last grants of its predecessor (a replica
    /// behind a dead primary, an AOF that lost its last `everysec` second), and two nodes that
    /// replicated the same mark must not take the same fences. So the epoch starts at the
    /// clock's floor ([`epoch::floor_at`]), which every node reaches on its own: an epoch taken
    /// later than another by more than the two clocks disagree starts above every fence the
    /// earlier one issued, since a server grants far fewer than 1,024 fences a µs.
    ///
    /// A clock behind the mark (a predecessor's clock ran ahead, or this one was set back)
    /// cannot order anything: the mark then moves up by `EPOCH_GAP` as before, which still
    /// covers fewer than 2^32 lost grants of a predecessor that replicated this mark.
    /// Saturates at `MAX_FENCE`: after that every grant fails with `FencesExhausted` instead of
    /// wrapping around to small fences.
    pub fn start_epoch(&mut self, unix_micros: u64) {
        let floor = epoch::floor_at(unix_micros);
        self.0 = if floor > self.0 { floor } else { self.0.saturating_add(EPOCH_GAP).min(MAX_FENCE) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_is_above_both_the_mark_and_the_key() {
        let mut hw = HighWater::new(10);
        assert_eq!(hw.next(3).unwrap(), 11);
        assert_eq!(hw.next(40).unwrap(), 41);
        assert_eq!(hw.get(), 41);
        assert_eq!(hw.next(0).unwrap(), 42);
    }

    #[test]
    fn observe_never_lowers_the_mark() {
        let mut hw = HighWater::new(100);
        hw.observe(5);
        assert_eq!(hw.get(), 100);
        hw.observe(500);
        assert_eq!(hw.get(), 500);
    }

    /// Dec 2026 on the wall clock, in µs since 1970.
    const NOW: u64 = 1_796_342_400_000_000;

    #[test]
    fn an_epoch_starts_at_the_clock_floor_above_an_older_mark() {
        let mut hw = HighWater::new(7);
        hw.start_epoch(NOW);
        assert_eq!(hw.get(), epoch::floor_at(NOW));
        assert_eq!(hw.epoch(), NOW / 1000);
        // Two replicas of the same mark promoted 1.5 s apart: disjoint, ordered epochs.
        let (mut b, mut c) = (hw, hw);
        b.start_epoch(NOW + 1_000_000);
        c.start_epoch(NOW + 2_500_000);
        let b_fences: Vec<u64> = (0..1000).map(|_| b.next(0).unwrap()).collect();
        assert!(c.next(0).unwrap() > *b_fences.last().unwrap());
    }

    #[test]
    fn a_clock_behind_the_mark_still_jumps_a_whole_gap() {
        let mut hw = HighWater::new(epoch::floor_at(NOW) + 5);
        hw.start_epoch(NOW - 1);
        assert_eq!(hw.get(), epoch::floor_at(NOW) + 5 + EPOCH_GAP);
        hw.start_epoch(0);
        assert_eq!(hw.get(), epoch::floor_at(NOW) + 5 + 2 * EPOCH_GAP);
    }

    /// What the rule does not cover, shown: a node whose clock runs behind by more than the
    /// time since the last epoch starts below that epoch's fences, and repeats them once it
    /// has granted as many fences as 1,024 × the shortfall in µs.
    #[test]
    fn past_the_skew_bound_a_later_epoch_starts_below_an_earlier_one() {
        let mut a = HighWater::new(0);
        a.start_epoch(NOW);
        let (mut b, mut c) = (a, a); // both replicated A's epoch start, nothing more
        b.start_epoch(NOW + 1000); // promoted 1 ms later, clock right
        let b_first = b.next(0).unwrap();
        c.start_epoch(NOW + 2000 - 1500); // promoted 2 ms later, clock 1.5 ms behind
        let c_first = c.next(0).unwrap();
        assert!(c_first < b_first, "C's epoch is ordered before B's although it came after");
        let repeat = (0..600_000).map(|_| c.next(0).unwrap()).any(|f| f == b_first);
        assert!(repeat, "after 1,024 × 500 grants C reaches B's first fence");
    }

    mod model {
        //! Sequences of epochs on nodes whose clocks disagree by at most `skew` µs, taken at
        //! least `skew` µs apart, each by a node that replicated some prefix of the fences
        //! issued before (lost grants included), granting at most one fence a µs.
        use proptest::prelude::*;

        use super::*;

        #[derive(Debug, Clone)]
        struct Epoch {
            node: usize,
            /// µs after the previous epoch, beyond `skew`.
            after: u64,
            /// Fences issued before this epoch that the node had replicated, as a share.
            seen_permille: u16,
            grants: u64,
        }

        fn epoch() -> impl Strategy<Value = Epoch> {
            (0..3usize, 1..3_000_000u64, 0..=1000u16, 0..2_000u64)
                .prop_map(|(node, after, seen_permille, grants)| Epoch { node, after, seen_permille, grants })
        }

        proptest! {
            #[test]
            fn later_epochs_start_above_every_earlier_fence(
                skew in 0..200_000u64,
                offsets in prop::array::uniform3(0..=1000u64),
                epochs in prop::collection::vec(epoch(), 1..40),
            ) {
                let offsets = offsets.map(|o| o * skew / 1000);
                let mut issued: Vec<u64> = Vec::new();
                let mut marks = [HighWater::new(0); 3];
                let mut now = NOW;
                for (k, e) in epochs.iter().enumerate() {
                    now += skew + e.after;
                    let seen = issued.len() * usize::from(e.seen_permille) / 1000;
                    let mark = &mut marks[e.node];
                    issued[..seen].iter().for_each(|&f| mark.observe(f));
                    mark.start_epoch(now + offsets[e.node]);
                    let top = issued.iter().copied().max().unwrap_or(0);
                    // At most one grant a µs of the margin by which the next epoch is more
                    // than `skew` µs away.
                    let margin = epochs.get(k + 1).map_or(u64::MAX, |next| next.after);
                    for _ in 0..e.grants.min(margin) {
                        let fence = mark.next(0).unwrap();
                        prop_assert!(fence > top, "{fence} not above {top}");
                        issued.push(fence);
                    }
                }
                let mut sorted = issued.clone();
                sorted.sort_unstable();
                sorted.dedup();
                prop_assert_eq!(sorted.len(), issued.len(), "a fence repeated");
            }
        }
    }

    #[test]
    fn exhaustion_is_an_error_not_a_wrap() {
        let mut hw = HighWater::new(MAX_FENCE - 1);
        assert_eq!(hw.next(0).unwrap(), MAX_FENCE);
        assert_eq!(hw.next(0), Err(LockError::FencesExhausted));
        hw.start_epoch(NOW);
        assert_eq!(hw.get(), MAX_FENCE);
        assert_eq!(hw.next(MAX_FENCE), Err(LockError::FencesExhausted));
    }
}
