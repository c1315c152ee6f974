//! The FENCEDLOCK commands: parse, open the key, let `lock` decide, store, replicate the
//! effect, count and reply. Arity was checked by `ffi::run` against the protocol's shape.
//! Every error is returned before anything is written.

use fencedlock_protocol::request::{Acquire, AcquireAll, Raise, Release, Renew};

use crate::error::LockError;
use crate::fence::HighWater;
use crate::ffi::{clock, int, replication, Call, Names, Reply};
use crate::lock::{layout, Acquired, Ask, Expired, Lock, Micros, Released};
use crate::server::SERVER;
use crate::store::Store;
use crate::{blocking, counters, floor};

/// `FENCEDLOCK.ACQUIRE key token ttl_ms [BLOCK timeout_ms] [LABEL label] [PERMITS n | SHARED]`
/// → fence, or nil while the key is held (by another token, or by `n` of them, or by readers
/// or a writer) or others wait for it. With `BLOCK`, a busy key queues the caller (see
/// `blocking`); where Redis allows no blocking (MULTI, scripts) it is one attempt. `LABEL` is
/// the lease's public label, `PERMITS` the key's holder count, `SHARED` a read lease (see
/// `Lock::acquire_for`).
pub fn acquire(call: &Call) -> Result<Reply, LockError> {
    let max_ttl_ms = SERVER.max_ttl_ms();
    // The plain form, by far the most common, allocates nothing for its arguments.
    let request = match call.argc() {
        4 => Acquire::parse(&[call.arg(1), call.arg(2), call.arg(3)], max_ttl_ms),
        _ => Acquire::parse(&call.args_from(1), max_ttl_ms),
    }
    .map_err(|refused| LockError::refused(refused, max_ttl_ms))?;
    // The parser bounds the ttl so that this cannot overflow.
    let ttl = request.ttl_ms.saturating_mul(1000);
    let now = clock::now();
    let queued_ahead = blocking::is_waited(call) && blocking::queued_ahead(call, call.db(), call.arg(1), now);
    let ask =
        Ask { token: request.token, label: request.label, permits: request.capacity(), ttl, queued_ahead };
    let mut key = Store::write(call);
    let mut mark = SERVER.high_water();
    let before = mark;
    let mut decide = |lock: &mut Lock| lock.acquire_for(&mut mark, &ask, now, SERVER.grace_left(now));

    let (outcome, lock) = match key.lock()? {
        Some(mut lock) => {
            cover_floor(call, before, lock.fence())?;
            // An expired lease this replaces (or that a refusal leaves) ended: count it once.
            lock.take_expiries(now, counters::lease_expired);
            (decide(&mut lock), lock)
        }
        None => {
            cover_floor(call, before, 0)?;
            let mut fresh = Lock::new();
            let outcome = decide(&mut fresh);
            match outcome {
                // Stored before it is replicated: if storing failed, no replica or AOF may
                // hold a lease this server does not.
                Ok(Acquired::Granted { .. }) => (outcome, key.insert(fresh)?),
                // A refused grant leaves no key behind.
                _ => return count_refusal(outcome),
            }
        }
    };
    let mut downgraded = false;
    let fence = match (outcome, request.block_ms) {
        (Ok(Acquired::Reentered { fence }), _) => {
            counters::REENTRIES.incr();
            blocking::shortened(call, lock.next_free(now));
            // A writer's downgrade lets the readers at the head of the queue in with it.
            downgraded = queued_ahead && request.shared;
            fence
        }
        (Ok(Acquired::Granted { fence, took_over }), _) => {
            counters::GRANTS.incr();
            if took_over {
                counters::TAKEOVERS.incr();
            }
            fence
        }
        (Ok(Acquired::Busy), Some(timeout)) if call.may_block() => {
            let frees_at = lock.next_free(now).unwrap_or(now);
            return blocking::block(call, ask, timeout, frees_at, now);
        }
        (refused, _) => return count_refusal(refused),
    };
    SERVER.set_high_water(mark);
    replication::replicate(call, mark, &lock.snapshot(now));
    drop(key);
    if downgraded {
        blocking::serve(call, call.db(), call.arg(1), now);
    }
    Ok(int(fence))
}

