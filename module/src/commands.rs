//! The FENCEDLOCK commands: check arity, parse, open the key, let `lease` decide, reply, count,
//! and replicate the effect. Every error is returned before anything is written.

use redis_module::ContextFlags;

use crate::error::LockError;
use crate::ffi::{int, Call, Reply};
use crate::key::Key;
use crate::lease::{Acquired, Lock, Micros, Released};
use crate::{args, clock, replication, state, stats};

fn arity(call: &Call, n: usize) -> Option<Reply> {
    (call.argc() != n).then_some(Reply::WrongArity)
}

/// `FENCEDLOCK.ACQUIRE key token ttl_ms` → fence, or nil while another token holds the lease.
pub fn acquire(call: &Call) -> Result<Reply, LockError> {
    if let Some(wrong) = arity(call, 4) {
        return Ok(wrong);
    }
    let token = args::token(call.bytes(2))?;
    let ttl = args::ttl(call.bytes(3), state::max_ttl_ms())?;
    let mut key = Key::open(call.ctx, call.raw(1), true);
    let now = clock::now();
    let mut mark = state::high_water();

    let stored = key.lock()?;
    let is_new = stored.is_none();
    let mut fresh = Lock::new();
    let lock = stored.unwrap_or(&mut fresh);
    let outcome = lock.acquire(&mut mark, token, ttl, now, state::grace_left(now));
    let fence = match outcome {
        Ok(Acquired::Busy) => {
            stats::CONTENDED.incr();
            return Ok(Reply::Nil);
        }
        Err(e @ LockError::RestartGrace { .. }) => {
            stats::GRACE_REFUSALS.incr();
            return Err(e);
        }
        Err(e) => return Err(e),
        Ok(Acquired::Reentered { fence }) => {
            stats::REENTRIES.incr();
            fence
        }
        Ok(Acquired::Granted { fence, took_over }) => {
            stats::GRANTS.incr();
            if took_over {
                stats::TAKEOVERS.incr();
            }
            fence
        }
    };
    state::set_high_water(mark);
    replication::replicate(call.ctx, call.raw(1), mark, &lock.record(now));
    if is_new {
        key.set_lock(fresh)?;
    }
    Ok(int(fence))
}

/// `FENCEDLOCK.RENEW key token ttl_ms` → 1 if the caller's unexpired lease now runs `ttl_ms`.
pub fn renew(call: &Call) -> Result<Reply, LockError> {
    if let Some(wrong) = arity(call, 4) {
        return Ok(wrong);
    }
    let token = args::token(call.bytes(2))?;
    let ttl = args::ttl(call.bytes(3), state::max_ttl_ms())?;
    owner_change(call, &stats::RENEW_FAILURES, |lock, now| lock.renew(token, ttl, now))
}

/// `FENCEDLOCK.RELEASE key token` → 1 if the caller held an unexpired lease; the fence stays.
pub fn release(call: &Call) -> Result<Reply, LockError> {
    if let Some(wrong) = arity(call, 3) {
        return Ok(wrong);
    }
    let token = args::token(call.bytes(2))?;
    owner_change(call, &stats::RELEASE_FAILURES, |lock, now| lock.release(token, now) == Released::Released)
}

/// RENEW and RELEASE: `change` decides (and applies) an owner-checked change to an existing
/// lock. Done → replicate the new state and reply 1; refused or no lock → count and reply 0.
fn owner_change(
    call: &Call,
    refusals: &stats::Counter,
    change: impl FnOnce(&mut Lock, Micros) -> bool,
) -> Result<Reply, LockError> {
    let mut key = Key::open(call.ctx, call.raw(1), true);
    let now = clock::now();
    if let Some(lock) = key.lock()? {
        if change(lock, now) {
            replication::replicate(call.ctx, call.raw(1), state::high_water(), &lock.record(now));
            return Ok(Reply::Int(1));
        }
    }
    refusals.incr();
    Ok(Reply::Int(0))
}

/// `FENCEDLOCK.RAISE key token fence` → the key's fence, now at least `fence`, if the caller
/// holds the lease; nil otherwise. Fenced Redlock lifts every node to the quorum's maximum.
pub fn raise(call: &Call) -> Result<Reply, LockError> {
    if let Some(wrong) = arity(call, 4) {
        return Ok(wrong);
    }
    let token = args::token(call.bytes(2))?;
    let fence = args::fence(call.bytes(3))?;
    let mut key = Key::open(call.ctx, call.raw(1), true);
    let now = clock::now();
    let mut mark = state::high_water();
    let Some(lock) = key.lock()? else { return Ok(Reply::Nil) };
    match lock.raise(&mut mark, token, fence, now) {
        Some(raised) => {
            state::set_high_water(mark);
            replication::replicate(call.ctx, call.raw(1), mark, &lock.record(now));
            Ok(int(raised))
        }
        None => Ok(Reply::Nil),
    }
}

/// `FENCEDLOCK.CAD key value` → 1 if a string key held `value` and was deleted, else 0.
pub fn cad(call: &Call) -> Result<Reply, LockError> {
    if let Some(wrong) = arity(call, 3) {
        return Ok(wrong);
    }
    let key = Key::open(call.ctx, call.raw(1), true);
    if key.string()? != Some(call.bytes(2)) {
        return Ok(Reply::Int(0));
    }
    key.delete()?;
    // CAD decides on data alone (no clock), so a replica re-running it reaches the same result;
    // verbatim is also the cheapest way to replicate (no command lookup, no argument copies).
    redis_module::Context::new(call.ctx).replicate_verbatim();
    Ok(Reply::Int(1))
}

/// `FENCEDLOCK.STATUS key` → `[fence, held, pttl_ms or -1]`, nil for a missing key.
pub fn status(call: &Call) -> Result<Reply, LockError> {
    if let Some(wrong) = arity(call, 2) {
        return Ok(wrong);
    }
    let mut key = Key::open(call.ctx, call.raw(1), false);
    let Some(lock) = key.lock()? else { return Ok(Reply::Nil) };
    let status = lock.status(clock::now());
    let as_int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    Ok(Reply::Ints(vec![
        as_int(status.fence),
        i64::from(status.pttl_ms.is_some()),
        status.pttl_ms.map_or(-1, as_int),
    ]))
}

/// `FENCEDLOCK.APPLY key high_water fence [token remaining_us]`: a state record from the
/// primary or the AOF. Refused from clients, which could otherwise forge a lease or a fence.
pub fn apply(call: &Call) -> Result<Reply, LockError> {
    let flags = redis_module::Context::new(call.ctx).get_flags();
    if !flags.intersects(ContextFlags::REPLICATED | ContextFlags::LOADING) {
        return Err(LockError::InternalCommand);
    }
    if call.argc() != 4 && call.argc() != 6 {
        return Ok(Reply::WrongArity);
    }
    let fields: Vec<&[u8]> = (2..call.argc()).map(|i| call.bytes(i)).collect();
    let (high_water, record) = args::record(&fields)?;
    let lock = Lock::from_record(&record, clock::now())?;
    let mut key = Key::open(call.ctx, call.raw(1), true);
    match key.lock()? {
        Some(stored) => *stored = lock,
        None => key.set_lock(lock)?,
    }
    state::update_high_water(|mark| {
        mark.observe(high_water);
        mark.observe(record.fence);
    });
    // Feeds this replica's own AOF and sub-replicas with the same record.
    redis_module::Context::new(call.ctx).replicate_verbatim();
    Ok(Reply::Int(1))
}
