//! The raw side of server-side waiting (`blocking.rs` decides): blocking a client and
//! answering it later, the callbacks Redis makes on its own (timeout, disconnect), one-shot
//! timers armed from anywhere, and the `FLUSHDB` event.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicPtr, Ordering::Relaxed};
use std::sync::OnceLock;

use redis_module::{raw, Context};

use super::{guard, log_warning, send_reply, Call, RawCtx, RawString, Reply, Timer, OK};
use crate::error::LockError;

/// A blocked client, by its handle's address: Redis keeps the handle alive until the client
/// is answered or gone, and the queues let go of it before either.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockedClient(usize);

impl BlockedClient {
    fn raw(self) -> *mut raw::RedisModuleBlockedClient {
        self.0 as *mut raw::RedisModuleBlockedClient
    }
}

/// What the waiting side does when Redis ends a wait on its own.
pub trait Waits {
    /// `CLIENT UNBLOCK … TIMEOUT` (clients are blocked without a server-side timeout, see
    /// [`Call::block`]): take it off its queue. It is answered nil.
    fn timed_out(client: BlockedClient);
    /// The client went away while it waited (disconnect, `CLIENT KILL`, `CLIENT UNBLOCK …
    /// ERROR`, the server turning replica): take it off its queue.
    fn abandoned(client: BlockedClient);
}

/// An answer on its way to a blocked client. `if_lost` runs if the client goes away before the
/// answer reaches it, e.g. to give back a lease nobody will use.
struct Delivery {
    reply: Result<Reply, LockError>,
    if_lost: Option<Box<dyn FnOnce()>>,
}

impl Call<'_> {
    /// Whether the client may block: not inside `MULTI`, a script or a function, nor called by
    /// another module (Redis refuses to block those; a blocking command there is one attempt).
    pub fn may_block(&self) -> bool {
        let never = (raw::REDISMODULE_CTX_FLAGS_MULTI
            | raw::REDISMODULE_CTX_FLAGS_LUA
            | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING
            | raw::REDISMODULE_CTX_FLAGS_REPLICATED
            | raw::REDISMODULE_CTX_FLAGS_LOADING) as c_int;
        // SAFETY: a live command context.
        let flags = unsafe { raw::RedisModule_GetContextFlags.map_or(0, |f| f(self.ctx)) };
        flags & never == 0
    }

    /// The database the call runs in.
    pub fn db(&self) -> i32 {
        // SAFETY: a live command context.
        unsafe { raw::RedisModule_GetSelectedDb.map_or(0, |f| f(self.ctx)) }
    }

    /// Blocks the calling client until [`answer`] answers it. The command must then reply
    /// [`Reply::Blocked`]. `None` if Redis refused to block.
    ///
    /// No server-side timeout: the caller answers at the deadline itself. On Redis 7.0 a
    /// server timeout that falls due in the event-loop pass in which the client was answered
    /// drops that answer (`moduleBlockedClientTimedOut` returns early for an unblocked client
    /// and the disconnect callback runs instead), and the client waits forever. The timeout
    /// callback stays for `CLIENT UNBLOCK … TIMEOUT`.
    pub fn block<W: Waits>(&self) -> Option<BlockedClient> {
        // SAFETY: a live command context; the callbacks match Redis's signatures.
        unsafe {
            let block = raw::RedisModule_BlockClient?;
            let bc = block(self.ctx, Some(reply_answer), Some(timed_out::<W>), Some(free_answer), 0);
            if bc.is_null() {
                return None;
            }
            if let Some(set) = raw::RedisModule_SetDisconnectCallback {
                set(bc, Some(disconnected::<W>));
            }
            Some(BlockedClient(bc as usize))
        }
    }
}

/// Unblocks `client` with `reply`, sent from the event loop right after the current command or
/// timer. Only for clients still blocked (the queues guarantee that).
pub fn answer(client: BlockedClient, reply: Result<Reply, LockError>, if_lost: Option<Box<dyn FnOnce()>>) {
    let answer = Box::into_raw(Box::new(Delivery { reply, if_lost }));
    // SAFETY: a live blocked-client handle (the caller's promise); Redis hands `answer` to
    // `reply_answer` and `free_answer`, which frees it exactly once.
    unsafe {
        let ok = raw::RedisModule_UnblockClient.is_some_and(|f| f(client.raw(), answer.cast()) == OK);
        if !ok {
            drop(Box::from_raw(answer));
            log_warning("fencedlock: unblocking a waiter failed");
        }
    }
}

/// # Safety
/// Called by Redis with the context of a blocked client being answered.
unsafe extern "C" fn reply_answer(ctx: RawCtx, _argv: *mut RawString, _argc: c_int) -> c_int {
    // SAFETY: Redis passes the privdata `answer` gave; it lives until `free_answer`.
    let answer =
        unsafe { raw::RedisModule_GetBlockedClientPrivateData.map_or(std::ptr::null_mut(), |f| f(ctx)) };
    // SAFETY: as above.
    let reply = match unsafe { answer.cast::<Delivery>().as_ref() } {
        Some(answer) => answer.reply.clone(),
        None => Err(LockError::Internal),
    };
    // SAFETY: a live reply context.
    unsafe { send_reply(ctx, reply) }
}

/// # Safety
/// Called by Redis with the context of a blocked client whose timeout passed.
unsafe extern "C" fn timed_out<W: Waits>(ctx: RawCtx, _argv: *mut RawString, _argc: c_int) -> c_int {
    // SAFETY: a live timeout context.
    let bc = unsafe { raw::RedisModule_GetBlockedClientHandle.map_or(std::ptr::null_mut(), |f| f(ctx)) };
    guard("wait timeout", (), || W::timed_out(BlockedClient(bc as usize)));
    // SAFETY: as above.
    unsafe { send_reply(ctx, Ok(Reply::Nil)) }
}

