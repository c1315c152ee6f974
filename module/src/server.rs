//! Every piece of server-wide state, in one value: [`SERVER`]. A reader looking for what the
//! module remembers beyond its keys finds it all here:
//!
//! - the fence high-water mark, and the load that may start a new epoch (`epoch.rs`);
//! - the restart grace window and the three `fencedlock.*` configs;
//! - the reclaim index of idle lock keys (`reclaim.rs` decides, `sweeper.rs` sweeps it on a
//!   repeating timer);
//! - the wait queues of `ACQUIRE … BLOCK`, their wake-up timer and the handoffs lost to
//!   disconnects (`waiting.rs` decides, `blocking.rs` serves).
//!
//! Beside it: the `INFO` counters (`counters.rs`, a leaf every layer counts into), and what the
//! FFI layer keeps to talk to Redis (the timer context, the cluster flag, the flush and data-type
//! hooks, all set once at load).
//!
//! Redis runs commands, persistence callbacks, timers and server events on its main thread; the
//! atomics are there because an RDB child reads the mark too, and they cost nothing
//! uncontended. The two locks are never contended either; they make the state `Sync`.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex, MutexGuard};

use fencedlock_protocol::limits::{DEFAULT_MAX_TTL_MS, DEFAULT_RECLAIM_AFTER_MS, MAX_MAX_TTL_MS};

use crate::fence::HighWater;
use crate::ffi::{BlockedClient, TimerId};
use crate::lock::{Lock, Micros};
use crate::migration::Leaving;
use crate::reclaim::Index;
use crate::slot;
use crate::waiting::{KeyId, Queues};

/// The configs' defaults and bound as Redis's integer configs take them; all fit an `i64`.
pub const CONFIG_DEFAULT_MAX_TTL_MS: i64 = DEFAULT_MAX_TTL_MS as i64;
pub const CONFIG_DEFAULT_RECLAIM_AFTER_MS: i64 = DEFAULT_RECLAIM_AFTER_MS as i64;
pub const CONFIG_MAX_MS: i64 = MAX_MAX_TTL_MS as i64;

/// The one server.
pub static SERVER: Server = Server::new();

pub struct Server {
    high_water: AtomicU64,
    /// What the load in progress reads from ([`Load`]): only loads from disk start an epoch.
    loading_from: AtomicU8,
    /// Whether a load from disk ended since the module loaded: the first one opens the grace.
    loaded_from_disk: AtomicBool,
    /// When the current grace window started (module load, then the first load from disk).
    grace_from: AtomicU64,
    /// `fencedlock.max-ttl-ms`: a typo'd ttl of years would otherwise lock a job out for good.
    pub max_ttl_ms: AtomicI64,
    /// `fencedlock.reclaim-after-ms`: idle lock keys are deleted this long after their lease ended.
    pub reclaim_after_ms: AtomicI64,
    /// `fencedlock.restart-grace-ms`: the Redlock spec's delayed restart.
    pub restart_grace_ms: AtomicI64,
    /// Every stored lock key, by when it falls idle.
    reclaim: Mutex<Index>,
    waits: LazyLock<Mutex<WaitState>>,
    /// Waiters queued now, readable without the lock: a command on a key nobody waits for pays
    /// one load of this, nothing more.
    waiters: AtomicUsize,
}

/// The waiting side's state.
pub struct WaitState {
    pub queues: Queues<BlockedClient>,
    /// The wake-up timer and the instant it was armed for.
    pub armed: Option<(TimerId, Micros)>,
    /// Handoffs whose client went away before the reply reached it, to be given back.
    pub lost: Vec<LostGrant>,
    /// Slots an atomic migration is moving away: their keys get no waiters (`migration.rs`).
    pub leaving: Leaving,
}

impl WaitState {
    /// Whether `name`'s slot is moving away from this node.
    pub fn is_leaving(&self, name: &[u8]) -> bool {
        !self.leaving.is_empty() && self.leaving.contains(slot::slot(name))
    }
}

/// A lease granted to a waiter that disconnected before it heard of it.
pub struct LostGrant {
    pub key: KeyId,
    pub token: Box<[u8]>,
    pub fence: u64,
}

/// Where a load reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    None = 0,
    Disk = 1,
    Replication = 2,
}