/// `FENCEDLOCK.ACQUIREALL numkeys key [key ...] token ttl_ms [LABEL label] [PERMITS n | SHARED]`
/// → one fence per key, in the order given, or nil. All or nothing: every key is decided as
/// an `ACQUIRE` on a copy of its lock first (queues served and respected as `acquire` does),
/// and only when every key would be granted or re-entered are the copies stored and
/// replicated, in one command, so no client or replica ever sees part of the set held. Never
/// blocks: a caller that waits holds nothing, so overlapping sets cannot deadlock.
pub fn acquire_all(call: &Call) -> Result<Reply, LockError> {
    if call.is_keys_position_request() {
        AcquireAll::key_positions(&call.args_from(0)).for_each(|i| call.key_at(i));
        return Ok(Reply::KeysReported);
    }
    let max_ttl_ms = SERVER.max_ttl_ms();
    let request = AcquireAll::parse(&call.args_from(1), max_ttl_ms)
        .map_err(|refused| LockError::refused(refused, max_ttl_ms))?;
    let each = &request.each;
    // The parser bounds the ttl so that this cannot overflow.
    let ttl = each.ttl_ms.saturating_mul(1000);
    let (db, now) = (call.db(), clock::now());
    let grace = SERVER.grace_left(now);
    let mut mark = SERVER.high_water();
    let mut decided = Vec::with_capacity(request.keys.len());
    for &key in &request.keys {
        let queued_ahead = blocking::queued_ahead(call, db, key, now);
        let ask = Ask { token: each.token, label: each.label, permits: each.capacity(), ttl, queued_ahead };
        let name = call.string(key).ok_or(LockError::Internal)?;
        let mut lock = Store::named(&name).lock()?.map_or_else(Lock::new, |stored| (*stored).clone());
        // Reported only if the set is granted: a refusal leaves them to whoever looks next.
        let mut expired = Vec::new();
        lock.take_expiries(now, |e| expired.push(e));
        match lock.acquire_for(&mut mark, &ask, now, grace) {
            Ok(outcome @ (Acquired::Granted { .. } | Acquired::Reentered { .. })) => {
                decided.push(Decided { key, lock, outcome, expired, queued_ahead });
            }
            refused => return count_refusal(refused),
        }
    }
    // Each new fence under its slot's floor before anything is stored (a raise alone is
    // harmless if storing then fails).
    for d in &decided {
        if let Acquired::Granted { fence, .. } = d.outcome {
            floor::cover(call, d.key, fence)?;
        }
    }
    SERVER.set_high_water(mark);
    let mut fences = Vec::with_capacity(decided.len());
    for d in decided {
        fences.push(d.commit(call, mark, now, each.shared)?);
    }
    Ok(Reply::Ints(fences))
}

/// One key of an `ACQUIREALL` that would be granted: the lock as it will be stored.
struct Decided<'r> {
    key: &'r [u8],
    lock: Lock,
    outcome: Acquired,
    expired: Vec<Expired>,
    queued_ahead: bool,
}

impl Decided<'_> {
    /// Stores the decided lock, replicates it, counts it, and replies its fence.
    fn commit(self, call: &Call, mark: HighWater, now: Micros, shared: bool) -> Result<i64, LockError> {
        let Decided { key, lock, outcome, expired, queued_ahead } = self;
        let name = call.string(key).ok_or(LockError::Internal)?;
        let mut store = Store::named(&name);
        let stored = match store.lock()? {
            Some(mut entry) => {
                entry.replace(lock);
                entry
            }
            None => store.insert(lock)?,
        };
        // Stored before it is replicated: no replica or AOF may hold a lease this server does not.
        replication::replicate_named(&name, mark, &stored.snapshot(now));
        let frees_at = stored.next_free(now);
        drop(store);
        expired.into_iter().for_each(counters::lease_expired);
        let fence = match outcome {
            Acquired::Granted { fence, took_over } => {
                counters::GRANTS.incr();
                if took_over {
                    counters::TAKEOVERS.incr();
                }
                fence
            }
            Acquired::Reentered { fence } => {
                counters::REENTRIES.incr();
                blocking::shortened_at(call.db(), key, frees_at);
                // A writer's downgrade lets the readers at the head of the queue in with it.
                if queued_ahead && shared {
                    blocking::serve(call, call.db(), key, now);
                }
                fence
            }
            Acquired::Busy => return Err(LockError::Internal),
        };
        i64::try_from(fence).map_err(|_| LockError::Internal)
    }
}

