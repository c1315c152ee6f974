//! A fence as the databases store it.
//!
//! Fences are `u64` in the client; `bigint` (PostgreSQL) and `INTEGER` (SQLite) are signed
//! 64-bit. The module never hands out a fence above `i64::MAX`
//! ([`MAX_FENCE`]: Redis integer replies are signed too), so every real fence converts
//! without loss and compares the same in both types. A fence outside `1..=MAX_FENCE` is
//! refused before any statement runs: 0 is the column's default (no holder yet), so a
//! "fence" of 0 would pass the guard on every untouched row.

use fencedlock_protocol::limits::MAX_FENCE;

use crate::error::{Error, Result};

/// `fence` as the `bigint` bound to the statements, or [`Error::InvalidFence`].
pub fn to_sql(fence: u64) -> Result<i64> {
    if fence == 0 || fence > MAX_FENCE {
        return Err(Error::InvalidFence(fence));
    }
    i64::try_from(fence).map_err(|_| Error::InvalidFence(fence))
}

/// A stored `last_fence` as a fence (`None` for a negative value, which no helper writes).
pub fn from_sql(stored: i64) -> Option<u64> {
    u64::try_from(stored).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fence_the_module_hands_out_converts_and_nothing_else_does() {
        assert_eq!(to_sql(1).unwrap(), 1);
        assert_eq!(to_sql(MAX_FENCE).unwrap(), i64::MAX);
        assert!(matches!(to_sql(0), Err(Error::InvalidFence(0))));
        assert!(matches!(to_sql(MAX_FENCE + 1), Err(Error::InvalidFence(_))));
        assert!(matches!(to_sql(u64::MAX), Err(Error::InvalidFence(u64::MAX))));
        assert_eq!(from_sql(i64::MAX), Some(MAX_FENCE));
        assert_eq!(from_sql(0), Some(0));
        assert_eq!(from_sql(-1), None);
    }
}
