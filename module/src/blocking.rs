//! Server-side waiting, the FFI side of `waiting`: queues the callers of a busy
//! `ACQUIRE … BLOCK`, serves a key's queue when its lease ends, answers the served, and counts.
//!
//! A lease ends in one of three ways, and the queue is served in each:
//! - by a command on the key (`RELEASE`; an `ACQUIRE` that finds an expired lease serves the
//!   queue before it decides, so nobody barges past it): in that command, atomically with it;
//! - by expiry: a wake-up timer at the holder's deadline (on the monotonic clock);
//! - by deletion (`DEL`, `UNLINK`, eviction, reclaim, `FLUSHALL`, `RENAME` away): the key's
//!   unlink callback or the flush event files a wake-up for now. Outside a cluster the head gets
//!   a fresh key (its fence still comes from the high-water mark, so it is higher); in a
//!   cluster the key may have left this node with its slot, so the waiters are told to ask
//!   again, and the cluster routes them to the slot's owner.
//!
//! One timer serves every key, armed at the earliest wake-up: a holder's deadline, or a
//! waiter's `BLOCK` deadline. The module, not the server, times waiters out (see `waiting`):
//! the server is asked to block without a timeout, because Redis 7.0 loses the reply of a
//! waiter answered here and timed out by the server in the same event-loop pass (its
//! `moduleBlockedClientTimedOut` returns early for a client already unblocked, then
//! `unblockClientFromModule` runs the disconnect callback, which gives the grant back).
//!
//! A handoff is replicated and written to the AOF as the same `APPLY` record as any grant; the
//! queues themselves are not (after a failover, waiters reconnect and queue again).

use std::ops::RangeInclusive;

use crate::error::LockError;
use crate::ffi::{self, clock, int, replication, BlockedClient, Call, Names, Reply, Timer, Waits};
use crate::lock::{Ask, Lock, Micros, Moment, Released};
use crate::migration::Export;
use crate::server::{LostGrant, WaitState, SERVER};
use crate::store::Store;
use crate::waiting::{self, Answer, KeyId, Served, Waiter};
use crate::{counters, floor, slot};

/// How long one wake-up may serve keys before it yields to the event loop.
const BUDGET: Micros = 2_000;

/// Runs `f` on the waiting side's state (the server's, see `server.rs`).
fn with<T>(f: impl FnOnce(&mut WaitState) -> T) -> T {
    SERVER.waits(f)
}

/// Whether anyone waits on the call's key. The count comes first, so that the common case
/// (nobody waits anywhere) asks Redis for neither the database nor the key's bytes.
pub fn is_waited(call: &Call) -> bool {
    SERVER.waiters() > 0 && SERVER.is_waited_at(call.db(), call.arg(1))
}

/// Whether anyone waits on `name` in `db`.
pub fn is_waited_at(db: i32, name: &[u8]) -> bool {
    SERVER.waiters() > 0 && SERVER.is_waited_at(db, name)
}

/// Whether a fresh grant on `name` in `db` would pass someone waiting for it (`Ask::
/// queued_ahead`). A lease that ended belongs to the head of the queue, not to whoever asks
/// first, so the queue is served first; whoever still waits goes before the request (a
/// writer behind readers). For a key nobody waits on, call [`is_waited`] first: it is cheaper.
pub fn queued_ahead(names: &impl Names, db: i32, name: &[u8], now: Micros) -> bool {
    if !is_waited_at(db, name) {
        return false;
    }
    serve(names, db, name, now);
    is_waited_at(db, name)
}

