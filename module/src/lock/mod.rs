//! The value of one lock key and every decision about it, as pure functions of that state, the
//! server's high-water mark and an injected monotonic `now` (microseconds). This file keeps the
//! value, its fence policy and the decisions, dispatched on the key's kind: `mutex.rs` (one
//! holder) and `semaphore.rs` (up to `PERMITS` holders, or read leases); `holder.rs` is one
//! holder, `terms.rs` the words they all share, `record.rs` the state as it travels
//! (replication, AOF, RDB), `layout.rs` its bytes there, `validate.rs` the gate it passes in.
//!
//! A read-write lock is not a kind of its own: its write lease is the mutex, and its read
//! leases (`SHARED`) a semaphore of `SHARED_PERMITS`. The two modes of one key meet only in
//! [`Lock::acquire_for`], which makes a writer and readers exclude each other.
//!
//! Nothing here touches Redis, so all of it is unit-tested without a server. The glue parses
//! arguments, opens the key, calls one of these, replies and replicates the resulting record.

use std::time::Duration;

use fencedlock_protocol::command::SHARED_PERMITS;
use fencedlock_protocol::limits::MAX_FENCE;
use fencedlock_protocol::{LockStatus, SemaphoreStatus};

use crate::error::LockError;
use crate::fence::HighWater;

mod holder;
pub mod layout;
mod mutex;
pub mod record;
mod semaphore;
pub mod terms;
pub mod validate;

use holder::Holder;
use mutex::Mutex;
use record::{Holding, Record, SemaphoreRecord, Snapshot};
use semaphore::{Permit, Semaphore};
pub use terms::{Acquired, Ask, Expired, Micros, Moment, Released, Span};

/// `tracked_at` of a value with no live reclaim entry (no bucket has this number).
const UNFILED: u64 = u64::MAX;

/// The value of a lock key: its last fence, and who holds it until when.
///
/// The fence stays when the lease ends, so the next grant on this key is always higher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    fence: u64,
    kind: Kind,
    /// The reclaim index's bucket of this key's newest entry: older entries are stale (see
    /// `reclaim.rs`). Not persisted: a loaded key is filed anew.
    tracked_at: u64,
}

/// A key's kind and its holders. A mutex holds its lease inline; a semaphore's holders live in
/// a box of their own, so a mutex key never pays for them: the two variants fit in the
/// mutex's 32 bytes with no tag (see `a_lock_value_stays_small`). Another boxed kind would need
/// a tag here (8 bytes on every key): it would share the box, as an enum of the boxed kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Mutex(Mutex),
    Semaphore(Box<Semaphore>),
}

/// What `STATUS` shows. Never the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status<'a> {
    pub fence: u64,
    /// Remaining lease time in milliseconds (rounded up), `None` when nobody holds it.
    pub pttl_ms: Option<u64>,
    /// The live holder's public label, if it has one.
    pub label: Option<&'a [u8]>,
}

/// The reply shape is the protocol's; it carries whole milliseconds.
impl From<Status<'_>> for LockStatus {
    fn from(status: Status<'_>) -> LockStatus {
        LockStatus {
            fence: status.fence,
            held: status.pttl_ms.is_some(),
            remaining: status.pttl_ms.map(Duration::from_millis),
            label: status.label.map(<[u8]>::to_vec),
        }
    }
}

impl Lock {
    /// A key that never held a lease. Only ever stored together with a grant.
    pub fn new() -> Self {
        Self { fence: 0, kind: Kind::Mutex(Mutex::ended(0)), tracked_at: 0 }
    }

    /// The mutex holder (live or expired); `None` for a semaphore key.
    fn holder(&self) -> Option<&Holder> {
        match &self.kind {
            Kind::Mutex(m) => m.holder(),
            Kind::Semaphore(_) => None,
        }
    }

    fn semaphore(&self) -> Option<&Semaphore> {
        match &self.kind {
            Kind::Semaphore(s) => Some(s),
            Kind::Mutex(_) => None,
        }
    }

    pub const fn fence(&self) -> u64 {
        self.fence
    }

