//! The `fencelock` data type: RDB save/load (also used by `DUMP`/`RESTORE`), AOF rewrite,
//! `MEMORY USAGE`, `DEBUG DIGEST-VALUE`, `COPY`, and the high-water mark as RDB aux data.
//!
//! What the callbacks need from the server's state (the mark, the reclaim index, the wait
//! queues) they reach through [`Hooks`], given once at load, so this layer imports no glue.

use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

use redis_module::native_types::RedisType;
use redis_module::raw;

use super::{clock, guard, log_warning, replication, string_bytes};
use crate::fence::HighWater;
use crate::lock::layout::{self, Sink, Source};
use crate::lock::Lock;

/// The server's side of the type's callbacks.
pub struct Hooks {
    /// The mark to save with the data set (aux data, AOF records).
    pub high_water: fn() -> HighWater,
    /// Takes in a fence or mark that was loaded: it must never be issued again.
    pub observe: fn(u64),
    /// Files a lock stored under a name (loaded, restored, copied) for reclaim.
    pub file: fn(&mut Lock, i32, &[u8]),
    /// Whether anyone waits on any key: only then does an unlink look up the key's name.
    pub any_waiters: fn() -> bool,
    /// A lock key is losing its name: its waiters are served.
    pub unlinked: fn(i32, &[u8]),
}

static HOOKS: OnceLock<Hooks> = OnceLock::new();

/// At load, before any key is loaded.
pub fn attach(hooks: Hooks) {
    let _ = HOOKS.set(hooks);
}

fn hooks() -> Option<&'static Hooks> {
    HOOKS.get()
}

fn high_water() -> HighWater {
    hooks().map_or(HighWater::new(0), |h| (h.high_water)())
}

fn observe(fence: u64) {
    if let Some(h) = hooks() {
        (h.observe)(fence);
    }
}

fn file(lock: &mut Lock, db: i32, name: &[u8]) {
    if let Some(h) = hooks() {
        (h.file)(lock, db, name);
    }
}

pub static LOCK_TYPE: RedisType = RedisType::new(
    fencedlock_protocol::keyspace::MODULE_TYPE,
    layout::ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save2: None,
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        free_effort: None,
        unlink: None,
        copy: None,
        defrag: None,
        copy2: Some(copy2),
        free_effort2: None,
        mem_usage2: None,
        unlink2: Some(unlink2),
    },
);

/// The layout is `lock::layout`'s ([`layout::save`]).
unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    guard("rdb_save", (), || {
        // SAFETY: Redis passes a value of our type.
        let Some(lock) = (unsafe { value.cast::<Lock>().as_ref() }) else { return };
        layout::save(&lock.snapshot(clock::now()), &mut Rdb(rdb));
    });
}

/// A value's RDB stream (also `DUMP` / `RESTORE`), as `lock::record` reads and writes it.
struct Rdb(*mut raw::RedisModuleIO);

impl Sink for Rdb {
    fn unsigned(&mut self, v: u64) {
        raw::save_unsigned(self.0, v);
    }

    fn bytes(&mut self, b: &[u8]) {
        raw::save_slice(self.0, b);
    }
}

impl Source for Rdb {
    type Bytes = redis_module::RedisBuffer;

    fn unsigned(&mut self) -> Option<u64> {
        raw::load_unsigned(self.0).ok()
    }

    fn bytes(&mut self) -> Option<redis_module::RedisBuffer> {
        raw::load_string_buffer(self.0).ok()
    }
}

/// Returns null, which fails the load (or the `RESTORE`), for a value `layout::load` refuses: a
/// layout it cannot read, or a state that breaks an invariant of the commands. The log names
/// why, never a token.
unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guard("rdb_load", std::ptr::null_mut(), || {
        let now = clock::now();
        match layout::load(&mut Rdb(rdb), encver, |s| Lock::from_snapshot(s, now)) {
            Ok(mut lock) => {
                // A restored or loaded fence must never be issued again.
                observe(lock.fence());
                // SAFETY: a live IO of a key being loaded (RDB, AOF preamble, RESTORE) or of aux
                // data without a key, for which Redis gives a null name.
                let (name, db) = unsafe {
                    (
                        raw::RedisModule_GetKeyNameFromIO.map_or(std::ptr::null(), |f| f(rdb)),
                        raw::RedisModule_GetDbIdFromIO.map_or(0, |f| f(rdb)),
                    )
                };
                if !name.is_null() {
                    // SAFETY: the name lives for the duration of this callback.
                    file(&mut lock, db, unsafe { string_bytes(name.cast_mut()) });
                }
                Box::into_raw(Box::new(lock)).cast()
            }
            Err(refused) => {
                log_warning(&format!("fencedlock: refusing a lock value: {refused}"));
                std::ptr::null_mut()
            }
        }
    })
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    guard("aof_rewrite", (), || {
        // SAFETY: Redis passes a value of our type, and the live rewrite IO and key.
        unsafe {
            if let Some(lock) = value.cast::<Lock>().as_ref() {
                replication::emit_aof(aof, key, high_water(), &lock.snapshot(clock::now()));
            }
        }
    });
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: Redis passes a value of our type.
    guard("mem_usage", 0, || unsafe { value.cast::<Lock>().as_ref() }.map_or(0, Lock::heap_size))
}

