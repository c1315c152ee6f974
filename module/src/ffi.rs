//! The thin layer between Redis's C calling convention and our command functions: argument
//! access, replies, logging, and the guard that keeps a Rust panic from unwinding into Redis
//! (which would abort the server and lose every lock).
//!
//! Everything that calls Redis's raw API lives under `ffi/`, and every `unsafe` block with it:
//! key access (`key`), the data type's callbacks (`datatype`), replication and AOF records
//! (`replication`), blocking and timers (`blocked`), `INFO` fields (`info`), the clock (`clock`)
//! and registration (`register`). This layer imports only the pure core, never the glue above
//! it; what the type's callbacks need from the server comes through `datatype::Hooks`.
//!
//! Raw Redis pointers do not travel bare through safe code: a command gets a [`Call`], which
//! only [`run`] creates, from the pointers Redis passed to that command. `Key`, `replication`
//! and the reply functions take a `Call`, so safe code cannot hand Redis a dangling context or
//! string.

use std::ffi::{c_char, c_int, c_long, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use fencedlock_protocol::{Command, SemaphoreStatus};
use redis_module::{raw, Context};

use crate::error::LockError;

pub mod blocked;
pub mod clock;
pub mod datatype;
pub mod info;
pub mod key;
pub mod migration;
#[cfg(not(test))]
pub mod register;
pub mod replication;

pub use blocked::{answer, in_cluster, start_timer, stop_timer, BlockedClient, TimerId, Waits};

type RawCtx = *mut raw::RedisModuleCtx;
type RawString = *mut raw::RedisModuleString;

const OK: c_int = raw::REDISMODULE_OK as c_int;

/// One command invocation: its context and arguments (argument 0 is the command name), live
/// for the duration of the command callback.
pub struct Call<'a> {
    ctx: RawCtx,
    argv: &'a [RawString],
}

impl<'a> Call<'a> {
    /// The bytes of argument `i` (empty when out of range: `run` checked the arity already).
    pub fn arg(&self, i: usize) -> &'a [u8] {
        match self.argv.get(i) {
            // SAFETY: every `argv` entry is a live string Redis passed for this call.
            Some(&s) => unsafe { string_bytes(s) },
            None => &[],
        }
    }

    /// How many arguments the call has, its name included.
    pub fn argc(&self) -> usize {
        self.argv.len()
    }

    /// The arguments from `first` on.
    pub fn args_from(&self, first: usize) -> Vec<&'a [u8]> {
        (first..self.argv.len()).map(|i| self.arg(i)).collect()
    }

    /// The command context, for the FFI calls of `key` and `replication`.
    pub(crate) fn raw_ctx(&self) -> RawCtx {
        self.ctx
    }

    /// The key's name: argument 1 (every command but `ACQUIREALL`, which names its keys
    /// itself, takes exactly one key there).
    pub(crate) fn raw_key(&self) -> RawString {
        self.argv.get(1).copied().unwrap_or(std::ptr::null_mut())
    }

    /// Argument `i` as the Redis string it came in (null when out of range), for `replication`
    /// to send on without copying.
    pub(crate) fn raw_arg(&self, i: usize) -> RawString {
        self.argv.get(i).copied().unwrap_or(std::ptr::null_mut())
    }

    /// Whether this call comes from the primary's replication stream or from loading the AOF,
    /// the only sources allowed to send `FENCEDLOCK.APPLY`.
    pub fn is_replicated_or_loading(&self) -> bool {
        let wanted = (raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING) as c_int;
        // SAFETY: a live command context.
        let flags = unsafe { raw::RedisModule_GetContextFlags.map_or(0, |f| f(self.ctx)) };
        flags & wanted != 0
    }

    /// Whether Redis calls the command only to learn where its keys are (a command registered
    /// with `getkeys-api`: Cluster routing and `CROSSSLOT` use the answer), not to run it.
    pub fn is_keys_position_request(&self) -> bool {
        // SAFETY: a live command context.
        unsafe { raw::RedisModule_IsKeysPositionRequest.is_some_and(|f| f(self.ctx) != 0) }
    }

    /// Answers a keys position request: argument `i` is a key.
    pub fn key_at(&self, i: usize) {
        let Ok(pos) = c_int::try_from(i) else { return };
        // SAFETY: a live command context of a keys position request.
        unsafe {
            if let Some(key_at) = raw::RedisModule_KeyAtPos {
                key_at(self.ctx, pos);
            }
        }
    }

    /// Replicates this call as it was sent, to replicas and the AOF.
    pub fn replicate_verbatim(&self) {
        // SAFETY: a live command context.
        unsafe {
            if let Some(verbatim) = raw::RedisModule_ReplicateVerbatim {
                verbatim(self.ctx);
            }
        }
    }
}

