//! Which idle lock keys to delete, and when. Pure: the sweeper (FFI, `sweeper.rs`) pops due
//! entries, looks each key up, and does what [`decide`] says.
//!
//! Every stored lock key is tracked by an entry filed under the time its lease ended or will end
//! ([`Lock::idle_from`], on the monotonic clock), in buckets of [`GRAIN`]. Filing is an append
//! (a grant of a new key and every release pay a few dozen instructions and no allocation of
//! their own), and nothing is ever taken out early: a release or a rename files the key again,
//! and the key's value remembers the bucket of its newest entry ([`Lock::tracked_at`]), so an
//! older entry is recognised as stale when it falls due and skipped. When a live entry falls
//! due, the key's *current* state decides: held again or renewed → filed again at its new end;
//! idle long enough → deleted; gone → forgotten. A sweep never visits a key before it could be
//! reclaimable and never scans the keyspace.
//!
//! An entry costs its name plus 8 bytes, in one arena per bucket.

use std::collections::BTreeMap;

use crate::lock::{Lock, Micros};

/// Width of a bucket: entries are due together once the latest time their bucket covers plus
/// the retention has passed, so a key is reclaimed at most this much later than it could be.
pub const GRAIN: Micros = 100_000;

/// The bucket a key idle from `idle_from` is filed in.
pub const fn bucket_of(idle_from: Micros) -> u64 {
    idle_from / GRAIN
}

/// The names filed in one bucket, back to back.
#[derive(Debug, Default)]
struct Bucket {
    names: Vec<u8>,
    /// Where each name ends in `names`.
    ends: Vec<u32>,
    dbs: Vec<i32>,
}

/// Heap bytes of a bucket beyond its entries (the map node's share and three vectors).
const BUCKET_OVERHEAD: usize = 3 * std::mem::size_of::<Vec<u8>>() + 32;

/// A due entry: the bucket it was filed in, and the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub bucket: u64,
    pub db: i32,
    pub key: Vec<u8>,
}

/// The tracked lock keys, by bucket, soonest idle first.
#[derive(Debug, Default)]
pub struct Index {
    buckets: BTreeMap<u64, Bucket>,
    /// Entries of the first bucket already handed out by `pop_due`.
    taken: usize,
    len: usize,
    bytes: usize,
}

impl Index {
    pub const fn new() -> Self {
        Self { buckets: BTreeMap::new(), taken: 0, len: 0, bytes: 0 }
    }

    /// Files `key` (in `db`) as idle from `idle_from` on; returns the bucket, for
    /// [`Lock::set_tracked_at`].
    pub fn track(&mut self, idle_from: Micros, db: i32, key: &[u8]) -> u64 {
        let id = bucket_of(idle_from);
        let bucket = self.buckets.entry(id).or_insert_with(|| {
            self.bytes += BUCKET_OVERHEAD;
            Bucket::default()
        });
        bucket.names.extend_from_slice(key);
        bucket.ends.push(u32::try_from(bucket.names.len()).unwrap_or(u32::MAX));
        bucket.dbs.push(db);
        self.len += 1;
        self.bytes += key.len() + 8;
        id
    }

    /// The next entry of the first bucket that is wholly due at `now`: every key in it has been
    /// idle for `reclaim_after`, unless it changed since it was filed.
    pub fn pop_due(&mut self, now: Micros, reclaim_after: Micros) -> Option<Due> {
        let (&id, bucket) = self.buckets.first_key_value()?;
        let covers_until = id.saturating_add(1).saturating_mul(GRAIN);
        if now < covers_until.saturating_add(reclaim_after) {
            return None;
        }
        let i = self.taken;
        let start = if i == 0 { 0 } else { bucket.ends[i - 1] as usize };
        let end = bucket.ends[i] as usize;
        let due = Due { bucket: id, db: bucket.dbs[i], key: bucket.names[start..end].to_vec() };
        self.taken += 1;
        self.len -= 1;
        self.bytes = self.bytes.saturating_sub(due.key.len() + 8);
        if self.taken == bucket.ends.len() {
            self.buckets.pop_first();
            self.taken = 0;
            self.bytes = self.bytes.saturating_sub(BUCKET_OVERHEAD);
        }
        Some(due)
    }

