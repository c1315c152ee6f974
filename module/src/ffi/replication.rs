//! Effects, not decisions: every change travels as `FENCEDLOCK.APPLY key high_water fence
//! [token remaining_us [label]]` (a semaphore key's as `FENCEDLOCK.APPLYSEM key high_water fence
//! permits holders`), to replicas and to the AOF. A replica or an AOF replay sets the
//! deadline from its own clock at apply time, so lag and restarts only ever lengthen a lease,
//! and it never re-decides a grant against a different clock or state.

use std::ffi::{c_char, c_int, c_longlong};

use redis_module::raw;

use fencedlock_protocol::command::{APPLY, APPLYSEM};

use super::{log_warning, Call, KeyName};
use crate::fence::HighWater;
use crate::lock::layout::encode_holders;
use crate::lock::record::{Holding, Snapshot};

fn ll(v: u64) -> c_longlong {
    c_longlong::try_from(v).unwrap_or(c_longlong::MAX)
}

/// Calls a variadic `RedisModule_Replicate` / `RedisModule_EmitAOF` with the APPLY or APPLYSEM
/// record. The format letters match the arguments: s = RedisModuleString*, l = long long,
/// b = (char*, size_t).
macro_rules! send_record {
    ($send:expr, $target:expr, $key:expr, $mark:expr, $snapshot:expr) => {
        match $snapshot {
            Snapshot::Semaphore(record) => {
                let holders = encode_holders(&record.holders);
                $send(
                    $target,
                    APPLYSEM.c_name.as_ptr(),
                    c"slllb".as_ptr(),
                    $key,
                    ll($mark.get()),
                    ll(record.fence),
                    ll(u64::from(record.permits)),
                    holders.as_ptr().cast::<c_char>(),
                    holders.len(),
                )
            }
            Snapshot::Mutex(record) => send_record!(@mutex $send, $target, $key, $mark, record),
        }
    };
    (@mutex $send:expr, $target:expr, $key:expr, $mark:expr, $record:expr) => {
        match $record.holder {
            None => $send(
                $target,
                APPLY.c_name.as_ptr(),
                c"sll".as_ptr(),
                $key,
                ll($mark.get()),
                ll($record.fence),
            ),
            Some(Holding { token, remaining, label: None }) => $send(
                $target,
                APPLY.c_name.as_ptr(),
                c"sllbl".as_ptr(),
                $key,
                ll($mark.get()),
                ll($record.fence),
                token.as_ptr().cast::<c_char>(),
                token.len(),
                ll(remaining),
            ),
            Some(Holding { token, remaining, label: Some(label) }) => $send(
                $target,
                APPLY.c_name.as_ptr(),
                c"sllblb".as_ptr(),
                $key,
                ll($mark.get()),
                ll($record.fence),
                token.as_ptr().cast::<c_char>(),
                token.len(),
                ll(remaining),
                label.as_ptr().cast::<c_char>(),
                label.len(),
            ),
        }
    };
}

/// Sends the call's key's new state to replicas and the AOF, after the command changed it.
pub fn replicate(call: &Call, mark: HighWater, snapshot: &Snapshot<'_>) {
    send(call.raw_ctx(), call.raw_key(), mark, snapshot);
}

/// Sends another key's new state (a slot floor the command raised) to replicas and the AOF.
pub fn replicate_named(name: &KeyName<'_>, mark: HighWater, snapshot: &Snapshot<'_>) {
    send(name.raw_ctx(), name.raw(), mark, snapshot);
}

fn send(
    ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleString,
    mark: HighWater,
    snapshot: &Snapshot<'_>,
) {
    // SAFETY: the live context and a key name of the running command (from a `Call` or a
    // `KeyName` created in it); the arguments match the format (see the macro).
    unsafe {
        let Some(replicate) = raw::RedisModule_Replicate else { return };
        if send_record!(replicate, ctx, key, mark, snapshot) != raw::REDISMODULE_OK as c_int {
            log_warning("fencedlock: replicating a lock change failed");
        }
    }
}

/// Writes the key's state into an AOF rewrite. Each record also carries the high-water mark, so
/// an AOF without an RDB preamble still restores the mark (from the keys that remain).
///
/// # Safety
/// `aof` and `key` are what Redis passed to the type's `aof_rewrite` callback now running.
pub unsafe fn emit_aof(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    mark: HighWater,
    snapshot: &Snapshot<'_>,
) {
    // SAFETY: a live rewrite IO and key (the caller's promise); the arguments match the format
    // (see the macro).
    unsafe {
        if let Some(emit) = raw::RedisModule_EmitAOF {
            send_record!(emit, aof, key, mark, snapshot);
        }
    }
}
