//! The lease state of one lock key and every decision about it, as pure functions of that state,
//! the server's high-water mark and an injected monotonic `now` (microseconds).
//!
//! Nothing here touches Redis, so all of it is unit-tested without a server. The FFI layer parses
//! arguments, opens the key, calls one of these, replies and replicates the resulting `Record`.

use std::time::Duration;

use fencedlock_protocol::command::{label_len_ok, token_len_ok};
use fencedlock_protocol::limits::MAX_FENCE;
use fencedlock_protocol::LockStatus;

use crate::error::LockError;
use crate::fence::HighWater;

/// `tracked_at` of a value with no live reclaim entry (no bucket has this number).
const UNFILED: u64 = u64::MAX;

/// The top bit of [`Holder::grant`]: the holder's bytes carry a label. It lives there, not in a
/// field of its own, so a `Holder` does not grow (see `a_lock_value_stays_small`); the grant time
/// below it is a monotonic microsecond count, far from 2^63.
const LABELLED: u64 = 1 << 63;
/// `granted_at` of a lease whose grant this server did not see (loaded from RDB or AOF, or
/// applied from the primary): a record carries the remaining time only, so any hold time made up
/// for it would be wrong. Its end is counted, but stays out of the distributions.
const UNTIMED: Micros = LABELLED - 1;
/// `granted_at` of an expired lease whose end was counted already (see [`Lock::take_expiry`]):
/// an expiry is observed by whichever command looks first, and counted once.
const COUNTED: Micros = LABELLED - 2;

/// Microseconds of the server's monotonic clock.
pub type Micros = u64;

/// The value of a lock key: its last fence, and who holds it until when.
///
/// The fence stays when the lease ends, so the next grant on this key is always higher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    fence: u64,
    lease: Lease,
    /// The reclaim index's bucket of this key's newest entry: older entries are stale (see
    /// `reclaim.rs`). Not persisted: a loaded key is filed anew.
    tracked_at: u64,
}

/// The current or last lease. An ended lease remembers when it ended, so an idle key can be
/// reclaimed a fixed time later (the `Holder`'s deadline says the same for an expired lease).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Lease {
    /// Held by `token` until its deadline; expired once the deadline passed.
    Held(Holder),
    /// Released at `at`, or loaded without a holder at `at`.
    Ended { at: Micros },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Holder {
    /// The token alone, or, when `grant` has [`LABELLED`], `[label length - 1][label][token]`:
    /// one allocation for both, so an unlabelled lease costs exactly what it did before labels
    /// existed, and a labelled one a single allocation.
    bytes: Box<[u8]>,
    /// On the monotonic clock of *this* server: never compared with another machine's clock.
    deadline: Micros,
    /// [`LABELLED`], or'ed with the grant time `granted_at`: when this server granted the lease
    /// (same clock), for the hold-time metrics; renewals and re-entries continue the same lease
    /// and keep it. [`UNTIMED`] or [`COUNTED`] otherwise. Costs no memory per key in practice:
    /// a `Lock` grows from 40 to 48 bytes, and the allocator hands out 48 for either (see
    /// `a_lock_value_stays_small`).
    grant: u64,
}

impl Holder {
    /// A holder of `token`, labelled with `label` (1 to `MAX_LABEL_LEN` bytes, checked by the
    /// caller; a label of another length is dropped rather than stored wrongly).
    fn new(token: &[u8], label: Option<&[u8]>, deadline: Micros, granted_at: Micros) -> Holder {
        let stored = label.and_then(|l| u8::try_from(l.len().wrapping_sub(1)).ok().map(|len| (len, l)));
        let (bytes, flag) = match stored {
            None => (token.into(), 0),
            Some((len, label)) => {
                let bytes: Box<[u8]> = [&[len][..], label, token].concat().into();
                (bytes, LABELLED)
            }
        };
        Holder { bytes, deadline, grant: flag | granted_at }
    }

    /// The label's length, when it has one (the first byte of `bytes`, plus one).
    fn label_len(&self) -> Option<usize> {
        (self.grant & LABELLED != 0).then(|| self.bytes.first().map_or(0, |&len| usize::from(len) + 1))
    }

    fn token(&self) -> &[u8] {
        match self.label_len() {
            None => &self.bytes,
            Some(len) => self.bytes.get(1 + len..).unwrap_or_default(),
        }
    }

    fn label(&self) -> Option<&[u8]> {
        self.label_len().map(|len| self.bytes.get(1..1 + len).unwrap_or_default())
    }

    /// The grant time, or [`UNTIMED`] / [`COUNTED`].
    fn granted_at_raw(&self) -> Micros {
        self.grant & !LABELLED
    }

    fn set_granted_at(&mut self, at: Micros) {
        self.grant = (self.grant & LABELLED) | at;
    }

    /// The same lease with another label (a re-entry with `LABEL`).
    fn relabel(&mut self, label: &[u8]) {
        if self.label() != Some(label) {
            *self = Holder::new(self.token(), Some(label), self.deadline, self.granted_at_raw());
        }
    }