/// In a cluster, raises the slot's floor over the fence a grant on this key would get, before
/// anything is granted (a refused acquire may raise it too: harmless, and rare with headroom).
fn cover_floor(call: &Call, mark: HighWater, key_fence: u64) -> Result<(), LockError> {
    match mark.peek(key_fence) {
        Some(fence) => floor::cover(call, call.arg(1), fence),
        None => Ok(()), // no fence left to grant: the acquire refuses on its own
    }
}

/// The reply to an acquire that granted nothing, counted.
fn count_refusal(outcome: Result<Acquired, LockError>) -> Result<Reply, LockError> {
    match outcome {
        Ok(Acquired::Busy) => {
            counters::CONTENDED.incr();
            Ok(Reply::Nil)
        }
        Err(e @ LockError::RestartGrace { .. }) => {
            counters::GRACE_REFUSALS.incr();
            Err(e)
        }
        Err(e @ LockError::PermitsMismatch { .. }) => {
            counters::PERMITS_MISMATCHES.incr();
            Err(e)
        }
        Err(e) => Err(e),
        // Not a refusal: callers pass only refusals; a bug here must not grant silently.
        Ok(Acquired::Granted { .. } | Acquired::Reentered { .. }) => Err(LockError::Internal),
    }
}

/// `FENCEDLOCK.RENEW key token ttl_ms` → 1 if the caller's unexpired lease now runs `ttl_ms`.
pub fn renew(call: &Call) -> Result<Reply, LockError> {
    let max_ttl_ms = SERVER.max_ttl_ms();
    let Renew { token, ttl_ms, .. } = Renew::parse(&[call.arg(1), call.arg(2), call.arg(3)], max_ttl_ms)
        .map_err(|refused| LockError::refused(refused, max_ttl_ms))?;
    // The parser bounds the ttl so that this cannot overflow.
    let ttl = ttl_ms.saturating_mul(1000);
    owner_change(call, &counters::RENEW_FAILURES, Ends::No, |lock, now| {
        let renewed = lock.renew(token, ttl, now);
        if renewed {
            blocking::shortened(call, lock.next_free(now));
        }
        renewed
    })
}

/// `FENCEDLOCK.RELEASE key token` → 1 if the caller held an unexpired lease; the fence stays.
/// The head waiter, if any, is granted the lease in the same command.
pub fn release(call: &Call) -> Result<Reply, LockError> {
    let Release { token, .. } =
        Release::parse(&[call.arg(1), call.arg(2)]).map_err(|refused| LockError::refused(refused, 0))?;
    let reply = owner_change(call, &counters::RELEASE_FAILURES, Ends::Lease, |lock, now| {
        match lock.release(token, now) {
            Released::Ended { span } => {
                counters::lease_released(span);
                true
            }
            Released::Expired | Released::NotOwner => false,
        }
    })?;
    if reply == Reply::Int(1) && blocking::is_waited(call) {
        blocking::serve(call, call.db(), call.arg(1), clock::now());
    }
    Ok(reply)
}

/// Whether an owner-checked change ends the lease.
#[derive(PartialEq)]
enum Ends {
    No,
    /// The key is idle from now: the reclaim index learns it now rather than at the old
    /// deadline (the index is lazy about renewals, not about releases).
    Lease,
}

/// RENEW and RELEASE: `change` decides (and applies) an owner-checked change to an existing
/// lock. Done → replicate the new state and reply 1; refused or no lock → count and reply 0.
/// A refusal may be the first look at an expired lease (a late RENEW or RELEASE): counted.
fn owner_change(
    call: &Call,
    refusals: &counters::Counter,
    ends: Ends,
    change: impl FnOnce(&mut Lock, Micros) -> bool,
) -> Result<Reply, LockError> {
    let mut key = Store::write(call);
    let now = clock::now();
    if let Some(mut lock) = key.lock()? {
        if change(&mut lock, now) {
            replication::replicate(call, SERVER.high_water(), &lock.snapshot(now));
            if ends == Ends::Lease {
                lock.file();
            }
            return Ok(Reply::Int(1));
        }
        lock.take_expiries(now, counters::lease_expired);
    }
    refusals.incr();
    Ok(Reply::Int(0))
}

