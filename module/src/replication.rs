//! Effects, not decisions: every change travels as `FENCEDLOCK.APPLY key high_water fence
//! [token remaining_us]`, to replicas and to the AOF. A replica or an AOF replay sets the
//! deadline from its own clock at apply time, so lag and restarts only ever lengthen a lease,
//! and it never re-decides a grant against a different clock or state.

use std::ffi::{c_char, c_int, c_longlong};

use redis_module::raw;

use crate::fence::HighWater;
use crate::ffi::{Ctx, RString};
use crate::lease::Record;

pub const APPLY: &std::ffi::CStr = c"FENCEDLOCK.APPLY";

fn ll(v: u64) -> c_longlong {
    c_longlong::try_from(v).unwrap_or(c_longlong::MAX)
}

/// Calls a variadic `RedisModule_Replicate` / `RedisModule_EmitAOF` with the APPLY record.
/// The format letters match the arguments: s = RedisModuleString*, l = long long,
/// b = (char*, size_t).
macro_rules! send_record {
    ($send:expr, $target:expr, $key:expr, $mark:expr, $record:expr) => {
        match $record.holder {
            None => $send($target, APPLY.as_ptr(), c"sll".as_ptr(), $key, ll($mark.get()), ll($record.fence)),
            Some((token, remaining)) => $send(
                $target,
                APPLY.as_ptr(),
                c"sllbl".as_ptr(),
                $key,
                ll($mark.get()),
                ll($record.fence),
                token.as_ptr().cast::<c_char>(),
                token.len(),
                ll(remaining),
            ),
        }
    };
}

/// Sends the key's new state to replicas and the AOF, after the command that changed it.
pub fn replicate(ctx: Ctx, key: RString, mark: HighWater, record: &Record<'_>) {
    // SAFETY: a live command context and key; the arguments match the format (see the macro).
    unsafe {
        let Some(replicate) = raw::RedisModule_Replicate else { return };
        if send_record!(replicate, ctx, key, mark, record) != raw::REDISMODULE_OK as c_int {
            crate::ffi::log_warning(ctx, "fencedlock: replicating a lock change failed");
        }
    }
}

/// Writes the key's state into an AOF rewrite. Each record also carries the high-water mark, so
/// an AOF without an RDB preamble still restores the mark (from the keys that remain).
pub fn emit_aof(aof: *mut raw::RedisModuleIO, key: RString, mark: HighWater, record: &Record<'_>) {
    // SAFETY: a live rewrite IO and key; the arguments match the format (see the macro).
    unsafe {
        if let Some(emit) = raw::RedisModule_EmitAOF {
            send_record!(emit, aof, key, mark, record);
        }
    }
}