    /// How many holders the key admits: 1 for a mutex.
    pub fn permits(&self) -> u32 {
        self.semaphore().map_or(1, |s| s.permits)
    }

    /// Every holder (live or expired) with its fence, for the digest only.
    pub fn holders(&self) -> Vec<(u64, &Holder)> {
        match (self.holder(), self.semaphore()) {
            (Some(holder), _) => vec![(self.fence, holder)],
            (None, Some(s)) => s.holders.iter().map(|p| (p.fence, &p.holder)).collect(),
            (None, None) => Vec::new(),
        }
    }

    /// The mutex holder's token, for tests.
    #[cfg(test)]
    pub fn token(&self) -> Option<&[u8]> {
        self.holder().map(Holder::token)
    }

    fn live_holder(&self, now: Micros) -> Option<&Holder> {
        match &self.kind {
            Kind::Mutex(m) => m.live(now),
            Kind::Semaphore(_) => None,
        }
    }

    /// Whether `token` holds an unexpired lease (a semaphore key: one of its permits).
    #[cfg(test)]
    pub fn held_by(&self, token: &[u8], now: Micros) -> bool {
        self.fence_of(token, now).is_some()
    }

    /// The fence of `token`'s unexpired lease.
    pub fn fence_of(&self, token: &[u8], now: Micros) -> Option<u64> {
        match (self.live_holder(now), self.semaphore()) {
            (Some(h), _) => (h.token() == token).then_some(self.fence),
            (None, Some(s)) => s.live(now).find(|p| p.holder.token() == token).map(|p| p.fence),
            (None, None) => None,
        }
    }

    /// Whether someone holds an unexpired lease.
    pub fn is_held(&self, now: Micros) -> bool {
        self.live_holder(now).is_some() || self.semaphore().is_some_and(|s| s.live(now).next().is_some())
    }

    /// Whether a new holder could be granted now (a free mutex, or a free permit).
    pub fn has_room(&self, now: Micros) -> bool {
        match self.semaphore() {
            Some(s) => s.has_room(now),
            None => self.live_holder(now).is_none(),
        }
    }

    /// When a held key frees up by expiry at the latest: the mutex holder's deadline (already
    /// past for an expired one), or the earliest unexpired permit's; `None` when nothing runs.
    /// Waiters are served at this instant.
    pub fn next_free(&self, now: Micros) -> Option<Micros> {
        match (self.holder(), self.semaphore()) {
            (Some(h), _) => Some(h.deadline),
            (None, Some(s)) => s.next_free(now),
            (None, None) => None,
        }
    }

    /// The count the key is held with, while anyone holds it.
    fn held_with(&self, now: Micros) -> Option<u32> {
        self.is_held(now).then(|| self.permits())
    }

    /// The mutex form of [`Lock::acquire_for`] (`PERMITS 1`), for tests.
    #[cfg(test)]
    pub fn acquire(
        &mut self,
        high_water: &mut HighWater,
        token: &[u8],
        label: Option<&[u8]>,
        ttl: Micros,
        now: Micros,
        grace_left: Micros,
    ) -> Result<Acquired, LockError> {
        self.acquire_permit(high_water, token, label, 1, ttl, now, grace_left)
    }

    /// [`Lock::acquire_for`] with the ask spelled out, for tests.
    #[cfg(test)]
    #[allow(clippy::too_many_arguments)]
    pub fn acquire_permit(
        &mut self,
        high_water: &mut HighWater,
        token: &[u8],
        label: Option<&[u8]>,
        permits: u32,
        ttl: Micros,
        now: Micros,
        grace_left: Micros,
    ) -> Result<Acquired, LockError> {
        self.acquire_for(
            high_water,
            &Ask { token, label, permits, ttl, queued_ahead: false },
            now,
            grace_left,
        )
    }