/// The bytes of a Redis string.
///
/// # Safety
/// `s` is null or a live `RedisModuleString`; the bytes must not outlive it.
pub unsafe fn string_bytes<'a>(s: RawString) -> &'a [u8] {
    if s.is_null() {
        return &[];
    }
    let mut len = 0;
    // SAFETY: `s` is a live string (the caller's promise); Redis returns its buffer and length.
    unsafe {
        let Some(ptr_len) = raw::RedisModule_StringPtrLen else { return &[] };
        let ptr = ptr_len(s, &mut len);
        if ptr.is_null() {
            return &[];
        }
        std::slice::from_raw_parts(ptr.cast::<u8>(), len)
    }
}

/// What a command answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Int(i64),
    Nil,
    Ints(Vec<i64>),
    /// An array of integers and then one bulk string (`STATUS` of a labelled lease).
    IntsThenBulk(Vec<i64>, Vec<u8>),
    /// `STATUS` of a semaphore key (its shape is the protocol's `SemaphoreStatus::encode`).
    Semaphore(SemaphoreStatus),
    /// Nothing now: the client was blocked and is answered later (see `Call::block`).
    Blocked,
    /// Nothing at all: Redis asked where the keys are (see `Call::is_keys_position_request`).
    KeysReported,
}

/// A callback context in which key names can be made: a command's or a timer's.
pub trait Names {
    /// A key's name as a Redis string in this context.
    fn string<'c>(&'c self, bytes: &'c [u8]) -> Option<KeyName<'c>>;
}

impl Names for Call<'_> {
    fn string<'c>(&'c self, bytes: &'c [u8]) -> Option<KeyName<'c>> {
        // SAFETY: a live command context, which outlives the name.
        unsafe { KeyName::new(self.ctx, bytes) }
    }
}

impl Names for Timer {
    fn string<'c>(&'c self, bytes: &'c [u8]) -> Option<KeyName<'c>> {
        // SAFETY: a live timer context, which outlives the name.
        unsafe { KeyName::new(self.ctx, bytes) }
    }
}

/// An integer reply from an unsigned value (fences fit: they stop at `i64::MAX`).
pub fn int(v: u64) -> Reply {
    Reply::Int(i64::try_from(v).unwrap_or(i64::MAX))
}

/// A command's implementation: parse, decide, change, replicate; every error before any change.
pub type Handler = fn(&Call) -> Result<Reply, LockError>;

/// Runs a command for Redis: checks its arity against its declared shape, calls `handler`,
/// and replies. A panic becomes an error reply instead of an abort.
///
/// # Safety
/// `ctx`, `argv` and `argc` are what Redis passed to the command callback being run.
pub unsafe fn run(ctx: RawCtx, argv: *mut RawString, argc: c_int, spec: &Command, handler: Handler) -> c_int {
    let argv = match usize::try_from(argc) {
        // SAFETY: Redis passes `argc` valid string pointers at `argv`.
        Ok(n) if !argv.is_null() => unsafe { std::slice::from_raw_parts(argv, n) },
        _ => &[],
    };
    // The fewest arguments (Redis's arity, unsigned) always fit the shape: the common calls
    // skip `accepts`' walk over the options (about 1% of an ACQUIRE, issue #44).
    let fewest = usize::try_from(spec.arity().unsigned_abs()).unwrap_or(usize::MAX);
    if argv.len() != fewest && !spec.accepts(argv.len()) {
        // SAFETY: a live command context.
        return unsafe { raw::RedisModule_WrongArity.map_or(0, |f| f(ctx)) };
    }
    let call = Call { ctx, argv };
    let reply = catch_unwind(AssertUnwindSafe(|| handler(&call))).unwrap_or_else(|_| {
        log_warning("fencedlock: a command panicked; it replied an error and changed nothing");
        Err(LockError::Internal)
    });
    // SAFETY: a live command context.
    unsafe { send_reply(ctx, reply) }
}