impl Server {
    const fn new() -> Self {
        Self {
            high_water: AtomicU64::new(0),
            loading_from: AtomicU8::new(Load::None as u8),
            loaded_from_disk: AtomicBool::new(false),
            grace_from: AtomicU64::new(0),
            max_ttl_ms: AtomicI64::new(CONFIG_DEFAULT_MAX_TTL_MS),
            reclaim_after_ms: AtomicI64::new(CONFIG_DEFAULT_RECLAIM_AFTER_MS),
            restart_grace_ms: AtomicI64::new(0),
            reclaim: Mutex::new(Index::new()),
            waits: LazyLock::new(|| {
                Mutex::new(WaitState {
                    queues: Queues::new(),
                    armed: None,
                    lost: Vec::new(),
                    leaving: Leaving::new(),
                })
            }),
            waiters: AtomicUsize::new(0),
        }
    }

    pub fn high_water(&self) -> HighWater {
        HighWater::new(self.high_water.load(Relaxed))
    }

    pub fn set_high_water(&self, mark: HighWater) {
        self.high_water.store(mark.get(), Relaxed);
    }

    /// Applies `change` to the mark (a jump, or a fence seen in RDB aux data).
    pub fn update_high_water(&self, change: impl FnOnce(&mut HighWater)) -> HighWater {
        let mut mark = self.high_water();
        change(&mut mark);
        self.set_high_water(mark);
        mark
    }

    /// A load began, reading from `from`.
    pub fn loading(&self, from: Load) {
        self.loading_from.store(from as u8, Relaxed);
    }

    /// The load in progress ended: what it read from.
    pub fn loaded(&self) -> Load {
        match self.loading_from.swap(Load::None as u8, Relaxed) {
            1 => Load::Disk,
            2 => Load::Replication,
            _ => Load::None,
        }
    }

    /// Whether this is the first load from disk since the module loaded (the start-up load).
    pub fn first_load_from_disk(&self) -> bool {
        !self.loaded_from_disk.swap(true, Relaxed)
    }

    pub fn max_ttl_ms(&self) -> u64 {
        u64::try_from(self.max_ttl_ms.load(Relaxed)).unwrap_or(1)
    }

    /// `fencedlock.reclaim-after-ms` in microseconds. Read at each sweep, so `CONFIG SET`
    /// applies at once.
    pub fn reclaim_after(&self) -> Micros {
        u64::try_from(self.reclaim_after_ms.load(Relaxed)).unwrap_or(0).saturating_mul(1000)
    }

    pub fn start_grace(&self, now: Micros) {
        self.grace_from.store(now, Relaxed);
    }

    /// How long new grants are still refused. Read at each grant, so `CONFIG SET` applies at once.
    pub fn grace_left(&self, now: Micros) -> Micros {
        let grace_ms = u64::try_from(self.restart_grace_ms.load(Relaxed)).unwrap_or(0);
        self.grace_from.load(Relaxed).saturating_add(grace_ms.saturating_mul(1000)).saturating_sub(now)
    }

    /// The reclaim index.
    pub fn reclaim_index(&self) -> MutexGuard<'_, Index> {
        // A panic while the lock was held leaves a consistent index (every method completes or
        // does nothing), so a poisoned lock is safe to keep using.
        self.reclaim.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Files the lock stored under `key` in `db` in the reclaim index as idle from its
    /// `idle_from` on, moving the entry it had. Only `store.rs` (and the data type's loads,
    /// through the same function) files: every way a lock key comes to exist, and every release.
    pub fn file(&self, lock: &mut Lock, db: i32, key: &[u8]) {
        if slot::is_floor_key(key) {
            return; // a slot's floor must outlive its lock keys
        }
        let bucket = self.reclaim_index().track(lock.idle_from(), db, key);
        lock.set_tracked_at(bucket);
    }

    /// Runs `f` on the waiting side's state and refreshes the waiter count.
    pub fn waits<T>(&self, f: impl FnOnce(&mut WaitState) -> T) -> T {
        // Every method leaves the state consistent, so a poisoned lock is safe to keep using.
        let mut waits = self.waits.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let result = f(&mut waits);
        self.waiters.store(waits.queues.len(), Relaxed);
        result
    }

    /// Waiters queued now.
    pub fn waiters(&self) -> usize {
        self.waiters.load(Relaxed)
    }

    /// Whether `name`'s slot is moving away from this node (reclaim leaves its keys alone).
    pub fn is_leaving(&self, name: &[u8]) -> bool {
        self.waits(|w| w.is_leaving(name))
    }

    /// Whether anyone waits on `name` in `db`.
    pub fn is_waited_at(&self, db: i32, name: &[u8]) -> bool {
        self.waiters() > 0 && self.waits(|w| w.queues.is_waited(&(db, name.into())))
    }
}