    /// Decides an `ACQUIRE`. `grace_left` is how long the server still refuses new grants after
    /// a restart (0: none); the holder may still re-enter during the grace: that grants nothing
    /// new.
    ///
    /// While anyone holds the key, another permit count than `ask.permits` is refused before
    /// anything else: two callers that disagree on the bound must not both believe theirs
    /// holds. An idle key takes the count of its next grant. The write and read leases of a
    /// read-write lock (1 and `SHARED_PERMITS`) are no disagreement but its two modes: each
    /// waits for the other ([`Lock::across_modes`]).
    pub fn acquire_for(
        &mut self,
        high_water: &mut HighWater,
        ask: &Ask<'_>,
        now: Micros,
        grace_left: Micros,
    ) -> Result<Acquired, LockError> {
        let Ask { token, label, permits, ttl, queued_ahead } = *ask;
        let deadline = now.saturating_add(ttl);
        if let Some(held_with) = self.held_with(now).filter(|held_with| *held_with != permits) {
            return self.across_modes(held_with, ask, deadline, now);
        }
        let reentered = match &mut self.kind {
            Kind::Mutex(m) => match m.live_mut(now) {
                Some(holder) if holder.token() != token => return Ok(Acquired::Busy),
                Some(holder) => Some((holder, self.fence)),
                None => None,
            },
            Kind::Semaphore(s) => {
                let room = s.has_room(now);
                match s.live_mut(token, now) {
                    Some(permit) => Some((&mut permit.holder, permit.fence)),
                    None if !room => return Ok(Acquired::Busy),
                    None => None,
                }
            }
        };
        if let Some((holder, fence)) = reentered {
            holder.deadline = deadline;
            if let Some(label) = label {
                holder.relabel(label);
            }
            return Ok(Acquired::Reentered { fence });
        }
        if grace_left > 0 {
            return Err(LockError::RestartGrace { remaining_ms: grace_left.div_ceil(1000) });
        }
        if queued_ahead {
            return Ok(Acquired::Busy);
        }
        let fence = high_water.next(self.fence)?;
        let took_over = match &self.kind {
            Kind::Mutex(m) => m.holder().is_some_and(|h| h.token() != token),
            Kind::Semaphore(s) => s.has_expired_other(token, now),
        };
        self.fence = fence;
        let holder = Holder::new(token, label, deadline, now);
        match &mut self.kind {
            _ if permits == 1 => self.kind = Kind::Mutex(Mutex::held(holder)),
            Kind::Semaphore(s) => s.grant(permits, Permit { fence, holder }, now),
            kind => *kind = Kind::Semaphore(Box::new(Semaphore::new(permits, Permit { fence, holder }, now))),
        }
        Ok(Acquired::Granted { fence, took_over })
    }

    /// An `ACQUIRE` for another count than the key is held with (`held_with`). A reader asking
    /// while a writer holds is refused (busy), unless it is that writer: then its lease becomes
    /// a read lease with the same fence, a downgrade nothing can come between. A writer asking
    /// while readers hold is refused (busy), and a reader asking to upgrade is told it cannot:
    /// two readers upgrading at once would each wait for the other to leave. Any other pair of
    /// counts disagrees on the key's bound.
    fn across_modes(
        &mut self,
        held_with: u32,
        ask: &Ask<'_>,
        deadline: Micros,
        now: Micros,
    ) -> Result<Acquired, LockError> {
        match (held_with, ask.permits) {
            (1, SHARED_PERMITS) => {
                let Kind::Mutex(m) = &mut self.kind else { return Err(LockError::Internal) };
                let Some(mut holder) = m.live(now).filter(|h| h.token() == ask.token).cloned() else {
                    return Ok(Acquired::Busy);
                };
                holder.deadline = deadline;
                if let Some(label) = ask.label {
                    holder.relabel(label);
                }
                let readers = Semaphore::new(SHARED_PERMITS, Permit { fence: self.fence, holder }, now);
                self.kind = Kind::Semaphore(Box::new(readers));
                Ok(Acquired::Reentered { fence: self.fence })
            }
            (SHARED_PERMITS, 1) if self.fence_of(ask.token, now).is_some() => Err(LockError::UpgradeRefused),
            (SHARED_PERMITS, 1) => Ok(Acquired::Busy),
            _ => Err(LockError::PermitsMismatch { permits: held_with }),
        }
    }