/// Fence, permits, and each holder's fence, token and label: the deadline differs between a
/// primary and its replicas by design.
unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    guard("digest", (), || {
        // SAFETY: Redis passes a value of our type and a live digest.
        unsafe {
            let Some(lock) = value.cast::<Lock>().as_ref() else { return };
            let as_ll = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            let (Some(add_ll), Some(add_bytes)) =
                (raw::RedisModule_DigestAddLongLong, raw::RedisModule_DigestAddStringBuffer)
            else {
                return;
            };
            add_ll(md, as_ll(lock.fence()));
            if lock.permits() > 1 {
                add_ll(md, i64::from(lock.permits()));
            }
            for (fence, holder) in lock.holders() {
                if lock.permits() > 1 {
                    add_ll(md, as_ll(fence));
                }
                for bytes in [Some(holder.token()), holder.label()].into_iter().flatten() {
                    add_bytes(md, bytes.as_ptr() as *const c_char as *mut _, bytes.len());
                }
            }
            if let Some(end) = raw::RedisModule_DigestEndSequence {
                end(md);
            }
        }
    });
}

unsafe extern "C" fn free(value: *mut c_void) {
    guard("free", (), || {
        if !value.is_null() {
            // SAFETY: every value of our type is a `Box<Lock>` from `Box::into_raw`.
            drop(unsafe { Box::from_raw(value.cast::<Lock>()) });
        }
    });
}

/// The key is losing its name: deleted, overwritten, or the source of a `RENAME` or `MOVE`
/// (which give no callback for the new name). The value's reclaim entries name the old key, so
/// it is marked unfiled; if it lives on, the next command that opens it files it again.
/// Waiters on the old name are served (see `blocking`).
unsafe extern "C" fn unlink2(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    guard("unlink", (), || {
        // SAFETY: Redis passes a live value of our type, on the main thread; nothing else holds
        // a reference to it during this callback.
        if let Some(lock) = unsafe { value.cast::<Lock>().cast_mut().as_mut() } {
            lock.unfile();
        }
        let Some(hooks) = hooks() else { return };
        if (hooks.any_waiters)() {
            // SAFETY: Redis passes a live key context naming the key being unlinked.
            let (db, name) = unsafe {
                let name = raw::RedisModule_GetKeyNameFromOptCtx.map_or(std::ptr::null(), |f| f(ctx));
                (raw::RedisModule_GetDbIdFromOptCtx.map_or(0, |f| f(ctx)), string_bytes(name.cast_mut()))
            };
            (hooks.unlinked)(db, name);
        }
    });
}

/// `COPY`: the copy is a new lock key, tracked for reclaim under its own name and database.
unsafe extern "C" fn copy2(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) -> *mut c_void {
    guard("copy", std::ptr::null_mut(), || {
        // SAFETY: Redis passes a value of our type and a live key context naming the copy.
        unsafe {
            let Some(lock) = value.cast::<Lock>().as_ref() else { return std::ptr::null_mut() };
            let mut copy = lock.copied();
            let name = raw::RedisModule_GetToKeyNameFromOptCtx.map_or(std::ptr::null(), |f| f(ctx));
            let db = raw::RedisModule_GetToDbIdFromOptCtx.map_or(0, |f| f(ctx));
            if !name.is_null() {
                file(&mut copy, db, string_bytes(name.cast_mut()));
            }
            Box::into_raw(Box::new(copy)).cast()
        }
    })
}

unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    guard("aux_save", (), || raw::save_unsigned(rdb, high_water().get()));
}

/// Raises (never lowers) the mark to the one saved with the data set; a mark `layout::load_mark`
/// refuses fails the load.
unsafe extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    guard("aux_load", raw::REDISMODULE_ERR as c_int, || match layout::load_mark(&mut Rdb(rdb), encver) {
        Ok(mark) => {
            observe(mark);
            raw::REDISMODULE_OK as c_int
        }
        Err(refused) => {
            log_warning(&format!("fencedlock: refusing the high-water mark: {refused}"));
            raw::REDISMODULE_ERR as c_int
        }
    })
}