/// # Safety
/// Called by Redis when a blocked client goes away, answered (not yet replied) or not.
unsafe extern "C" fn disconnected<W: Waits>(ctx: RawCtx, bc: *mut raw::RedisModuleBlockedClient) {
    // SAFETY: the privdata of an answered client is our `Delivery` (null before `answer`); Redis
    // frees it later through `free_answer`, on this thread.
    let answer =
        unsafe { raw::RedisModule_GetBlockedClientPrivateData.map_or(std::ptr::null_mut(), |f| f(ctx)) };
    // SAFETY: as above.
    match unsafe { answer.cast::<Delivery>().as_mut() } {
        Some(answer) => {
            if let Some(if_lost) = answer.if_lost.take() {
                guard("lost answer", (), if_lost);
            }
        }
        None => guard("wait abandoned", (), || W::abandoned(BlockedClient(bc as usize))),
    }
}

/// # Safety
/// Called by Redis once per answer, after it was replied or its client went away.
unsafe extern "C" fn free_answer(_ctx: RawCtx, answer: *mut c_void) {
    if !answer.is_null() {
        // SAFETY: every privdata we give Redis is a `Box<Delivery>`, freed only here.
        drop(unsafe { Box::from_raw(answer.cast::<Delivery>()) });
    }
}

/// The context timers are armed with from places that have none of their own (a key's unlink
/// callback, a disconnect): a detached context taken at load, which only names our module.
static TIMER_CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// Whether the server runs in cluster mode, read at load (`cluster-enabled` cannot change).
static CLUSTER: OnceLock<bool> = OnceLock::new();

/// At load: keeps the timer context and reads the cluster mode.
pub fn init(ctx: &Context) {
    // SAFETY: called from OnLoad with the module's context.
    unsafe {
        if let Some(detached) = raw::RedisModule_GetDetachedThreadSafeContext {
            TIMER_CTX.store(detached(ctx.ctx), Relaxed);
        }
        let flags = raw::RedisModule_GetContextFlags.map_or(0, |f| f(ctx.ctx));
        let _ = CLUSTER.set(flags & raw::REDISMODULE_CTX_FLAGS_CLUSTER as c_int != 0);
    }
}

/// Whether the server runs in cluster mode (keys live in slots that can migrate).
pub fn in_cluster() -> bool {
    CLUSTER.get().copied().unwrap_or(false)
}

/// A one-shot timer's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerId(u64);

/// Runs `job` once, in `delay_ms`.
pub fn start_timer(delay_ms: i64, job: fn(&Timer)) -> Option<TimerId> {
    let ctx = TIMER_CTX.load(Relaxed);
    if ctx.is_null() {
        return None;
    }
    // SAFETY: the module's detached context lives as long as the module; `data` is the fn
    // pointer `fire_once` turns back into `job`.
    unsafe {
        let create = raw::RedisModule_CreateTimer?;
        Some(TimerId(create(ctx, delay_ms.max(0), Some(fire_once), job as *mut c_void)))
    }
}

/// Cancels a timer that has not fired.
pub fn stop_timer(id: TimerId) {
    let ctx = TIMER_CTX.load(Relaxed);
    // SAFETY: as in `start_timer`; Redis ignores ids that already fired.
    unsafe {
        if let (false, Some(stop)) = (ctx.is_null(), raw::RedisModule_StopTimer) {
            stop(ctx, id.0, std::ptr::null_mut());
        }
    }
}

extern "C" fn fire_once(ctx: RawCtx, data: *mut c_void) {
    // SAFETY: `data` is the `fn(&Timer)` that `start_timer` passed.
    let job: fn(&Timer) = unsafe { std::mem::transmute::<*mut c_void, fn(&Timer)>(data) };
    guard("timer", (), || job(&Timer { ctx }));
}

/// What runs after a `FLUSHDB` / `FLUSHALL`: the flushed database, `None` for all.
static ON_FLUSH: OnceLock<fn(Option<i32>)> = OnceLock::new();

/// Runs `job` after every `FLUSHDB` / `FLUSHALL` (which delete keys without unlinking them one by
/// one, so no key callback tells us).
pub fn on_flush(ctx: &Context, job: fn(Option<i32>)) {
    let _ = ON_FLUSH.set(job);
    let event = raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_FLUSHDB, dataver: 1 };
    // SAFETY: called from OnLoad with the module's context; the callback matches the signature.
    unsafe {
        if let Some(subscribe) = raw::RedisModule_SubscribeToServerEvent {
            if subscribe(ctx.ctx, event, Some(flushed)) != OK {
                log_warning("fencedlock: cannot subscribe to FLUSHDB events");
            }
        }
    }
}

/// # Safety
/// Called by Redis for the FLUSHDB event with its `RedisModuleFlushInfo`.
unsafe extern "C" fn flushed(_ctx: RawCtx, _eid: raw::RedisModuleEvent, subevent: u64, data: *mut c_void) {
    if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_END {
        return;
    }
    // SAFETY: the event's data is a `RedisModuleFlushInfo` (version 1).
    let db = unsafe { data.cast::<raw::RedisModuleFlushInfoV1>().as_ref().map_or(-1, |info| info.dbnum) };
    if let Some(job) = ON_FLUSH.get() {
        guard("flush", (), || job((db >= 0).then_some(db)));
    }
}