/// Sends a command's reply (nothing for [`Reply::Blocked`]).
///
/// # Safety
/// `ctx` is a live command or blocked-client reply context.
unsafe fn send_reply(ctx: RawCtx, reply: Result<Reply, LockError>) -> c_int {
    // SAFETY: a live context (the caller's promise); the reply functions were filled by Init.
    unsafe {
        match reply {
            Ok(Reply::Int(v)) => raw::RedisModule_ReplyWithLongLong.map_or(0, |f| f(ctx, v)),
            Ok(Reply::Nil) => raw::RedisModule_ReplyWithNull.map_or(0, |f| f(ctx)),
            Ok(Reply::Ints(vs)) => {
                reply_array(ctx, &vs, None);
                OK
            }
            Ok(Reply::IntsThenBulk(vs, bulk)) => {
                reply_array(ctx, &vs, Some(Some(&bulk)));
                OK
            }
            Ok(Reply::Semaphore(status)) => {
                let (head, holders) = status.encode();
                if let Some(array) = raw::RedisModule_ReplyWithArray {
                    array(ctx, head.len() as c_long + 1);
                    reply_ints(ctx, &head);
                    array(ctx, holders.len() as c_long);
                    for (numbers, label) in holders {
                        reply_array(ctx, &numbers, Some(label));
                    }
                }
                OK
            }
            Ok(Reply::Blocked | Reply::KeysReported) => OK,
            Err(e) => {
                let msg = CString::new(e.to_string().replace(['\r', '\n', '\0'], " ")).unwrap_or_default();
                raw::RedisModule_ReplyWithError.map_or(0, |f| f(ctx, msg.as_ptr()))
            }
        }
    }
}

/// Replies `[ints..., last]`: the integers, then (with `last`) a bulk string or nil.
///
/// # Safety
/// `ctx` is a live command or blocked-client reply context.
unsafe fn reply_array(ctx: RawCtx, ints: &[i64], last: Option<Option<&[u8]>>) {
    // SAFETY: a live context (the caller's promise); the reply functions were filled by Init.
    unsafe {
        let Some(array) = raw::RedisModule_ReplyWithArray else { return };
        array(ctx, (ints.len() + usize::from(last.is_some())) as c_long);
        reply_ints(ctx, ints);
        match last {
            Some(Some(bulk)) => {
                if let Some(buffer) = raw::RedisModule_ReplyWithStringBuffer {
                    buffer(ctx, bulk.as_ptr().cast::<c_char>(), bulk.len());
                }
            }
            Some(None) => {
                if let Some(null) = raw::RedisModule_ReplyWithNull {
                    null(ctx);
                }
            }
            None => {}
        }
    }
}

/// Replies each of `ints`, as elements of an array begun by the caller.
///
/// # Safety
/// `ctx` is a live command or blocked-client reply context.
unsafe fn reply_ints(ctx: RawCtx, ints: &[i64]) {
    // SAFETY: as the caller's.
    unsafe {
        if let Some(ll) = raw::RedisModule_ReplyWithLongLong {
            for &v in ints {
                ll(ctx, v);
            }
        }
    }
}

/// Runs a load, persistence or server callback; a panic is logged and turned into `fallback`.
pub fn guard<T>(what: &str, fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        log_warning(&format!("fencedlock: {what} panicked"));
        fallback
    })
}

pub fn log_warning(msg: &str) {
    log(c"warning", msg);
}

pub fn log_notice(msg: &str) {
    log(c"notice", msg);
}

fn log(level: &CStr, msg: &str) {
    let Ok(msg) = CString::new(msg) else { return };
    // SAFETY: RedisModule_Log accepts a null context and a "%s" format with one C string.
    unsafe {
        if let Some(log) = raw::RedisModule_Log {
            log(std::ptr::null_mut(), level.as_ptr(), c"%s".as_ptr(), msg.as_ptr());
        }
    }
}