/// Queues the caller of an ACQUIRE that found the key held (until `frees_at` at the latest),
/// for up to `timeout_ms` (0: no limit). Replies nothing now: the client is answered when served,
/// or nil by the wake-up at its deadline.
///
/// A key whose slot is moving away gets no waiter: its caller is told to ask again, at once
/// (`TRYAGAIN`), and the cluster sends it to the slot's owner (see `migration.rs`).
pub fn block(
    call: &Call,
    ask: Ask<'_>,
    timeout_ms: u64,
    frees_at: Micros,
    now: Micros,
) -> Result<Reply, LockError> {
    if with(|s| s.is_leaving(call.arg(1))) {
        return Err(LockError::WaitInterrupted);
    }
    let Some(client) = call.block::<Queued>() else {
        // Redis would not block this client: answer as the one attempt it was.
        counters::CONTENDED.incr();
        return Ok(Reply::Nil);
    };
    let key: KeyId = (call.db(), call.arg(1).into());
    with(|s| {
        let waiter = Waiter {
            handle: client,
            token: ask.token.into(),
            label: ask.label.map(Into::into),
            permits: ask.permits,
            ttl: ask.ttl,
            since: now,
            deadline: waiting::deadline(now, timeout_ms),
        };
        s.queues.push(key.clone(), waiter);
        s.queues.wake(&key, frees_at);
        rearm(s, now);
    });
    counters::BLOCKED_ACQUIRES.incr();
    Ok(Reply::Blocked)
}

/// Serves the waiters of `name` in `db` (selected in `names`' context) if its lease ended, and
/// answers them; those whose deadline passed are answered nil first, whatever else happens to
/// the key. Replicates a handoff.
pub fn serve(names: &impl Names, db: i32, name: &[u8], now: Micros) {
    let id: KeyId = (db, name.into());
    let mut served = with(|s| s.queues.expire(&id, now));
    served.extend(match names.string(name) {
        Some(redis_name) => serve_key(names, &redis_name, &id, now),
        None => {
            with(|s| s.queues.take_all(&id)).into_iter().map(|w| failed(w, LockError::Internal)).collect()
        }
    });
    for s in served {
        answer(&id, s, now);
    }
    with(|s| rearm(s, now));
}

fn serve_key(
    names: &impl Names,
    redis_name: &ffi::KeyName<'_>,
    id: &KeyId,
    now: Micros,
) -> Vec<Served<BlockedClient>> {
    let mut key = Store::named(redis_name);
    let mut mark = SERVER.high_water();
    let grace = SERVER.grace_left(now);
    let take_all = |e: LockError| -> Vec<_> {
        with(|s| s.queues.take_all(id)).into_iter().map(|w| failed(w, e.clone())).collect()
    };
    // A handoff now would be a write the slot's new owner may never see (`migration.rs`).
    if with(|s| s.is_leaving(&id.1)) {
        return take_all(LockError::WaitInterrupted);
    }
    match key.lock() {
        Err(e) => take_all(e),
        Ok(Some(mut lock)) => {
            // The handoff at the deadline is often the first look at an expired lease.
            lock.take_expiries(now, counters::lease_expired);
            if lock.has_room(now) {
                if let Some(Err(e)) = mark.peek(lock.fence()).map(|fence| floor::cover(names, &id.1, fence)) {
                    return take_all(e);
                }
            }
            let served =
                with(|s| s.queues.serve(id, &mut lock, &mut mark, Moment { now, grace_left: grace }));
            if served.iter().any(|s| s.answer.holds()) {
                SERVER.set_high_water(mark);
                replication::replicate_named(redis_name, mark, &lock.snapshot(now));
            }
            served
        }
        // The key may have left this node with its slot: only the cluster knows who serves it.
        Ok(None) if ffi::in_cluster() => take_all(LockError::WaitInterrupted),
        Ok(None) => {
            let mut fresh = Lock::new();
            let mut served =
                with(|s| s.queues.serve(id, &mut fresh, &mut mark, Moment { now, grace_left: grace }));
            if served.iter().any(|s| s.answer.holds()) {
                match key.insert(fresh) {
                    Ok(stored) => {
                        SERVER.set_high_water(mark);
                        replication::replicate_named(redis_name, mark, &stored.snapshot(now));
                    }
                    Err(e) => {
                        for s in served.iter_mut().filter(|s| s.answer.holds()) {
                            s.answer = Answer::Failed(e.clone());
                        }
                    }
                }
            }
            served
        }
    }
}

fn failed(waiter: Waiter<BlockedClient>, e: LockError) -> Served<BlockedClient> {
    Served { waiter, answer: Answer::Failed(e) }
}