    /// The grant time, when known and the lease's end not counted yet.
    fn granted_at(&self) -> Option<Micros> {
        let at = self.granted_at_raw();
        (at < COUNTED).then_some(at)
    }

    /// Grant to the current deadline: the whole lease it was given, renewals included.
    fn given(&self) -> Option<Micros> {
        self.granted_at().map(|at| self.deadline.saturating_sub(at))
    }
}

/// What `ACQUIRE` decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// A new lease with a new fence. `took_over` is set when another token's lease had expired
    /// unreleased: that holder lost its lease, which operators want to count.
    Granted { fence: u64, took_over: bool },
    /// The holder asked again (e.g. its reply was lost): same fence, lease restarted.
    Reentered { fence: u64 },
    /// Another token holds an unexpired lease.
    Busy,
}

/// What `RELEASE` decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The caller's unexpired lease ended now; `span` is `None` for a lease of unknown grant
    /// time (see [`UNTIMED`]).
    Ended {
        span: Option<Span>,
    },
    /// The caller held the lease but it had already expired: it may have acted too late.
    Expired,
    NotOwner,
}

/// A lease released in time, for the metrics: how long it was held, of how long it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Grant to release.
    pub held: Micros,
    /// Grant to the deadline it had when released (renewals lengthen it); always above `held`.
    pub given: Micros,
}

/// A lease that ended by expiry, observed once (see [`Lock::take_expiry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    /// Grant to deadline (renewals included); `None` for a lease of unknown grant time.
    pub lifetime: Option<Micros>,
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

/// A lock's state as it travels: replication, AOF, RDB and `DUMP`.
///
/// It carries the *remaining* lease time, not a deadline: the receiver sets its deadline from its
/// own clock when it applies the record, so lag and restarts can only lengthen a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    pub fence: u64,
    pub holder: Option<Holding<'a>>,
}

/// A live lease as it travels in a [`Record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holding<'a> {
    pub token: &'a [u8],
    pub remaining: Micros,
    pub label: Option<&'a [u8]>,
}

/// Checks a token's length. Its content is opaque bytes.
pub fn check_token(token: &[u8]) -> Result<(), LockError> {
    token_len_ok(token).then_some(()).ok_or(LockError::BadToken)
}

/// Checks a label's length. Its content is opaque bytes, and public.
pub fn check_label(label: &[u8]) -> Result<(), LockError> {
    label_len_ok(label).then_some(()).ok_or(LockError::BadLabel)
}

impl Lock {
    /// A key that never held a lease. Only ever stored together with a grant.
    pub const fn new() -> Self {
        Self { fence: 0, lease: Lease::Ended { at: 0 }, tracked_at: 0 }
    }

    fn holder(&self) -> Option<&Holder> {
        match &self.lease {
            Lease::Held(holder) => Some(holder),
            Lease::Ended { .. } => None,
        }
    }

    pub const fn fence(&self) -> u64 {
        self.fence
    }

    /// The token's bytes, for the digest only.
    pub fn token(&self) -> Option<&[u8]> {
        self.holder().map(Holder::token)
    }

    /// The holder's label (live or expired), for the digest only.
    pub fn label(&self) -> Option<&[u8]> {
        self.holder().and_then(Holder::label)
    }

    fn live_holder(&self, now: Micros) -> Option<&Holder> {
        self.holder().filter(|h| now < h.deadline)
    }

    pub fn held_by(&self, token: &[u8], now: Micros) -> bool {
        self.live_holder(now).is_some_and(|h| h.token() == token)
    }

    /// Whether someone holds an unexpired lease.
    pub fn is_held(&self, now: Micros) -> bool {
        self.live_holder(now).is_some()
    }

    /// When the current holder's lease expires (already past for an expired one); `None` when
    /// the lease ended. Waiters are served at this instant.
    pub fn deadline(&self) -> Option<Micros> {
        self.holder().map(|h| h.deadline)
    }

    /// `grace_left` is how long the server still refuses new grants after a restart (0: none).
    /// The holder may still re-enter during the grace: that grants nothing new.
    ///
    /// `label` is the request's `LABEL` (checked by the caller): a grant takes it (none without),
    /// a re-entry with one replaces the lease's, a re-entry without keeps it.
    pub fn acquire(
        &mut self,
        high_water: &mut HighWater,
        token: &[u8],
        label: Option<&[u8]>,
        ttl: Micros,
        now: Micros,
        grace_left: Micros,
    ) -> Result<Acquired, LockError> {
        let deadline = now.saturating_add(ttl);
        if let Lease::Held(holder) = &mut self.lease {
            if now < holder.deadline {
                if holder.token() != token {
                    return Ok(Acquired::Busy);
                }
                holder.deadline = deadline;
                if let Some(label) = label {
                    holder.relabel(label);
                }
                return Ok(Acquired::Reentered { fence: self.fence });
            }
        }
        if grace_left > 0 {
            return Err(LockError::RestartGrace { remaining_ms: grace_left.div_ceil(1000) });
        }
        let fence = high_water.next(self.fence)?;
        let took_over = self.holder().is_some_and(|h| h.token() != token);
        self.fence = fence;
        self.lease = Lease::Held(Holder::new(token, label, deadline, now));
        Ok(Acquired::Granted { fence, took_over })
    }

