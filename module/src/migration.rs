//! Atomic slot migration (Valkey 9's `CLUSTER MIGRATESLOTS`, Redis 8.4+'s `CLUSTER MIGRATION
//! IMPORT`), the pure side: which slots are leaving this node, and what each server's events
//! mean. Pure, unit-tested without a server; `ffi::migration` subscribes and decodes.
//!
//! The keys themselves need nothing: lock keys, semaphores, read leases and slot floors are
//! values of our type, carried by the migration's snapshot and its stream like any key (Valkey
//! sends them as the type's AOF records, Redis as its RDB form), and the floor key keeps every
//! fence the slot granted. What a migration does need is the waiters. A handoff to a waiter is
//! the module's own write, made from a timer: made while the source pauses writes for the
//! hand-over, or after it but before the slot's keys are trimmed (Redis trims in the
//! background, with no unlink callback), it would grant a lease that the new owner never
//! hears of. So from the moment a slot starts leaving, its waiters are told to ask again
//! (`TRYAGAIN`), a `BLOCK` on its keys is answered the same way instead of queueing, and reclaim
//! leaves its keys alone; a failed or cancelled migration lifts that, and the source goes on as
//! before.

use std::ops::RangeInclusive;

use fencedlock_protocol::cluster::SLOTS;

const WORDS: usize = SLOTS as usize / 64;

/// The slots being migrated away from this node.
#[derive(Debug, Clone)]
pub struct Leaving {
    bits: [u64; WORDS],
    count: usize,
}

impl Default for Leaving {
    fn default() -> Self {
        Self::new()
    }
}

impl Leaving {
    pub const fn new() -> Self {
        Leaving { bits: [0; WORDS], count: 0 }
    }

    /// Whether no slot is leaving: the common case, answered without computing a key's slot.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn contains(&self, slot: usize) -> bool {
        slot < usize::from(SLOTS) && self.bits[slot / 64] & (1 << (slot % 64)) != 0
    }

    /// Marks `slots` as leaving (slots past the last are ignored: the server sent them).
    pub fn mark(&mut self, slots: RangeInclusive<usize>) {
        self.set(slots, true);
    }

    /// The migration of `slots` ended: failed, cancelled, or done (then the keys are gone).
    pub fn unmark(&mut self, slots: RangeInclusive<usize>) {
        self.set(slots, false);
    }

    fn set(&mut self, slots: RangeInclusive<usize>, leaving: bool) {
        let last = (*slots.end()).min(usize::from(SLOTS) - 1);
        for slot in *slots.start()..=last {
            let (word, bit) = (slot / 64, 1u64 << (slot % 64));
            if (self.bits[word] & bit != 0) != leaving {
                self.bits[word] ^= bit;
                if leaving {
                    self.count += 1;
                } else {
                    self.count -= 1;
                }
            }
        }
    }
}

/// Which server's events these are: the two number them differently (Valkey's event 19 is its
/// atomic slot migration, Redis's 19 is the trim after one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// Valkey 9+: `VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION`.
    Valkey,
    /// Redis 8.4+: `REDISMODULE_EVENT_CLUSTER_SLOT_MIGRATION`.
    Redis,
}

/// What a migration event means for the slots it names, on the node they leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Export {
    /// The slots start leaving: their waiters ask again, and no new one queues.
    Started,
    /// The migration failed or was cancelled: the slots stay here.
    Failed,
    /// The slots belong to the destination now; their keys are about to be trimmed here.
    Completed,
}

impl Server {
    /// The server event to subscribe to.
    pub fn event(self) -> u64 {
        match self {
            Server::Valkey => 19,
            Server::Redis => 18,
        }
    }

    /// What `subevent` of [`Server::event`] means on the exporting side; `None` for the
    /// importing side's events (the destination has no waiters on a slot it does not serve
    /// yet) and Redis's fork-side propagation hook.
    pub fn export(self, subevent: u64) -> Option<Export> {
        match (self, subevent) {
            // EXPORT_STARTED, EXPORT_ABORTED, EXPORT_COMPLETED
            (Server::Valkey, 1) | (Server::Redis, 3) => Some(Export::Started),
            // MIGRATE_STARTED, MIGRATE_FAILED, MIGRATE_COMPLETED
            (Server::Valkey, 3) | (Server::Redis, 4) => Some(Export::Failed),
            (Server::Valkey, 5) | (Server::Redis, 5) => Some(Export::Completed),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_and_unmarks_ranges_and_counts_them() {
        let mut leaving = Leaving::new();
        assert!(leaving.is_empty());
        leaving.mark(10..=12);
        leaving.mark(12..=13);
        assert!(!leaving.is_empty());
        assert!((10..=13).all(|s| leaving.contains(s)));
        assert!(!leaving.contains(9) && !leaving.contains(14));
        leaving.unmark(10..=11);
        assert!(!leaving.contains(10) && leaving.contains(12));
        leaving.unmark(0..=16383);
        assert!(leaving.is_empty());
    }

    #[test]
    fn the_edges_of_the_slot_space_and_past_it() {
        let mut leaving = Leaving::new();
        leaving.mark(0..=0);
        leaving.mark(16383..=20000);
        assert!(leaving.contains(0) && leaving.contains(16383));
        assert!(!leaving.contains(16384) && !leaving.contains(1));
        leaving.unmark(0..=16383);
        assert!(leaving.is_empty());
    }

    #[test]
    fn each_servers_subevents() {
        use Export::*;
        let valkey: Vec<_> = (0..7).map(|e| Server::Valkey.export(e)).collect();
        assert_eq!(valkey, [None, Some(Started), None, Some(Failed), None, Some(Completed), None]);
        let redis: Vec<_> = (0..8).map(|e| Server::Redis.export(e)).collect();
        assert_eq!(redis, [None, None, None, Some(Started), Some(Failed), Some(Completed), None, None]);
        assert_ne!(Server::Valkey.event(), Server::Redis.event());
    }
}
