//! Redis Cluster slots and the per-slot fence floor. Pure, unit-tested without a server.
//!
//! In a cluster, a slot's keys move between primaries with `MIGRATE`; the server-wide high-water
//! mark does not. A lock key that was deleted or reclaimed on its old primary takes its fence
//! with it, and the new primary's mark may be lower: it would repeat that fence. So each slot
//! that ever granted a lease holds a **floor key** (`fencedlock:floor:{tag}`, with a hash tag
//! that maps it to that slot), a lock value without a holder whose fence is at least every fence
//! granted in the slot. It migrates with the slot like any key, and loading it raises the new
//! primary's mark above it (as every loaded fence does).
//!
//! A floor is raised with headroom ([`floor_for`]): one write covers the next `EPOCH_GAP`
//! fences, so grants rarely pay for it.

use fencedlock_protocol::cluster::{key_slot, slot_tag, FLOOR_KEY_PREFIX, SLOTS};
use fencedlock_protocol::limits::{EPOCH_GAP, MAX_FENCE};

/// Names of floor keys start with this; they are never reclaimed.
const FLOOR_PREFIX: &[u8] = FLOOR_KEY_PREFIX.as_bytes();

/// The slot of `key`.
pub fn slot(key: &[u8]) -> usize {
    usize::from(key_slot(key))
}

/// The name of the floor key of slot `of`, tagged with the protocol's tag of that slot.
pub fn floor_key(of: usize) -> Vec<u8> {
    let tag = slot_tag(u16::try_from(of % usize::from(SLOTS)).unwrap_or(0));
    let mut name = FLOOR_PREFIX.to_vec();
    name.extend_from_slice(tag.to_string().as_bytes());
    name.push(b'}');
    name
}

/// Whether `key` is a floor key.
pub fn is_floor_key(key: &[u8]) -> bool {
    key.starts_with(FLOOR_PREFIX)
}

/// The floor to write so that `fence` and the next `EPOCH_GAP` fences after it are covered.
pub fn floor_for(fence: u64) -> u64 {
    fence.saturating_add(EPOCH_GAP).min(MAX_FENCE)
}

/// Whether a slot whose floor is `floor` (`None`: no floor key) must be raised before it may
/// grant `fence`.
pub fn needs_raise(floor: Option<u64>, fence: u64) -> bool {
    floor.is_none_or(|floor| floor < fence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_has_a_floor_key_in_that_slot() {
        for s in 0..usize::from(SLOTS) {
            let key = floor_key(s);
            assert!(is_floor_key(&key));
            assert_eq!(slot(&key), s, "{}", String::from_utf8_lossy(&key));
        }
        assert!(!is_floor_key(b"invoice:1"));
    }

    #[test]
    fn a_floor_covers_a_whole_epoch_of_fences() {
        assert!(needs_raise(None, 1));
        let floor = floor_for(10);
        assert!(!needs_raise(Some(floor), 10));
        assert!(!needs_raise(Some(floor), 10 + EPOCH_GAP));
        assert!(needs_raise(Some(floor), 11 + EPOCH_GAP));
        assert_eq!(floor_for(MAX_FENCE - 1), MAX_FENCE);
    }
}