/// `FENCEDLOCK.RAISE key token fence` → the key's fence, now at least `fence`, if the caller
/// holds the lease; nil otherwise. Fenced Redlock lifts every node to the quorum's maximum.
pub fn raise(call: &Call) -> Result<Reply, LockError> {
    let Raise { token, fence, .. } = Raise::parse(&[call.arg(1), call.arg(2), call.arg(3)])
        .map_err(|refused| LockError::refused(refused, 0))?;
    let mut key = Store::write(call);
    let now = clock::now();
    let mut mark = SERVER.high_water();
    let Some(mut lock) = key.lock()? else { return Ok(Reply::Nil) };
    floor::cover(call, call.arg(1), fence)?;
    match lock.raise(&mut mark, token, fence, now) {
        Some(raised) => {
            SERVER.set_high_water(mark);
            replication::replicate(call, mark, &lock.snapshot(now));
            Ok(int(raised))
        }
        None => Ok(Reply::Nil),
    }
}

/// `FENCEDLOCK.CAD key value` → 1 if a string key held `value` and was deleted, else 0.
pub fn cad(call: &Call) -> Result<Reply, LockError> {
    let key = Store::write(call);
    if key.string()? != Some(call.arg(2)) {
        return Ok(Reply::Int(0));
    }
    key.delete()?;
    // CAD decides on data alone (no clock), so a replica re-running it reaches the same result;
    // verbatim is also the cheapest way to replicate (no command lookup, no argument copies).
    call.replicate_verbatim();
    Ok(Reply::Int(1))
}

/// `FENCEDLOCK.STATUS key` → `[fence, held, pttl_ms or -1]`, then the label while a labelled
/// lease holds the key; a semaphore key's `[fence, holders, permits, [[fence, pttl_ms, label or
/// nil], ...]]`; nil for a missing key. Never a token.
pub fn status(call: &Call) -> Result<Reply, LockError> {
    let mut key = Store::read(call);
    let Some(lock) = key.lock()? else { return Ok(Reply::Nil) };
    let now = clock::now();
    if let Some(semaphore) = lock.semaphore_status(now) {
        return Ok(Reply::Semaphore(semaphore));
    }
    let status = fencedlock_protocol::LockStatus::from(lock.status(now));
    let (numbers, label) = status.encode();
    Ok(match label {
        None => Reply::Ints(numbers.to_vec()),
        Some(label) => Reply::IntsThenBulk(numbers.to_vec(), label.to_vec()),
    })
}

/// `FENCEDLOCK.APPLY key high_water fence [token remaining_us [label]]`: a state record from
/// the primary or the AOF. Refused from clients, which could otherwise forge a lease or a fence.
pub fn apply(call: &Call) -> Result<Reply, LockError> {
    if !call.is_replicated_or_loading() {
        return Err(LockError::InternalCommand);
    }
    let (high_water, record) = layout::parse_apply(&call.args_from(2))?;
    store_applied(call, high_water, Lock::from_record(&record, clock::now())?)
}

/// `FENCEDLOCK.APPLYSEM key high_water fence permits holders`: a semaphore key's record, as
/// [`apply`].
pub fn apply_semaphore(call: &Call) -> Result<Reply, LockError> {
    if !call.is_replicated_or_loading() {
        return Err(LockError::InternalCommand);
    }
    let (high_water, record) = layout::parse_applysem(&call.args_from(2))?;
    store_applied(call, high_water, Lock::from_semaphore_record(record, clock::now())?)
}

/// Stores an applied record's lock in place of the key's, and takes in its fences.
fn store_applied(call: &Call, high_water: u64, lock: Lock) -> Result<Reply, LockError> {
    let fence = lock.fence();
    let mut key = Store::write(call);
    match key.lock()? {
        // Filed again at its new idle time, as the primary's was: a promoted replica then
        // reclaims on the primary's schedule.
        Some(mut stored) => stored.replace(lock),
        None => {
            key.insert(lock)?;
        }
    }
    SERVER.update_high_water(|mark| {
        mark.observe(high_water);
        mark.observe(fence);
    });
    // Feeds this replica's own AOF and sub-replicas with the same record.
    call.replicate_verbatim();
    Ok(Reply::Int(1))
}
