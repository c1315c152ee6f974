//! Effects, not decisions: every change travels as `FENCEDLOCK.APPLY key high_water fence
//! [token remaining_us [label]]` (a semaphore key's as `FENCEDLOCK.APPLYSEM key high_water fence
//! permits holders`), to replicas and to the AOF. A replica or an AOF replay sets the
//! deadline from its own clock at apply time, so lag and restarts only ever lengthen a lease,
//! and it never re-decides a grant against a different clock or state.

use std::ffi::{c_char, c_int};

use redis_module::raw;

use fencedlock_protocol::command::{APPLY, APPLYSEM};

use super::{log_warning, string_bytes, Call, KeyName};
use crate::fence::HighWater;
use crate::lock::layout::{encode_holders, Decimal};
use crate::lock::record::{Holding, Snapshot};

/// Calls a variadic `RedisModule_Replicate` / `RedisModule_EmitAOF` with the APPLY or APPLYSEM
/// record. The format letters match the arguments: s = RedisModuleString*, b = (char*, size_t).
///
/// What an argument costs Redis (callgrind, issue #44): "s" takes a reference to a string that
/// exists; "b" makes one string; "l" made two (an sds and its object) after a conversion. So
/// the integers travel as `Decimal` text ("b": the bytes "l" wrote, on the wire and in the
/// AOF), and the token as the command's own argument ("s") when that holds exactly its bytes.
/// `$token` is that argument, or null to send the bytes.
macro_rules! send_record {
    ($send:expr, $target:expr, $key:expr, $token:expr, $mark:expr, $snapshot:expr) => {{
        let mark = Decimal::of($mark.get());
        match $snapshot {
            Snapshot::Semaphore(record) => {
                let holders = encode_holders(&record.holders);
                let (fence, permits) = (Decimal::of(record.fence), Decimal::of(u64::from(record.permits)));
                $send(
                    $target,
                    APPLYSEM.c_name.as_ptr(),
                    c"sbbbb".as_ptr(),
                    $key,
                    ptr(&mark),
                    len(&mark),
                    ptr(&fence),
                    len(&fence),
                    ptr(&permits),
                    len(&permits),
                    holders.as_ptr().cast::<c_char>(),
                    holders.len(),
                )
            }
            Snapshot::Mutex(record) => {
                let fence = Decimal::of(record.fence);
                match record.holder {
                    None => $send(
                        $target,
                        APPLY.c_name.as_ptr(),
                        c"sbb".as_ptr(),
                        $key,
                        ptr(&mark),
                        len(&mark),
                        ptr(&fence),
                        len(&fence),
                    ),
                    Some(Holding { token, remaining, label }) => {
                        let remaining = Decimal::of(remaining);
                        let token_arg: *mut raw::RedisModuleString = $token;
                        // Within the caller's unsafe block: a non-null `$token` is a live
                        // argument of the running command.
                        let own = !token_arg.is_null() && string_bytes(token_arg) == token;
                        // Without a label, the format ends before the last pair, which Redis
                        // then never reads.
                        let (format, label) = match (own, label) {
                            (true, None) => (c"sbbsb", &[][..]),
                            (true, Some(label)) => (c"sbbsbb", label),
                            (false, None) => (c"sbbbb", &[][..]),
                            (false, Some(label)) => (c"sbbbbb", label),
                        };
                        if own {
                            $send(
                                $target,
                                APPLY.c_name.as_ptr(),
                                format.as_ptr(),
                                $key,
                                ptr(&mark),
                                len(&mark),
                                ptr(&fence),
                                len(&fence),
                                token_arg,
                                ptr(&remaining),
                                len(&remaining),
                                label.as_ptr().cast::<c_char>(),
                                label.len(),
                            )
                        } else {
                            $send(
                                $target,
                                APPLY.c_name.as_ptr(),
                                format.as_ptr(),
                                $key,
                                ptr(&mark),
                                len(&mark),
                                ptr(&fence),
                                len(&fence),
                                token.as_ptr().cast::<c_char>(),
                                token.len(),
                                ptr(&remaining),
                                len(&remaining),
                                label.as_ptr().cast::<c_char>(),
                                label.len(),
                            )
                        }
                    }
                }
            }
        }
    }};
}

fn ptr(d: &Decimal) -> *const c_char {
    d.as_bytes().as_ptr().cast::<c_char>()
}

fn len(d: &Decimal) -> usize {
    d.as_bytes().len()
}

/// Sends the call's key's new state to replicas and the AOF, after the command changed it.
/// Every command that calls this takes the token as argument 2.
pub fn replicate(call: &Call, mark: HighWater, snapshot: &Snapshot<'_>) {
    send(call.raw_ctx(), call.raw_key(), call.raw_arg(2), mark, snapshot);
}

/// Sends another key's new state (a slot floor the command raised) to replicas and the AOF.
pub fn replicate_named(name: &KeyName<'_>, mark: HighWater, snapshot: &Snapshot<'_>) {
    send(name.raw_ctx(), name.raw(), std::ptr::null_mut(), mark, snapshot);
}

/// Sends the record even when no replica or AOF listens, although Redis (7.0's
/// `RM_Replicate`) then builds its arguments only to drop them (`alsoPropagate` asks
/// `shouldPropagate`): that test reads the replication backlog, the replica list (a replica
/// waiting for its RDB is in it before any module event tells) and the AOF state, and no module
/// API shows the first two; and `RM_Replicate` also counts the change in `server.dirty`, which
/// is what triggers the `save` points: skipped, a server with only lock traffic would never
/// save on them. So the record is made cheap instead (issue #44).
fn send(
    ctx: *mut raw::RedisModuleCtx,
    key: *mut raw::RedisModuleString,
    token: *mut raw::RedisModuleString,
    mark: HighWater,
    snapshot: &Snapshot<'_>,
) {
    // SAFETY: the live context and a key name of the running command (from a `Call` or a
    // `KeyName` created in it), `token` null or an argument of that command; the arguments
    // match the format (see the macro), and the `Decimal`s outlive the call.
    unsafe {
        let Some(replicate) = raw::RedisModule_Replicate else { return };
        if send_record!(replicate, ctx, key, token, mark, snapshot) != raw::REDISMODULE_OK as c_int {
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
            send_record!(emit, aof, key, std::ptr::null_mut(), mark, snapshot);
        }
    }
}