    pub fn len(&self) -> usize {
        self.len
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
    /// Held again, or renewed: file it again where its lease ends now.
    Requeue { idle_from: Micros },
    /// The key is gone, holds something else, or was filed again since (a stale entry).
    Forget,
}

/// The decision for an entry filed in `bucket` whose key now holds `found`.
pub fn decide(found: Option<&Lock>, bucket: u64, now: Micros, reclaim_after: Micros) -> Verdict {
    match found {
        Some(lock) if lock.tracked_at() != bucket => Verdict::Forget,
        None => Verdict::Forget,
        Some(lock) if lock.reclaimable(now, reclaim_after) => Verdict::Delete,
        Some(lock) => Verdict::Requeue { idle_from: lock.idle_from() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fence::HighWater;
    use crate::lock::Acquired;

    const MS: Micros = 1000;

    /// A lock held by `token` until `now + ttl`, filed where the index would file it.
    fn held(token: &[u8], ttl: Micros, now: Micros) -> Lock {
        let mut lock = Lock::new();
        let r = lock.acquire(&mut HighWater::default(), token, None, ttl, now, 0);
        assert!(matches!(r, Ok(Acquired::Granted { .. })));
        lock.set_tracked_at(bucket_of(lock.idle_from()));
        lock
    }

    fn decide_now(lock: &Lock, now: Micros, after: Micros) -> Verdict {
        decide(Some(lock), lock.tracked_at(), now, after)
    }

    #[test]
    fn a_held_lease_is_never_reclaimed_whatever_the_retention() {
        let lock = held(b"a", 100 * MS, 0);
        for after in [0, 1, 50 * MS] {
            assert_eq!(decide_now(&lock, 99 * MS, after), Verdict::Requeue { idle_from: 100 * MS });
        }
    }

    #[test]
    fn an_expired_lease_is_reclaimed_retention_after_its_deadline() {
        let lock = held(b"a", 100 * MS, 0);
        assert_eq!(decide_now(&lock, 100 * MS, 0), Verdict::Delete);
        assert_eq!(decide_now(&lock, 159 * MS, 60 * MS), Verdict::Requeue { idle_from: 100 * MS });
        assert_eq!(decide_now(&lock, 160 * MS, 60 * MS), Verdict::Delete);
    }

    #[test]
    fn a_released_lease_is_reclaimed_retention_after_the_release() {
        let mut lock = held(b"a", 100 * MS, 0);
        lock.release(b"a", 10 * MS);
        assert_eq!(lock.idle_from(), 10 * MS);
        assert_eq!(decide_now(&lock, 69 * MS, 60 * MS), Verdict::Requeue { idle_from: 10 * MS });
        assert_eq!(decide_now(&lock, 70 * MS, 60 * MS), Verdict::Delete);
    }

    #[test]
    fn a_renewed_lease_is_requeued_at_its_new_deadline() {
        let mut lock = held(b"a", 100 * MS, 0);
        assert!(lock.renew(b"a", 100 * MS, 90 * MS));
        assert_eq!(decide_now(&lock, 100 * MS, 0), Verdict::Requeue { idle_from: 190 * MS });
    }

    #[test]
    fn a_missing_key_and_a_stale_entry_are_forgotten() {
        assert_eq!(decide(None, 0, 0, 0), Verdict::Forget);
        let lock = held(b"a", 100 * MS, 0);
        let stale = lock.tracked_at() + 1;
        assert_eq!(decide(Some(&lock), stale, 10_000 * MS, 0), Verdict::Forget);
    }

    #[test]
    fn entries_fall_due_bucket_by_bucket_in_order_and_not_before() {
        let mut index = Index::new();
        assert_eq!(index.track(350 * MS, 0, b"c"), 3);
        assert_eq!(index.track(120 * MS, 0, b"a"), 1);
        assert_eq!(index.track(150 * MS, 1, b"bb"), 1);
        assert_eq!(index.len(), 3);
        assert!(index.bytes() >= 4 + 3 * 8);
        // Bucket 1 covers up to 200 ms: with a retention of 5 ms it is due at 205 ms.
        assert_eq!(index.pop_due(204 * MS, 5 * MS), None);
        let a = index.pop_due(205 * MS, 5 * MS).expect("due");
        assert_eq!(a, Due { bucket: 1, db: 0, key: b"a".to_vec() });
        assert_eq!(index.pop_due(205 * MS, 5 * MS), Some(Due { bucket: 1, db: 1, key: b"bb".to_vec() }));
        assert_eq!(index.pop_due(205 * MS, 5 * MS), None, "bucket 3 is not due");
        assert_eq!(index.pop_due(405 * MS, 5 * MS).map(|d| d.key), Some(b"c".to_vec()));
        assert_eq!((index.len(), index.bytes()), (0, 0));
    }

    #[test]
    fn retention_changes_apply_to_entries_already_tracked() {
        let mut index = Index::new();
        index.track(10 * MS, 0, b"k");
        assert_eq!(index.pop_due(200 * MS, 600_000 * MS), None);
        assert!(index.pop_due(200 * MS, 0).is_some());
    }

    #[test]
    fn a_key_filed_twice_is_decided_once() {
        // Filed at its deadline when granted, then again when released: the first entry is
        // stale by then, so only the newest one decides.
        let mut index = Index::new();
        let mut lock = held(b"a", 1000 * MS, 0);
        index.track(lock.idle_from(), 0, b"k");
        lock.release(b"a", 10 * MS);
        lock.set_tracked_at(index.track(lock.idle_from(), 0, b"k"));
        let first = index.pop_due(200 * MS, 0).expect("the release's entry");
        assert_eq!(decide(Some(&lock), first.bucket, 200 * MS, 0), Verdict::Delete);
        let second = index.pop_due(2000 * MS, 0).expect("the grant's entry");
        assert_eq!(decide(Some(&lock), second.bucket, 2000 * MS, 0), Verdict::Forget);
    }
}
