//! Which idle lock keys to delete, and when. Pure: the sweeper (FFI, `sweeper.rs`) pops due
//! entries, looks each key up, and does what [`decide`] says.
//!
//! Every stored lock key is tracked by an [`Entry`] ordered by when its lease ended or will end
//! ([`Lock::idle_from`], on the monotonic clock). A release moves the key's entry to the release
//! time; renewals and new grants on an existing key do not touch the index (that would cost
//! every renewal). When an entry falls due, the key's *current* state decides:
//! still or again held → requeued at its new end; idle long enough → deleted; gone or no longer
//! a lock → forgotten. So a sweep never visits a key before it could be reclaimable and never
//! scans the keyspace.

use std::collections::BTreeMap;

use crate::lease::{Lock, Micros};

/// A lock key and the time its lease ended or will end, as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub idle_from: Micros,
    pub db: i32,
    pub key: Box<[u8]>,
}

/// Where an entry sits: ordered by time first. The name's hash instead of the name itself lets a
/// release find and move its key's entry without allocating. Two names of one database with the
/// same hash and the same microsecond are told apart by probing: the later one takes the next
/// hash value that is free.
type Slot = (Micros, i32, u64);

/// Approximate heap bytes of one entry beyond its key name: the slot, the boxed name, their
/// share of a B-tree node, and the allocator's header for the name. For `INFO`.
const ENTRY_OVERHEAD: usize =
    (std::mem::size_of::<Slot>() + std::mem::size_of::<Box<[u8]>>()) * 3 / 2 + 16;