/// Unblocks a served waiter with its answer, and counts it.
fn answer(key: &KeyId, served: Served<BlockedClient>, now: Micros) {
    counters::waited(served.waited(now));
    let Served { waiter, answer } = served;
    let (reply, if_lost): (_, Option<Box<dyn FnOnce()>>) = match answer {
        Answer::Granted { fence, took_over } => {
            counters::GRANTS.incr();
            counters::HANDOFFS.incr();
            if took_over {
                counters::TAKEOVERS.incr();
            }
            let lost = LostGrant { key: key.clone(), token: waiter.token, fence };
            (Ok(int(fence)), Some(Box::new(move || give_back_later(lost))))
        }
        // The lease is its token's other request's too: that one keeps it.
        Answer::Reentered { fence } => {
            counters::REENTRIES.incr();
            (Ok(int(fence)), None)
        }
        // Its own deadline passed: the same nil (and counters) as any refusal by timeout.
        Answer::TimedOut => {
            counters::WAIT_TIMEOUTS.incr();
            counters::CONTENDED.incr();
            (Ok(Reply::Nil), None)
        }
        Answer::Failed(e) => {
            if let LockError::PermitsMismatch { .. } = e {
                counters::PERMITS_MISMATCHES.incr();
            }
            (Err(e), None)
        }
    };
    ffi::answer(waiter.handle, reply, if_lost);
}

/// A granted waiter's client went away before the reply reached it: nobody will use or release
/// that lease, so the next wake-up gives it back (to the next waiter, if any).
fn give_back_later(lost: LostGrant) {
    counters::WAIT_ABANDONED.incr();
    with(|s| {
        s.lost.push(lost);
        rearm(s, clock::now());
    });
}

/// A lease on the call's key was shortened (a RENEW or a re-entry with a shorter ttl): if anyone
/// waits, look again when the key now frees up, not at the later instant filed before.
pub fn shortened(call: &Call, frees_at: Option<Micros>) {
    if frees_at.is_some() && is_waited(call) {
        shortened_at(call.db(), call.arg(1), frees_at);
    }
}

/// [`shortened`] for the lease on `name` in `db`.
pub fn shortened_at(db: i32, name: &[u8], frees_at: Option<Micros>) {
    let Some(at) = frees_at.filter(|_| is_waited_at(db, name)) else { return };
    with(|s| {
        s.queues.wake(&(db, name.into()), at);
        rearm(s, clock::now());
    });
}

/// A `FLUSHDB` / `FLUSHALL` emptied `db` (`None`: every database): its waited keys are gone.
pub fn flushed(db: Option<i32>) {
    let now = clock::now();
    with(|s| {
        for key in s.queues.keys_in(db) {
            s.queues.wake(&key, now);
        }
        rearm(s, now);
    });
}

/// An atomic migration of `slots` away from this node started, failed or completed. At the
/// start their waiters are told to ask again, and while the slots are leaving nobody queues
/// for their keys; at completion any waiter still there is told the same (the slot is the
/// new owner's); a failure only lifts the mark, and the source goes on as before.
pub fn exporting(export: Export, slots: &[RangeInclusive<usize>]) {
    let now = clock::now();
    let interrupted = with(|s| {
        for range in slots {
            match export {
                Export::Started => s.leaving.mark(range.clone()),
                Export::Failed | Export::Completed => s.leaving.unmark(range.clone()),
            }
        }
        if export == Export::Failed {
            return Vec::new();
        }
        let moving = |key: &KeyId| slots.iter().any(|r| r.contains(&slot::slot(&key.1)));
        let keys: Vec<KeyId> = s.queues.keys_in(None).into_iter().filter(moving).collect();
        keys.into_iter()
            .flat_map(|key| {
                let waiters = s.queues.take_all(&key);
                waiters.into_iter().map(move |w| (key.clone(), failed(w, LockError::WaitInterrupted)))
            })
            .collect::<Vec<_>>()
    });
    for (key, served) in interrupted {
        answer(&key, served, now);
    }
    with(|s| rearm(s, now));
}