/// A timer callback's context (the reclaim sweep, waiters' wake-ups). Only timer callbacks
/// create one, from the context Redis passed to them.
pub struct Timer {
    ctx: RawCtx,
}

/// A job run by a timer: it returns the delay in ms before it runs again.
pub type TimerJob = fn(&Timer) -> i64;

impl Timer {
    /// Whether this server decides: a primary that is not loading. Replicas only apply what
    /// their primary decided.
    pub fn is_deciding_primary(&self) -> bool {
        // SAFETY: a live timer context.
        let flags = unsafe { raw::RedisModule_GetContextFlags.map_or(0, |f| f(self.ctx)) };
        flags & raw::REDISMODULE_CTX_FLAGS_MASTER as c_int != 0
            && flags & raw::REDISMODULE_CTX_FLAGS_LOADING as c_int == 0
    }

    /// Selects the database later key lookups and replication use.
    pub fn select_db(&self, db: i32) -> bool {
        // SAFETY: a live timer context.
        unsafe { raw::RedisModule_SelectDb.is_some_and(|f| f(self.ctx, db) == OK) }
    }

    /// Sends `DEL key` to replicas and the AOF: the effect of a reclaim.
    pub fn replicate_del(&self, key: &KeyName<'_>) {
        // SAFETY: a live timer context and string; the format "s" takes one RedisModuleString.
        unsafe {
            if let Some(replicate) = raw::RedisModule_Replicate {
                if replicate(self.ctx, c"DEL".as_ptr(), c"s".as_ptr(), key.ptr) != OK {
                    log_warning("fencedlock: replicating a reclaim failed");
                }
            }
        }
    }
}

/// A key name as a Redis string, created in a command's or timer's context (which it borrows)
/// and freed on drop.
pub struct KeyName<'a> {
    ctx: RawCtx,
    ptr: RawString,
    bytes: &'a [u8],
}

impl<'a> KeyName<'a> {
    /// # Safety
    /// `ctx` is a live context that outlives `'a`.
    unsafe fn new(ctx: RawCtx, bytes: &'a [u8]) -> Option<Self> {
        // SAFETY: a live context (the caller's promise); Redis copies the bytes.
        let ptr = unsafe {
            raw::RedisModule_CreateString
                .map_or(std::ptr::null_mut(), |f| f(ctx, bytes.as_ptr().cast(), bytes.len()))
        };
        (!ptr.is_null()).then_some(KeyName { ctx, ptr, bytes })
    }

    pub(crate) fn raw_ctx(&self) -> RawCtx {
        self.ctx
    }

    pub(crate) fn raw(&self) -> RawString {
        self.ptr
    }

    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

impl Drop for KeyName<'_> {
    fn drop(&mut self) {
        // SAFETY: the string was created in this live context and is freed once.
        unsafe {
            if let Some(free) = raw::RedisModule_FreeString {
                free(self.ctx, self.ptr);
            }
        }
    }
}

/// Runs `job` in `first_ms`, then again after each delay it returns, for as long as the module
/// is loaded. A panic in `job` is logged and the timer goes on.
pub fn every(ctx: &Context, first_ms: i64, job: TimerJob) {
    schedule(ctx.ctx, first_ms, job);
}

fn schedule(ctx: RawCtx, delay_ms: i64, job: TimerJob) {
    // SAFETY: a live context (module load or timer callback); Redis keeps `data` opaque and hands
    // it back to `fire`, which turns it back into the same fn pointer.
    unsafe {
        if let Some(create) = raw::RedisModule_CreateTimer {
            create(ctx, delay_ms, Some(fire), job as *mut std::ffi::c_void);
        }
    }
}

extern "C" fn fire(ctx: RawCtx, data: *mut std::ffi::c_void) {
    // SAFETY: `data` is the `TimerJob` that `schedule` passed (fn pointers and data pointers have
    // the same size on every platform Redis runs on).
    let job: TimerJob = unsafe { std::mem::transmute::<*mut std::ffi::c_void, TimerJob>(data) };
    let timer = Timer { ctx };
    let next = guard("timer job", 1000, || job(&timer));
    schedule(ctx, next.max(1), job);
}