    /// True when the caller held an unexpired lease, which now runs `ttl` from `now`.
    pub fn renew(&mut self, token: &[u8], ttl: Micros, now: Micros) -> bool {
        let holder = match &mut self.kind {
            Kind::Mutex(m) => m.live_mut(now).filter(|h| h.token() == token),
            Kind::Semaphore(s) => s.live_mut(token, now).map(|p| &mut p.holder),
        };
        holder.map(|h| h.deadline = now.saturating_add(ttl)).is_some()
    }

    /// An expired lease is left as it is (the fence and the takeover count depend on it): its
    /// end is counted by [`Lock::take_expiries`].
    pub fn release(&mut self, token: &[u8], now: Micros) -> Released {
        match &mut self.kind {
            Kind::Mutex(m) => m.release(token, now),
            Kind::Semaphore(s) => s.release(token, now),
        }
    }

    /// The end of each expired lease, the first time anyone asks (later: nothing); nothing as
    /// well for live leases. Commands that find a lease expired ask (ACQUIRE before it decides,
    /// a refused RENEW or RELEASE, the waiters' handoff, the reclaim of the key), so an expiry
    /// is counted when it is first observed, not at the deadline: a lease that expires on a key
    /// nobody touches again is counted when its key is reclaimed. Changes only the metrics'
    /// mark: nothing any command decides or replicates.
    pub fn take_expiries(&mut self, now: Micros, mut report: impl FnMut(Expired)) {
        match &mut self.kind {
            Kind::Mutex(m) => {
                if let Some(expired) = m.take_expiry(now) {
                    report(expired);
                }
            }
            Kind::Semaphore(s) => s.take_expiries(now, &mut report),
        }
    }

    /// [`Lock::take_expiries`] of a mutex, for tests.
    #[cfg(test)]
    pub fn take_expiry(&mut self, now: Micros) -> Option<Expired> {
        let mut found = None;
        self.take_expiries(now, |e| found = Some(e));
        found
    }

    /// The value for `COPY`: the same fence and leases, with the grant times forgotten, so one
    /// grant does not enter the hold-time distributions twice (once per key).
    pub fn copied(&self) -> Lock {
        let mut copy = self.clone();
        match &mut copy.kind {
            Kind::Mutex(m) => m.forget_grant(),
            Kind::Semaphore(s) => s.holders.iter_mut().for_each(|p| p.holder.forget_grant()),
        }
        copy
    }

    /// Fenced Redlock's step: the holder lifts its own fence to `fence` (the quorum's maximum).
    /// Returns the key's fence afterwards, or `None` when the caller does not hold the lease, so
    /// a raise can never reach a lease that another client was granted in the meantime. A
    /// semaphore key is never raised (Redlock has no semaphores): its holders' fences must stay
    /// in grant order.
    pub fn raise(
        &mut self,
        high_water: &mut HighWater,
        token: &[u8],
        fence: u64,
        now: Micros,
    ) -> Option<u64> {
        if self.live_holder(now).is_none_or(|h| h.token() != token) {
            return None;
        }
        self.fence = self.fence.max(fence.min(MAX_FENCE));
        high_water.observe(self.fence);
        Some(self.fence)
    }