/// A lock key is losing its name (deleted, overwritten, renamed or moved away): if anyone waits
/// on it, serve them now.
pub fn unlinked(db: i32, name: &[u8]) {
    if SERVER.waiters() == 0 {
        return;
    }
    let now = clock::now();
    with(|s| {
        let key = (db, name.into());
        if s.queues.is_waited(&key) {
            s.queues.wake(&key, now);
            rearm(s, now);
        }
    });
}

/// Arms the wake-up timer for the earliest wake-up (or stops it when nothing is due). Never
/// early: a look at a key before its holder's deadline would only arm again.
fn rearm(s: &mut WaitState, now: Micros) {
    let next = if s.lost.is_empty() { s.queues.next_due() } else { Some(now) };
    match (next, s.armed) {
        (None, None) => {}
        (Some(at), Some((_, armed_at))) if armed_at <= at => {}
        (next, armed) => {
            if let Some((id, _)) = armed {
                ffi::stop_timer(id);
            }
            s.armed = next.and_then(|at| {
                let delay_ms = at.saturating_sub(now).div_ceil(1000);
                ffi::start_timer(i64::try_from(delay_ms).unwrap_or(i64::MAX), wake).map(|id| (id, at))
            });
        }
    }
}

/// The wake-up timer: gives back lost grants, then serves every key whose wake-up is due, in
/// slices of at most [`BUDGET`].
fn wake(timer: &Timer) {
    with(|s| s.armed = None);
    let start = clock::now();
    // Only a primary grants. A server that became a replica has no waiters (Redis unblocked
    // them with the role change); what is left can only be dropped.
    if !timer.is_deciding_primary() {
        with(|s| s.lost.clear());
        return;
    }
    for lost in with(|s| std::mem::take(&mut s.lost)) {
        give_back(timer, lost);
    }
    while clock::now().saturating_sub(start) < BUDGET {
        let now = clock::now();
        let Some((db, name)) = with(|s| s.queues.pop_due(now)) else { break };
        if timer.select_db(db) {
            serve(timer, db, &name, now);
        } else {
            let served = with(|s| s.queues.take_all(&(db, name.clone())));
            for waiter in served {
                answer(&(db, name.clone()), failed(waiter, LockError::Internal), now);
            }
        }
    }
    with(|s| rearm(s, clock::now()));
}

/// Releases a lost grant if its token still holds it with that fence, then serves the key.
fn give_back(timer: &Timer, lost: LostGrant) {
    let (db, name) = &lost.key;
    if !timer.select_db(*db) {
        return;
    }
    let Some(redis_name) = timer.string(name) else { return };
    let now = clock::now();
    let mut key = Store::named(&redis_name);
    if let Ok(Some(mut lock)) = key.lock() {
        // Not counted as a release: nobody held this lease (`wait_abandoned` counts it).
        if lock.fence_of(&lost.token, now) == Some(lost.fence)
            && matches!(lock.release(&lost.token, now), Released::Ended { .. })
        {
            replication::replicate_named(&redis_name, SERVER.high_water(), &lock.snapshot(now));
            lock.file();
        }
    }
    drop(key);
    drop(redis_name);
    if with(|s| s.queues.is_waited(&lost.key)) {
        serve(timer, *db, name, now);
    }
}

/// Redis's own ends of a wait (the server times nobody out: see the module doc).
struct Queued;

impl Waits for Queued {
    /// `CLIENT UNBLOCK … TIMEOUT`: answered nil by Redis, counted as a timeout.
    fn timed_out(client: BlockedClient) {
        if let Some((_, waiter)) = with(|s| s.queues.remove(client)) {
            counters::WAIT_TIMEOUTS.incr();
            counters::CONTENDED.incr();
            counters::waited(clock::now().saturating_sub(waiter.since));
        }
    }

    fn abandoned(client: BlockedClient) {
        if let Some((_, waiter)) = with(|s| s.queues.remove(client)) {
            counters::WAIT_ABANDONED.incr();
            counters::waited(clock::now().saturating_sub(waiter.since));
        }
    }
}
