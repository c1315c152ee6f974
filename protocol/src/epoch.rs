//! Where a new epoch starts its fences: at the wall clock.
//!
//! A node that becomes the source of truth (a promotion, a load from disk) cannot know the
//! grants of a node it never heard from. The replicated high-water mark is the same on every
//! replica, so a rule that jumps from the mark alone gives two replicas promoted one after the
//! other the same fences. The wall clock is the one order all nodes share without talking:
//! an epoch taken at time `t` starts at [`floor_at`]`(t)`, and a later epoch on any node whose
//! clock agrees within the time between the two starts above every fence the earlier one
//! issued, because no server grants anywhere near [`FENCES_PER_MICROSECOND`] fences a
//! microsecond.

use crate::limits::MAX_FENCE;

/// How many fences one microsecond of wall clock is worth. An epoch taken `d` µs after
/// another starts `d × 1024` fences above it: room for the earlier epoch's grants (a server
/// grants well under one per µs) and for the clocks to disagree by almost `d`.
/// `MAX_FENCE / 1024` µs after 1970 is the year 2255.
pub const FENCES_PER_MICROSECOND: u64 = 1024;

/// The first fence of an epoch taken at `unix_micros` (wall clock, µs since 1970), capped at
/// [`MAX_FENCE`].
pub const fn floor_at(unix_micros: u64) -> u64 {
    let floor = unix_micros.saturating_mul(FENCES_PER_MICROSECOND);
    if floor > MAX_FENCE {
        MAX_FENCE
    } else {
        floor
    }
}

/// The wall-clock time (µs since 1970) at which an epoch starting at `fence` was taken, for
/// logs and tests: the inverse of [`floor_at`], rounded down.
pub const fn taken_at(fence: u64) -> u64 {
    fence / FENCES_PER_MICROSECOND
}

/// The epoch `fence` belongs to, as the wall-clock ms (since 1970) the epoch began. Fences of
/// one epoch share it (unless the epoch granted over 1,024,000 fences); a later epoch, taken at
/// least a ms later, has a larger one.
pub const fn epoch_of(fence: u64) -> u64 {
    taken_at(fence) / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_grow_with_the_clock_and_stay_below_the_cap_for_centuries() {
        let dec_2026 = 1_796_342_400_000_000;
        assert!(floor_at(dec_2026) < floor_at(dec_2026 + 1));
        assert_eq!(taken_at(floor_at(dec_2026)), dec_2026);
        let year_2250 = dec_2026 + 224 * 365 * 24 * 3600 * 1_000_000;
        assert!(floor_at(year_2250) < MAX_FENCE);
        assert_eq!(floor_at(u64::MAX), MAX_FENCE);
    }
}