    /// A mutex key's status (see [`Lock::semaphore_status`] for a semaphore key's).
    pub fn status(&self, now: Micros) -> Status<'_> {
        let live = self.live_holder(now);
        Status {
            fence: self.fence,
            pttl_ms: live.map(|h| (h.deadline - now).div_ceil(1000)),
            label: live.and_then(Holder::label),
        }
    }

    /// A semaphore key's status; `None` for a mutex key.
    pub fn semaphore_status(&self, now: Micros) -> Option<SemaphoreStatus> {
        self.semaphore().map(|s| s.status(self.fence, now))
    }

    /// A mutex key's state to replicate or persist. An expired lease travels as no lease (and
    /// no label).
    pub fn record(&self, now: Micros) -> Record<'_> {
        let holder = self.live_holder(now).map(|h| Holding {
            token: h.token(),
            remaining: h.deadline - now,
            label: h.label(),
        });
        Record { fence: self.fence, holder }
    }

    /// The state to replicate or persist, of either kind.
    pub fn snapshot(&self, now: Micros) -> Snapshot<'_> {
        match self.semaphore() {
            Some(s) => Snapshot::Semaphore(s.record(self.fence, now)),
            None => Snapshot::Mutex(self.record(now)),
        }
    }

    /// Rebuilds a mutex key from a record received at `now` (see [`Lock::from_snapshot`]).
    pub fn from_record(record: &Record<'_>, now: Micros) -> Result<Self, LockError> {
        Ok(Self::from_snapshot(Snapshot::Mutex(record.clone()), now)?)
    }

    /// Rebuilds a semaphore key from its record received at `now` (see [`Lock::from_snapshot`]).
    pub fn from_semaphore_record(record: SemaphoreRecord<'_>, now: Micros) -> Result<Self, LockError> {
        Ok(Self::from_snapshot(Snapshot::Semaphore(record), now)?)
    }

    /// Rebuilds a lock of either kind from its snapshot received at `now`: the one way a state
    /// from elsewhere (RDB, `RESTORE`, `APPLY`, `APPLYSEM`, a slot floor) becomes a value. It is
    /// refused unless it keeps every invariant the commands keep (`validate`).
    pub fn from_snapshot(snapshot: Snapshot<'_>, now: Micros) -> Result<Self, validate::Broken> {
        validate::snapshot(&snapshot)?;
        let (fence, kind) = match snapshot {
            Snapshot::Mutex(Record { fence, holder }) => {
                let mutex = holder.map_or(Mutex::ended(now), |h| Mutex::held(Holder::loaded(&h, now)));
                (fence, Kind::Mutex(mutex))
            }
            Snapshot::Semaphore(record) => {
                (record.fence, Kind::Semaphore(Box::new(Semaphore::loaded(&record, now))))
            }
        };
        Ok(Self { fence, kind, tracked_at: 0 })
    }

    /// When the lease ended or will end (a holder's deadline is when it expires): the start of
    /// the idle time after which the key may be reclaimed. On the monotonic clock. A semaphore
    /// key is idle once its last holder left.
    pub fn idle_from(&self) -> Micros {
        match &self.kind {
            Kind::Mutex(m) => m.idle_from(),
            Kind::Semaphore(s) => s.idle_from(),
        }
    }

    /// Whether the key may be deleted: nobody has held it for `reclaim_after`. A held lease is
    /// never reclaimable, whatever `reclaim_after` is, because its deadline is still ahead.
    pub fn reclaimable(&self, now: Micros, reclaim_after: Micros) -> bool {
        now >= self.idle_from().saturating_add(reclaim_after)
    }

    /// The reclaim index's bucket of this key's newest entry (see the field).
    pub fn tracked_at(&self) -> u64 {
        self.tracked_at
    }

    /// Marks the value as having no live entry in the reclaim index: its key is being unlinked
    /// from its name (`RENAME`, `MOVE`, or a deletion), so the entries under the old name are
    /// stale. The next command that opens it under its new name files it again.
    pub fn unfile(&mut self) {
        self.tracked_at = UNFILED;
    }

    /// Whether the value waits to be filed again under its current name (see [`Lock::unfile`]).
    pub fn is_unfiled(&self) -> bool {
        self.tracked_at == UNFILED
    }

    /// Records the bucket of the key's newest entry in the reclaim index.
    pub fn set_tracked_at(&mut self, at: u64) {
        self.tracked_at = at;
    }

    /// Bytes this value owns, for `MEMORY USAGE`: the token and label share one allocation; a
    /// semaphore's holders live in a box of their own.
    pub fn heap_size(&self) -> usize {
        std::mem::size_of::<Self>()
            + match &self.kind {
                Kind::Mutex(m) => m.heap_size(),
                Kind::Semaphore(s) => s.heap_size(),
            }
    }
}

impl Default for Lock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod decode_props;
#[cfg(test)]
mod tests;