    /// True when the caller held an unexpired lease, which now runs `ttl` from `now`.
    pub fn renew(&mut self, token: &[u8], ttl: Micros, now: Micros) -> bool {
        match &mut self.lease {
            Lease::Held(h) if now < h.deadline && h.token() == token => {
                h.deadline = now.saturating_add(ttl);
                true
            }
            _ => false,
        }
    }

    /// An expired lease is left as it is (the fence and the takeover count depend on it): its
    /// end is counted by [`Lock::take_expiry`].
    pub fn release(&mut self, token: &[u8], now: Micros) -> Released {
        match self.holder() {
            Some(h) if h.token() != token => Released::NotOwner,
            None => Released::NotOwner,
            Some(h) if now >= h.deadline => Released::Expired,
            Some(h) => {
                let span = h
                    .granted_at()
                    .zip(h.given())
                    .map(|(at, given)| Span { held: now.saturating_sub(at), given });
                self.lease = Lease::Ended { at: now };
                Released::Ended { span }
            }
        }
    }

    /// The end of an expired lease, the first time anyone asks (later: `None`); `None` as well
    /// for a live lease or none. Commands that find the lease expired ask (ACQUIRE before it
    /// decides, a refused RENEW or RELEASE, the waiters' handoff, the reclaim of the key), so an
    /// expiry is counted when it is first observed, not at the deadline: a lease that expires
    /// on a key nobody touches again is counted when its key is reclaimed. Changes only the
    /// metrics' mark: nothing any command decides or replicates.
    pub fn take_expiry(&mut self, now: Micros) -> Option<Expired> {
        let Lease::Held(h) = &mut self.lease else { return None };
        if now < h.deadline || h.granted_at_raw() == COUNTED {
            return None;
        }
        let lifetime = h.given();
        h.set_granted_at(COUNTED);
        Some(Expired { lifetime })
    }

    /// The value for `COPY`: the same fence and lease, with the grant time forgotten, so one
    /// grant does not enter the hold-time distributions twice (once per key).
    pub fn copied(&self) -> Lock {
        let mut copy = self.clone();
        if let Lease::Held(h) = &mut copy.lease {
            if h.granted_at_raw() < COUNTED {
                h.set_granted_at(UNTIMED);
            }
        }
        copy
    }

    /// Fenced Redlock's step: the holder lifts its own fence to `fence` (the quorum's maximum).
    /// Returns the key's fence afterwards, or `None` when the caller does not hold the lease, so
    /// a raise can never reach a lease that another client was granted in the meantime.
    pub fn raise(
        &mut self,
        high_water: &mut HighWater,
        token: &[u8],
        fence: u64,
        now: Micros,
    ) -> Option<u64> {
        if !self.held_by(token, now) {
            return None;
        }
        self.fence = self.fence.max(fence.min(MAX_FENCE));
        high_water.observe(self.fence);
        Some(self.fence)
    }