/// FNV-1a: a few instructions a byte, on every acquire of a new key and every release.
fn hash(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// The tracked lock keys, soonest idle first.
#[derive(Debug, Default)]
pub struct Index {
    entries: BTreeMap<Slot, Box<[u8]>>,
    bytes: usize,
}

impl Index {
    pub const fn new() -> Self {
        Self { entries: BTreeMap::new(), bytes: 0 }
    }

    /// The slot `key` holds at `idle_from` (`Ok`), or the free slot it would take (`Err`).
    fn probe(&self, idle_from: Micros, db: i32, key: &[u8]) -> Result<Slot, Slot> {
        let mut at = (idle_from, db, hash(key));
        loop {
            match self.entries.get(&at) {
                Some(name) if **name == *key => return Ok(at),
                Some(_) => at.2 = at.2.wrapping_add(1),
                None => return Err(at),
            }
        }
    }

    /// Stops tracking `key` at `idle_from`; its name back, when it was there.
    pub fn untrack(&mut self, idle_from: Micros, db: i32, key: &[u8]) -> Option<Box<[u8]>> {
        let at = self.probe(idle_from, db, key).ok()?;
        let name = self.entries.remove(&at)?;
        self.bytes = self.bytes.saturating_sub(name.len() + ENTRY_OVERHEAD);
        Some(name)
    }

    /// Tracks `key` (in `db`) as idle from `idle_from` on, moving its entry from `was` (where it
    /// was tracked before, if it was) without a new allocation.
    pub fn track(&mut self, was: Option<Micros>, idle_from: Micros, db: i32, key: &[u8]) {
        let name = was.and_then(|was| self.untrack(was, db, key)).unwrap_or_else(|| key.into());
        self.insert(Entry { idle_from, db, key: name });
    }

    /// Puts an entry (back) in the index; a key already tracked at that time stays tracked once.
    pub fn insert(&mut self, entry: Entry) {
        if let Err(at) = self.probe(entry.idle_from, entry.db, &entry.key) {
            self.bytes += entry.key.len() + ENTRY_OVERHEAD;
            self.entries.insert(at, entry.key);
        }
    }

    /// Takes out the first entry that is due at `now`: its key has been idle for `reclaim_after`
    /// if nothing changed since it was tracked.
    pub fn pop_due(&mut self, now: Micros, reclaim_after: Micros) -> Option<Entry> {
        let (&(idle_from, _, _), _) = self.entries.first_key_value()?;
        if now < idle_from.saturating_add(reclaim_after) {
            return None;
        }
        let ((idle_from, db, _), key) = self.entries.pop_first()?;
        self.bytes = self.bytes.saturating_sub(key.len() + ENTRY_OVERHEAD);
        Some(Entry { idle_from, db, key })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Approximate heap bytes the index holds, for `INFO fencedlock`.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// What to do with a due entry, given what its key holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nobody has held it for `reclaim_after`: delete it (on the primary).
    Delete,
    /// Held again, renewed, or not idle long enough yet: look again once it could be.
    Requeue { idle_from: Micros },
    /// The key is gone or holds something else: it is not ours to track.
    Forget,
}

/// The decision for a due entry whose key now holds `found`.
pub fn decide(found: Option<&Lock>, now: Micros, reclaim_after: Micros) -> Verdict {
    match found {
        None => Verdict::Forget,
        Some(lock) if lock.reclaimable(now, reclaim_after) => Verdict::Delete,
        Some(lock) => Verdict::Requeue { idle_from: lock.idle_from() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fence::HighWater;
    use crate::lease::Acquired;

    const MS: Micros = 1000;

    fn held(token: &[u8], ttl: Micros, now: Micros) -> Lock {
        let mut lock = Lock::new();
        let r = lock.acquire(&mut HighWater::default(), token, ttl, now, 0);
        assert!(matches!(r, Ok(Acquired::Granted { .. })));
        lock
    }

    #[test]
    fn a_held_lease_is_never_reclaimed_whatever_the_retention() {
        let lock = held(b"a", 100 * MS, 0);
        for after in [0, 1, 50 * MS] {
            assert_eq!(decide(Some(&lock), 99 * MS, after), Verdict::Requeue { idle_from: 100 * MS });
        }
    }

    #[test]
    fn an_expired_lease_is_reclaimed_retention_after_its_deadline() {
        let lock = held(b"a", 100 * MS, 0);
        assert_eq!(decide(Some(&lock), 100 * MS, 0), Verdict::Delete);
        assert_eq!(decide(Some(&lock), 159 * MS, 60 * MS), Verdict::Requeue { idle_from: 100 * MS });
        assert_eq!(decide(Some(&lock), 160 * MS, 60 * MS), Verdict::Delete);
    }

    #[test]
    fn a_released_lease_is_reclaimed_retention_after_the_release() {
        let mut lock = held(b"a", 100 * MS, 0);
        lock.release(b"a", 10 * MS);
        assert_eq!(lock.idle_from(), 10 * MS);
        assert_eq!(decide(Some(&lock), 69 * MS, 60 * MS), Verdict::Requeue { idle_from: 10 * MS });
        assert_eq!(decide(Some(&lock), 70 * MS, 60 * MS), Verdict::Delete);
    }

    #[test]
    fn a_renewed_lease_is_requeued_at_its_new_deadline() {
        let mut lock = held(b"a", 100 * MS, 0);
        assert!(lock.renew(b"a", 100 * MS, 90 * MS));
        assert_eq!(decide(Some(&lock), 100 * MS, 0), Verdict::Requeue { idle_from: 190 * MS });
    }

    #[test]
    fn a_missing_key_is_forgotten() {
        assert_eq!(decide(None, 0, 0), Verdict::Forget);
    }

    #[test]
    fn entries_fall_due_in_order_of_idleness_and_not_before() {
        let mut index = Index::new();
        index.track(None, 30 * MS, 0, b"c");
        index.track(None, 10 * MS, 0, b"a");
        index.track(None, 20 * MS, 1, b"b");
        assert_eq!(index.len(), 3);
        assert!(index.bytes() > 3 * ENTRY_OVERHEAD);
        assert_eq!(index.pop_due(14 * MS, 5 * MS), None);
        assert_eq!(index.pop_due(15 * MS, 5 * MS).map(|e| e.key), Some(b"a"[..].into()));
        assert_eq!(index.pop_due(15 * MS, 5 * MS), None);
        let b = index.pop_due(100 * MS, 5 * MS).expect("due");
        assert_eq!((b.db, &*b.key), (1, &b"b"[..]));
        assert_eq!(index.pop_due(100 * MS, 5 * MS).map(|e| e.key), Some(b"c"[..].into()));
        assert_eq!((index.len(), index.bytes()), (0, 0));
    }

    #[test]
    fn a_key_requeued_where_it_already_stands_is_tracked_once() {
        let mut index = Index::new();
        index.track(None, 10 * MS, 0, b"k");
        index.insert(Entry { idle_from: 10 * MS, db: 0, key: b"k"[..].into() });
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn a_release_moves_the_entry_of_its_key() {
        let mut index = Index::new();
        index.track(None, 100 * MS, 0, b"k");
        index.track(None, 100 * MS, 0, b"other");
        let bytes = index.bytes();
        index.track(Some(100 * MS), 20 * MS, 0, b"k");
        assert_eq!((index.len(), index.bytes()), (2, bytes));
        let first = index.pop_due(20 * MS, 0).expect("moved to 20 ms");
        assert_eq!(&*first.key, b"k");
        assert_eq!(index.pop_due(99 * MS, 0), None, "the old place is empty");
        // Moving from a place where the key is not tracked tracks it anyway.
        index.track(Some(5 * MS), 30 * MS, 1, b"k");
        assert_eq!(index.len(), 2);
    }

    #[test]
    fn names_sharing_a_hash_and_a_time_are_both_tracked() {
        // FNV-1a collisions are rare; force one by filling the slot the name hashes to.
        let mut index = Index::new();
        index.entries.insert((7, 0, hash(b"mine")), b"other"[..].into());
        index.track(None, 7, 0, b"mine");
        assert_eq!(index.len(), 2);
        assert!(index.untrack(7, 0, b"mine").is_some(), "found past the other name");
        assert_eq!(index.entries.get(&(7, 0, hash(b"mine"))).map(|n| &**n), Some(&b"other"[..]));
    }

    #[test]
    fn retention_changes_apply_to_entries_already_tracked() {
        let mut index = Index::new();
        index.track(None, 10 * MS, 0, b"k");
        assert_eq!(index.pop_due(20 * MS, 600_000 * MS), None);
        assert!(index.pop_due(20 * MS, 0).is_some());
    }
}
