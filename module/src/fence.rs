//! The server-wide fence high-water mark.
//!
//! Every grant takes `max(key fence, high-water mark) + 1` and moves the mark to it, so a fence
//! can never repeat even when the key that carried it is deleted, evicted or migrated away.

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

    /// The epoch is the number of `EPOCH_GAP`s below the mark: it moves by one per jump.
    pub const fn epoch(self) -> u64 {
        self.0 / EPOCH_GAP
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

    /// Starts a new epoch: a node that missed the last grants of its predecessor (a replica
    /// behind a dead primary, an AOF that lost its last `everysec` second) still issues fences
    /// above every fence issued before, as long as fewer than `EPOCH_GAP` grants were lost.
    /// Saturates at `MAX_FENCE`: after that every grant fails with
    /// `FencesExhausted` instead of wrapping around to small fences.
    pub fn jump(&mut self) {
        self.0 = self.0.saturating_add(EPOCH_GAP).min(MAX_FENCE);
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

    #[test]
    fn jump_moves_one_epoch_and_clears_lost_grants() {
        let mut hw = HighWater::new(7);
        assert_eq!(hw.epoch(), 0);
        hw.jump();
        assert_eq!(hw.epoch(), 1);
        assert_eq!(hw.get(), 7 + EPOCH_GAP);
        // A predecessor that issued fewer than EPOCH_GAP fences we never saw is still below us.
        assert!(hw.next(0).unwrap() > 7 + EPOCH_GAP - 1);
    }

    #[test]
    fn exhaustion_is_an_error_not_a_wrap() {
        let mut hw = HighWater::new(MAX_FENCE - 1);
        assert_eq!(hw.next(0).unwrap(), MAX_FENCE);
        assert_eq!(hw.next(0), Err(LockError::FencesExhausted));
        hw.jump();
        assert_eq!(hw.get(), MAX_FENCE);
        assert_eq!(hw.next(MAX_FENCE), Err(LockError::FencesExhausted));
    }
}