    pub fn status(&self, now: Micros) -> Status<'_> {
        let live = self.live_holder(now);
        Status {
            fence: self.fence,
            pttl_ms: live.map(|h| (h.deadline - now).div_ceil(1000)),
            label: live.and_then(Holder::label),
        }
    }

    /// The state to replicate or persist. An expired lease travels as no lease (and no label).
    pub fn record(&self, now: Micros) -> Record<'_> {
        let holder = self.live_holder(now).map(|h| Holding {
            token: h.token(),
            remaining: h.deadline - now,
            label: h.label(),
        });
        Record { fence: self.fence, holder }
    }

    /// Rebuilds a lock from a record received at `now`, rejecting anything we would never write.
    pub fn from_record(record: &Record<'_>, now: Micros) -> Result<Self, LockError> {
        if record.fence > MAX_FENCE {
            return Err(LockError::BadRecord);
        }
        let lease = match record.holder {
            None => Lease::Ended { at: now },
            Some(Holding { token, remaining, label }) => {
                check_token(token).map_err(|_| LockError::BadRecord)?;
                label.map_or(Ok(()), check_label).map_err(|_| LockError::BadRecord)?;
                // Granted elsewhere or before a restart: the grant time is not known here.
                let deadline = now.saturating_add(remaining);
                Lease::Held(Holder::new(token, label, deadline, UNTIMED))
            }
        };
        Ok(Self { fence: record.fence, lease, tracked_at: 0 })
    }

    /// When the lease ended or will end (a holder's deadline is when it expires): the start of
    /// the idle time after which the key may be reclaimed. On the monotonic clock.
    pub fn idle_from(&self) -> Micros {
        match &self.lease {
            Lease::Held(holder) => holder.deadline,
            Lease::Ended { at } => *at,
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

    /// Bytes this value owns, for `MEMORY USAGE`: the token and label share one allocation.
    pub fn heap_size(&self) -> usize {
        std::mem::size_of::<Self>() + self.holder().map_or(0, |h| h.bytes.len())
    }
}

impl Default for Lock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use fencedlock_protocol::limits::MAX_TOKEN_LEN;

    use super::*;

    const MS: Micros = 1000;

    fn granted(r: Result<Acquired, LockError>) -> u64 {
        match r {
            Ok(Acquired::Granted { fence, .. }) => fence,
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    #[test]
    fn first_acquire_grants_fence_one() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        let r = lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0);
        assert_eq!(r, Ok(Acquired::Granted { fence: 1, took_over: false }));
        assert_eq!(lock.status(0), Status { fence: 1, pttl_ms: Some(100), label: None });
        assert_eq!(hw.get(), 1);
    }

    #[test]
    fn another_token_is_refused_while_the_lease_runs() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
        assert_eq!(lock.acquire(&mut hw, b"b", None, 100 * MS, 99 * MS, 0), Ok(Acquired::Busy));
        assert_eq!(hw.get(), 1, "a refusal issues no fence");
    }

    #[test]
    fn reacquire_by_the_holder_keeps_the_fence_and_restarts_the_lease() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
        let r = lock.acquire(&mut hw, b"a", None, 100 * MS, 80 * MS, 0);
        assert_eq!(r, Ok(Acquired::Reentered { fence: 1 }));
        assert_eq!(lock.status(80 * MS).pttl_ms, Some(100));
        assert_eq!(hw.get(), 1);
    }

    #[test]
    fn a_copy_keeps_the_lease_but_not_its_grant_time() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 10 * MS, 0));
        let mut copy = lock.copied();
        assert_eq!(copy.status(20 * MS), lock.status(20 * MS));
        assert_eq!(copy.release(b"a", 40 * MS), Released::Ended { span: None });
        assert_eq!(
            lock.release(b"a", 40 * MS),
            Released::Ended { span: Some(Span { held: 30 * MS, given: 100 * MS }) }
        );
    }

    #[test]
    fn a_lock_value_stays_small() {
        // fence, the lease (token box + deadline + grant time, or the end time in the same
        // space), and the reclaim index position: every lock key pays this. 48 bytes is the
        // allocator's size class that a 40-byte value was rounded up to already (jemalloc's
        // classes go 32, 48, 64), so the grant time costs `used_memory` nothing per key; only
        // `MEMORY USAGE`, which counts `size_of`, shows 8 more bytes.
        assert_eq!(std::mem::size_of::<Lock>(), 48);
    }

    #[test]
    fn a_label_lives_as_long_as_its_lease() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        let label = |lock: &Lock, now| lock.status(now).label.map(<[u8]>::to_vec);
        granted(lock.acquire(&mut hw, b"a", Some(b"one"), 100 * MS, 0, 0));
        assert_eq!(label(&lock, 0), Some(b"one".to_vec()));
        // Re-entry without LABEL keeps it, with LABEL replaces it; RENEW and RAISE keep it.
        assert_eq!(lock.acquire(&mut hw, b"a", None, 100 * MS, MS, 0), Ok(Acquired::Reentered { fence: 1 }));
        assert_eq!(label(&lock, MS), Some(b"one".to_vec()));
        assert_eq!(
            lock.acquire(&mut hw, b"a", Some(b"two"), 100 * MS, 2 * MS, 0),
            Ok(Acquired::Reentered { fence: 1 })
        );
        assert_eq!(label(&lock, 2 * MS), Some(b"two".to_vec()));
        assert!(lock.renew(b"a", 100 * MS, 3 * MS));
        assert_eq!(lock.raise(&mut hw, b"a", 9, 3 * MS), Some(9));
        assert_eq!(label(&lock, 3 * MS), Some(b"two".to_vec()));
        // Another token is refused and changes nothing; the label is not a token.
        let before = lock.clone();
        assert_eq!(lock.acquire(&mut hw, b"b", Some(b"three"), 100 * MS, 4 * MS, 0), Ok(Acquired::Busy));
        assert_eq!(lock, before);
        assert!(
            !lock.held_by(b"two", 4 * MS) && !lock.held_by(b"twoa", 4 * MS) && lock.held_by(b"a", 4 * MS)
        );
        assert_eq!(lock.token(), Some(&b"a"[..]));
        // The release ends it.
        assert!(matches!(lock.release(b"a", 5 * MS), Released::Ended { .. }));
        assert_eq!(label(&lock, 5 * MS), None);
        assert_eq!(lock.record(5 * MS).holder, None);
        // Expiry ends it too, and a grant without LABEL (the same token's, or a takeover) has none.
        granted(lock.acquire(&mut hw, b"a", Some(b"four"), 10 * MS, 6 * MS, 0));
        assert_eq!(label(&lock, 15 * MS), Some(b"four".to_vec()));
        assert_eq!(label(&lock, 16 * MS), None, "expired");
        assert_eq!(lock.record(16 * MS).holder, None);
        granted(lock.acquire(&mut hw, b"a", None, 10 * MS, 16 * MS, 0));
        assert_eq!(label(&lock, 16 * MS), None);
        granted(lock.acquire(&mut hw, b"b", Some(b"five"), 10 * MS, 26 * MS, 0));
        granted(lock.acquire(&mut hw, b"c", None, 10 * MS, 36 * MS, 0));
        assert_eq!(label(&lock, 36 * MS), None, "a takeover without LABEL has none");
    }

    #[test]
    fn labels_travel_in_records_and_copies_and_keep_their_grant_time_metrics() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        let longest = [0xffu8; fencedlock_protocol::limits::MAX_LABEL_LEN];
        granted(lock.acquire(&mut hw, b"tok", Some(&longest), 100 * MS, 0, 0));
        let rec = lock.record(40 * MS);
        let holding = Holding { token: b"tok", remaining: 60 * MS, label: Some(&longest[..]) };
        assert_eq!(rec, Record { fence: 1, holder: Some(holding) });
        let loaded = Lock::from_record(&rec, 7_000 * MS).unwrap();
        assert_eq!(
            loaded.status(7_000 * MS),
            Status { fence: 1, pttl_ms: Some(60), label: Some(&longest[..]) }
        );
        assert!(loaded.held_by(b"tok", 7_000 * MS));
        let mut copy = lock.copied();
        assert_eq!(copy.status(50 * MS), lock.status(50 * MS));
        assert_eq!(copy.release(b"tok", 50 * MS), Released::Ended { span: None });
        // The grant time shares its word with the label's flag: both survive each other.
        assert!(lock.renew(b"tok", 100 * MS, 50 * MS));
        assert_eq!(lock.take_expiry(150 * MS), Some(Expired { lifetime: Some(150 * MS) }));
        assert_eq!(lock.take_expiry(150 * MS), None);
        assert_eq!(lock.status(149 * MS).label, Some(&longest[..]), "counting an expiry keeps the label");
        assert_eq!(lock.token(), Some(&b"tok"[..]));
        for bad in [&b""[..], &[b'x'; fencedlock_protocol::limits::MAX_LABEL_LEN + 1]] {
            let rec = Record { fence: 1, holder: Some(Holding { label: Some(bad), ..holding }) };
            assert_eq!(Lock::from_record(&rec, 0), Err(LockError::BadRecord));
        }
        assert_eq!(check_label(b""), Err(LockError::BadLabel));
    }

    #[test]
    fn a_label_costs_its_bytes_and_an_unlabelled_lease_nothing() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        granted(lock.acquire(&mut hw, &[7; 16], None, 100 * MS, 0, 0));
        assert_eq!(lock.heap_size(), 48 + 16, "the token alone, as before labels");
        assert_eq!(
            lock.acquire(&mut hw, &[7; 16], Some(b"node-a"), 100 * MS, 0, 0),
            Ok(Acquired::Reentered { fence: 1 })
        );
        assert_eq!(lock.heap_size(), 48 + 16 + 1 + 6, "token, label and its length byte");
    }

    #[test]
    fn a_release_reports_how_long_the_lease_was_held_of_how_long_it_was_given() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 10 * MS, 0));
        let r = lock.release(b"a", 40 * MS);
        assert_eq!(r, Released::Ended { span: Some(Span { held: 30 * MS, given: 100 * MS }) });
    }

    #[test]
    fn renewals_and_reentries_continue_the_lease_from_its_grant() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
        assert!(lock.renew(b"a", 100 * MS, 80 * MS)); // deadline 180
        assert_eq!(
            lock.acquire(&mut hw, b"a", None, 100 * MS, 150 * MS, 0),
            Ok(Acquired::Reentered { fence: 1 })
        );
        // Held from 0 to 200, given 0 to 250.
        let r = lock.release(b"a", 200 * MS);
        assert_eq!(r, Released::Ended { span: Some(Span { held: 200 * MS, given: 250 * MS }) });
    }

    #[test]
    fn an_expiry_is_reported_once_with_the_lifetime_it_was_given() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 10 * MS, 0));
        assert!(lock.renew(b"a", 100 * MS, 50 * MS)); // deadline 150
        assert_eq!(lock.take_expiry(149 * MS), None, "still live");
        let looks =
            |lock: &Lock| (lock.status(200 * MS).pttl_ms, lock.record(200 * MS).fence, lock.deadline());
        let before = looks(&lock);
        assert_eq!(lock.take_expiry(200 * MS), Some(Expired { lifetime: Some(140 * MS) }));
        assert_eq!(lock.take_expiry(300 * MS), None, "counted already");
        assert_eq!(looks(&lock), before);
        // The lost holder's late release is still refused as late, and a takeover still counts.
        assert_eq!(lock.release(b"a", 300 * MS), Released::Expired);
        assert_eq!(
            lock.acquire(&mut hw, b"b", None, MS, 300 * MS, 0),
            Ok(Acquired::Granted { fence: 2, took_over: true })
        );
    }

    #[test]
    fn released_and_never_held_leases_report_no_expiry() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        assert_eq!(lock.take_expiry(0), None);
        granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
        assert!(matches!(lock.release(b"a", 10 * MS), Released::Ended { .. }));
        assert_eq!(lock.take_expiry(500 * MS), None);
    }

    #[test]
    fn a_loaded_lease_has_no_made_up_grant_time() {
        let rec =
            Record { fence: 3, holder: Some(Holding { token: &b"a"[..], remaining: 100 * MS, label: None }) };
        let mut lock = Lock::from_record(&rec, 1_000 * MS).unwrap();
        assert_eq!(lock.clone().release(b"a", 1_050 * MS), Released::Ended { span: None });
        assert_eq!(lock.take_expiry(1_100 * MS), Some(Expired { lifetime: None }));
        assert_eq!(lock.take_expiry(1_200 * MS), None);
    }

    #[test]
    fn a_paused_holder_whose_lease_expired_loses_to_a_higher_fence() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        let a = granted(lock.acquire(&mut hw, b"A", None, 100 * MS, 0, 0));
        // A pauses; its lease ends at 100 ms. B arrives at exactly the deadline.
        let r = lock.acquire(&mut hw, b"B", None, 100 * MS, 100 * MS, 0);
        let b = match r {
            Ok(Acquired::Granted { fence, took_over: true }) => fence,
            other => panic!("{other:?}"),
        };
        assert!(b > a);
        // A wakes up and acts on its stale lease.
        assert!(!lock.renew(b"A", 100 * MS, 150 * MS));
        assert_eq!(lock.release(b"A", 150 * MS), Released::NotOwner);
        assert_eq!(lock.status(150 * MS), Status { fence: b, pttl_ms: Some(50), label: None });
    }

    #[test]
    fn renew_extends_only_an_unexpired_lease_of_the_caller() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
        assert!(!lock.renew(b"b", 100 * MS, 50 * MS));
        assert!(lock.renew(b"a", 300 * MS, 50 * MS));
        assert_eq!(lock.status(50 * MS).pttl_ms, Some(300));
        assert!(!lock.renew(b"a", 300 * MS, 350 * MS), "expired at 350 ms");
        assert_eq!(lock.status(350 * MS).pttl_ms, None);
    }

    #[test]
    fn release_ends_the_lease_but_keeps_the_fence() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        let f1 = granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
        assert_eq!(lock.release(b"b", 10 * MS), Released::NotOwner);
        assert!(matches!(lock.release(b"a", 10 * MS), Released::Ended { .. }));
        assert_eq!(lock.release(b"a", 10 * MS), Released::NotOwner);
        assert_eq!(lock.status(10 * MS), Status { fence: f1, pttl_ms: None, label: None });
        let f2 = granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 20 * MS, 0));
        assert!(f2 > f1);
    }

    #[test]
    fn a_late_release_is_reported_and_changes_nothing() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
        let before = lock.clone();
        assert_eq!(lock.release(b"a", 100 * MS), Released::Expired);
        assert_eq!(lock, before);
    }

    #[test]
    fn the_holder_reacquiring_after_its_own_expiry_is_a_new_grant_not_a_takeover() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
        let r = lock.acquire(&mut hw, b"a", None, 100 * MS, 200 * MS, 0);
        assert_eq!(r, Ok(Acquired::Granted { fence: 2, took_over: false }));
    }

    #[test]
    fn fences_come_from_the_high_water_mark_across_keys() {
        let mut hw = HighWater::default();
        let (mut k1, mut k2) = (Lock::new(), Lock::new());
        assert_eq!(granted(k1.acquire(&mut hw, b"a", None, MS, 0, 0)), 1);
        assert_eq!(granted(k2.acquire(&mut hw, b"a", None, MS, 0, 0)), 2);
        // The key was deleted: a fresh key still starts above every fence issued.
        let mut k1_again = Lock::new();
        assert_eq!(granted(k1_again.acquire(&mut hw, b"a", None, MS, 0, 0)), 3);
    }

    #[test]
    fn a_key_fence_above_the_mark_wins() {
        let mut hw = HighWater::new(5);
        let record = Record { fence: 90, holder: None };
        let mut lock = Lock::from_record(&record, 0).unwrap();
        assert_eq!(granted(lock.acquire(&mut hw, b"a", None, MS, 0, 0)), 91);
        assert_eq!(hw.get(), 91);
    }

    #[test]
    fn restart_grace_refuses_new_grants_but_not_the_holder() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        assert_eq!(
            lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 1500),
            Err(LockError::RestartGrace { remaining_ms: 2 })
        );
        assert_eq!(lock, Lock::new());
        assert_eq!(hw.get(), 0);
        granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
        assert_eq!(
            lock.acquire(&mut hw, b"a", None, 100 * MS, 1, 9 * MS),
            Ok(Acquired::Reentered { fence: 1 })
        );
        assert_eq!(lock.acquire(&mut hw, b"b", None, 100 * MS, 1, 9 * MS), Ok(Acquired::Busy));
    }

    #[test]
    fn exhausted_fences_refuse_and_change_nothing() {
        let mut hw = HighWater::new(MAX_FENCE);
        let mut lock = Lock::new();
        assert_eq!(lock.acquire(&mut hw, b"a", None, MS, 0, 0), Err(LockError::FencesExhausted));
        assert_eq!(lock, Lock::new());
    }

    #[test]
    fn raise_lifts_only_the_holders_fence_and_the_mark() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        granted(lock.acquire(&mut hw, b"a", None, 100 * MS, 0, 0));
        assert_eq!(lock.raise(&mut hw, b"b", 50, 0), None);
        assert_eq!(lock.raise(&mut hw, b"a", 50, 0), Some(50));
        assert_eq!(hw.get(), 50);
        assert_eq!(lock.raise(&mut hw, b"a", 10, 0), Some(50), "never lowers");
        assert_eq!(lock.acquire(&mut hw, b"a", None, 100 * MS, 1, 0), Ok(Acquired::Reentered { fence: 50 }));
        assert_eq!(lock.raise(&mut hw, b"a", 60, 200 * MS), None, "expired");
        assert_eq!(granted(lock.acquire(&mut hw, b"c", None, MS, 200 * MS, 0)), 51);
    }

    #[test]
    fn records_carry_remaining_time_and_lengthen_on_the_receiver() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        granted(lock.acquire(&mut hw, b"tok", None, 100 * MS, 0, 0));
        let rec = lock.record(40 * MS);
        assert_eq!(
            rec,
            Record {
                fence: 1,
                holder: Some(Holding { token: &b"tok"[..], remaining: 60 * MS, label: None })
            }
        );
        // Applied late, on a clock that reads something else entirely.
        let copy = Lock::from_record(&rec, 7_000 * MS).unwrap();
        assert_eq!(copy.status(7_000 * MS), Status { fence: 1, pttl_ms: Some(60), label: None });
        assert_eq!(lock.record(100 * MS).holder, None, "an expired lease travels as none");
    }

    #[test]
    fn malformed_records_are_rejected() {
        let long = vec![0u8; MAX_TOKEN_LEN + 1];
        for rec in [
            Record { fence: MAX_FENCE + 1, holder: None },
            Record { fence: 1, holder: Some(Holding { token: &b""[..], remaining: 1, label: None }) },
            Record { fence: 1, holder: Some(Holding { token: &long[..], remaining: 1, label: None }) },
        ] {
            assert_eq!(Lock::from_record(&rec, 0), Err(LockError::BadRecord));
        }
    }

    #[test]
    fn pttl_rounds_up_so_a_held_lease_never_shows_zero() {
        let (mut lock, mut hw) = (Lock::new(), HighWater::default());
        granted(lock.acquire(&mut hw, b"a", None, 1, 0, 0));
        assert_eq!(lock.status(0).pttl_ms, Some(1));
    }

    #[test]
    fn tokens_are_bounded() {
        assert_eq!(check_token(b""), Err(LockError::BadToken));
        assert_eq!(check_token(&[7u8; MAX_TOKEN_LEN]), Ok(()));
        assert_eq!(check_token(&[7u8; MAX_TOKEN_LEN + 1]), Err(LockError::BadToken));
    }

    /// Random interleavings of every operation by three clients over a moving clock: grants
    /// strictly increase, a refused or stale caller changes nothing, and at most one token
    /// holds a live lease at any time. For the metrics: every lease's end is reported once (by
    /// its release or by the first look at its expiry, which ACQUIRE takes before deciding, as
    /// the command does), with the times the model expects, and none for a reloaded lease.
    mod model {
        use super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Op {
            /// Client, ttl, and the label it asks with (an index into `LABELS`), if any.
            Acquire(usize, u64, Option<usize>),
            Renew(usize, u64),
            Release(usize),
            Raise(usize, u64),
            Advance(u64),
            Reload,
            /// A look at the lease that counts its expiry (a refused RENEW, the reclaim, ...).
            Observe,
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                (0..3usize, 1..50u64, proptest::option::of(0..2usize))
                    .prop_map(|(c, t, l)| Op::Acquire(c, t, l)),
                (0..3usize, 1..50u64).prop_map(|(c, t)| Op::Renew(c, t)),
                (0..3usize).prop_map(Op::Release),
                (0..3usize, 0..100u64).prop_map(|(c, f)| Op::Raise(c, f)),
                (0..40u64).prop_map(Op::Advance),
                Just(Op::Reload),
                Just(Op::Observe),
            ]
        }

        proptest! {
            #[test]
            fn leases_and_fences_stay_sound(ops in proptest::collection::vec(op(), 1..200)) {
                let tokens: [&[u8]; 3] = [b"a", b"b", b"c"];
                let labels: [&[u8]; 2] = [b"a", b"node-2"];
                let (mut lock, mut hw, mut now) = (Lock::new(), HighWater::default(), 0u64);
                let mut last_grant = 0u64;
                // The lease as the model sees it: its end is reported once, when it is released
                // or when its expiry is first observed; `granted` is `None` once reloaded.
                #[derive(Clone, Copy)]
                struct Model { client: usize, deadline: u64, granted: Option<u64>, reported: bool, label: Option<usize> }
                let mut holder: Option<Model> = None;
                // What `take_expiry` must say now, and the model's bookkeeping of it.
                fn observe(lock: &mut Lock, holder: &mut Option<Model>, now: u64) -> Result<(), TestCaseError> {
                    let due = holder.filter(|h| now >= h.deadline && !h.reported);
                    let want = due.map(|h| Expired { lifetime: h.granted.map(|g| h.deadline - g) });
                    prop_assert_eq!(lock.take_expiry(now), want);
                    if let Some(h) = holder.as_mut().filter(|_| due.is_some()) {
                        h.reported = true;
                    }
                    Ok(())
                }
                for op in ops {
                    let live = holder.filter(|h| now < h.deadline).map(|h| h.client);
                    match op {
                        Op::Acquire(c, t, l) => {
                            observe(&mut lock, &mut holder, now)?;
                            let before = lock.clone();
                            match lock.acquire(&mut hw, tokens[c], l.map(|l| labels[l]), t * MS, now, 0).unwrap() {
                                Acquired::Granted { fence, .. } => {
                                    prop_assert!(live.is_none());
                                    prop_assert!(fence > last_grant && fence > 0);
                                    prop_assert!(holder.is_none_or(|h| h.reported), "the lease it replaces was counted");
                                    last_grant = fence;
                                    holder = Some(Model { client: c, deadline: now + t * MS, granted: Some(now), reported: false, label: l });
                                }
                                Acquired::Reentered { fence } => {
                                    prop_assert_eq!(live, Some(c));
                                    prop_assert_eq!(fence, lock.fence());
                                    // A re-entry with a label replaces the lease's, without keeps it.
                                    holder = holder.map(|h| Model { deadline: now + t * MS, label: l.or(h.label), ..h });
                                }
                                Acquired::Busy => {
                                    prop_assert!(live.is_some() && live != Some(c));
                                    prop_assert_eq!(&lock, &before, "a refusal changes nothing, the label included");
                                }
                            }
                        }
                        Op::Renew(c, t) => {
                            let ok = lock.renew(tokens[c], t * MS, now);
                            prop_assert_eq!(ok, live == Some(c));
                            if ok {
                                holder = holder.map(|h| Model { deadline: now + t * MS, ..h });
                            }
                        }
                        Op::Release(c) => {
                            let r = lock.release(tokens[c], now);
                            prop_assert_eq!(matches!(r, Released::Ended { .. }), live == Some(c));
                            if let (Released::Ended { span }, Some(h)) = (r, holder) {
                                let want = h.granted.map(|g| Span { held: now - g, given: h.deadline - g });
                                prop_assert_eq!(span, want);
                                prop_assert!(span.is_none_or(|s| s.held < s.given));
                                holder = None;
                            }
                        }
                        Op::Observe => observe(&mut lock, &mut holder, now)?,
                        Op::Raise(c, f) => {
                            let before = lock.fence();
                            match lock.raise(&mut hw, tokens[c], f, now) {
                                Some(raised) => {
                                    prop_assert_eq!(live, Some(c));
                                    prop_assert_eq!(raised, before.max(f));
                                    last_grant = last_grant.max(raised);
                                }
                                None => prop_assert_eq!(lock.fence(), before),
                            }
                        }
                        Op::Advance(ms) => now += ms * MS,
                        Op::Reload => {
                            let rec = lock.record(now);
                            let sent = rec.holder.map(|h| (h.token.to_vec(), h.remaining, h.label.map(<[u8]>::to_vec)));
                            let holding = sent.as_ref().map(|(token, remaining, label)| Holding {
                                token,
                                remaining: *remaining,
                                label: label.as_deref(),
                            });
                            lock = Lock::from_record(&Record { fence: rec.fence, holder: holding }, now).unwrap();
                            // An expired lease travels as none; a live one without its grant time.
                            holder = holder
                                .filter(|h| now < h.deadline)
                                .map(|h| Model { granted: None, ..h });
                        }
                    }
                    prop_assert!(hw.get() >= lock.fence());
                    let live = holder.filter(|h| now < h.deadline);
                    prop_assert_eq!(lock.status(now).pttl_ms.is_some(), live.is_some());
                    // The label is the live lease's, and it travels with it; the token is intact.
                    let label = live.and_then(|h| h.label).map(|l| labels[l]);
                    prop_assert_eq!(lock.status(now).label, label);
                    prop_assert_eq!(lock.record(now).holder.and_then(|h| h.label), label);
                    if let Some(h) = live {
                        prop_assert!(lock.held_by(tokens[h.client], now));
                        prop_assert_eq!(lock.token(), Some(tokens[h.client]));
                    }
                }
            }

            /// The RDB loader's decisions: any field values either rebuild a lock or are refused.
            #[test]
            fn any_record_is_loaded_or_refused(
                fence in any::<u64>(),
                token in proptest::collection::vec(any::<u8>(), 0..600),
                remaining in any::<u64>(),
                has_holder in any::<bool>(),
                label in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
            ) {
                let holding = Holding { token: &token, remaining, label: label.as_deref() };
                let rec = Record { fence, holder: has_holder.then_some(holding) };
                let label_ok = label.as_deref().is_none_or(|l| check_label(l).is_ok());
                let valid = fence <= MAX_FENCE && (!has_holder || (check_token(&token).is_ok() && label_ok));
                prop_assert_eq!(Lock::from_record(&rec, 5).is_ok(), valid);
            }
        }
    }
}
