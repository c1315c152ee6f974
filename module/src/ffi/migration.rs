//! Atomic slot migration's server events (see `migration.rs`): which server this is, the
//! subscription, and the slot ranges decoded from each server's event data.

use std::ffi::{c_char, c_int, c_void};
use std::ops::RangeInclusive;
use std::sync::OnceLock;

use redis_module::{raw, Context};

use super::{guard, log_warning, RawCtx, OK};
use crate::migration::{Export, Server};

/// The first Valkey major version with atomic slot migration.
const VALKEY_MAJOR: u32 = 9;
/// Redis 8.4.0 as `RedisModule_GetServerVersion` gives it (0x00MMmmpp).
const REDIS_8_4: c_int = 0x0008_0400;
/// Valkey's bit for `SetModuleOptions` (`VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION`,
/// absent from the crate's header): Valkey refuses `CLUSTER MIGRATESLOTS` cluster-wide while
/// any loaded module lacks it. Redis asks nothing of modules and gives the bit no meaning.
pub const HANDLE_ATOMIC_SLOT_MIGRATION: c_int = 1 << 5;
/// Valkey node ids (40 hex digits) and Redis's, as the event structures hold them.
const NODE_ID_LEN: usize = 40;

/// Valkey's `ValkeyModuleAtomicSlotMigrationInfoV1` (fields this module does not read are
/// there for the layout).
#[repr(C)]
#[allow(dead_code)]
struct ValkeyInfo {
    version: u64,
    job_name: [c_char; NODE_ID_LEN + 1],
    slot_ranges: *const ValkeyRange,
    num_slot_ranges: u32,
}

#[repr(C)]
struct ValkeyRange {
    start: c_int,
    end: c_int,
}

/// Redis's `RedisModuleClusterSlotMigrationInfoV1` (as above).
#[repr(C)]
#[allow(dead_code)]
struct RedisInfo {
    version: u64,
    source_node_id: [c_char; NODE_ID_LEN + 1],
    destination_node_id: [c_char; NODE_ID_LEN + 1],
    task_id: *const c_char,
    slots: *const RedisRanges,
}

/// Redis's `RedisModuleSlotRangeArray`: a count, then that many ranges.
#[repr(C)]
struct RedisRanges {
    num_ranges: i32,
    ranges: [RedisRange; 0],
}

#[repr(C)]
struct RedisRange {
    start: u16,
    end: u16,
}

/// The server whose atomic slot migration events this module follows, `None` where there is
/// none (Redis before 8.4, Valkey before 9). Read once, at load.
pub fn server(ctx: &Context) -> Option<Server> {
    if let Some(major) = valkey_major(ctx) {
        return (major >= VALKEY_MAJOR).then_some(Server::Valkey);
    }
    // SAFETY: the API pointers are filled by RedisModule_Init and only read afterwards.
    let version = unsafe { raw::RedisModule_GetServerVersion.map_or(0, |v| v()) };
    (version >= REDIS_8_4).then_some(Server::Redis)
}

/// The major version in `INFO server`'s `valkey_version`; `None` on Redis, which has no such
/// field, or where the server's info cannot be read.
fn valkey_major(ctx: &Context) -> Option<u32> {
    // SAFETY: the API pointers are filled by RedisModule_Init and only read afterwards.
    let (get, field, free) = unsafe {
        (
            raw::RedisModule_GetServerInfo?,
            raw::RedisModule_ServerInfoGetField?,
            raw::RedisModule_FreeServerInfo?,
        )
    };
    // SAFETY: called from OnLoad with the module's context. The field's string is a new one
    // (freed when `text` drops) and read before that; the info is freed last.
    unsafe {
        let info = get(ctx.ctx, c"server".as_ptr());
        if info.is_null() {
            return None;
        }
        let value = field(ctx.ctx, info, c"valkey_version".as_ptr());
        let major = (!value.is_null()).then(|| {
            let text = redis_module::RedisString::from_redis_module_string(ctx.ctx, value);
            text.try_as_str().ok().and_then(|v| v.split('.').next()?.parse().ok())
        });
        free(ctx.ctx, info);
        major.flatten()
    }
}

/// What runs on the exporting side's events, with the slot ranges they name.
pub type ExportJob = fn(Export, &[RangeInclusive<usize>]);

static ON_EXPORT: OnceLock<(Server, ExportJob)> = OnceLock::new();

/// Subscribes `job` to `server`'s atomic slot migration events.
pub fn on_export(ctx: &Context, server: Server, job: ExportJob) {
    let _ = ON_EXPORT.set((server, job));
    let event = raw::RedisModuleEvent { id: server.event(), dataver: 1 };
    // SAFETY: called from OnLoad with the module's context; the callback matches the signature.
    unsafe {
        if let Some(subscribe) = raw::RedisModule_SubscribeToServerEvent {
            if subscribe(ctx.ctx, event, Some(migration_event)) != OK {
                log_warning("fencedlock: cannot subscribe to atomic slot migration events");
            }
        }
    }
}

/// # Safety
/// Called by the server for the event `on_export` subscribed to, with that server's data.
unsafe extern "C" fn migration_event(
    _ctx: RawCtx,
    _eid: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    let Some(&(server, job)) = ON_EXPORT.get() else { return };
    let Some(export) = server.export(subevent) else { return };
    // SAFETY: the data of this event is the server's info structure, version 1.
    let ranges = unsafe { ranges(server, data) };
    guard("slot migration", (), || job(export, &ranges));
}

/// The slot ranges of an event's data (empty for data that is missing).
///
/// # Safety
/// `data` is `server`'s migration info structure, or null.
unsafe fn ranges(server: Server, data: *const c_void) -> Vec<RangeInclusive<usize>> {
    let range = |start: i64, end: i64| {
        let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end)) else { return None };
        (start <= end).then_some(start..=end)
    };
    match server {
        // SAFETY: the caller's contract; the array holds as many ranges as the count says.
        Server::Valkey => unsafe {
            let Some(info) = data.cast::<ValkeyInfo>().as_ref() else { return Vec::new() };
            if info.slot_ranges.is_null() {
                return Vec::new();
            }
            let all = std::slice::from_raw_parts(info.slot_ranges, info.num_slot_ranges as usize);
            all.iter().filter_map(|r| range(r.start.into(), r.end.into())).collect()
        },
        // SAFETY: as above.
        Server::Redis => unsafe {
            let Some(info) = data.cast::<RedisInfo>().as_ref() else { return Vec::new() };
            let slots = info.slots;
            if slots.is_null() {
                return Vec::new();
            }
            // The ranges follow the count (a flexible array member): reached through the raw
            // pointer, whose allocation holds them, not through a reference to the header.
            let count = usize::try_from((*slots).num_ranges).unwrap_or(0);
            let first = std::ptr::addr_of!((*slots).ranges).cast::<RedisRange>();
            let all = std::slice::from_raw_parts(first, count);
            all.iter().filter_map(|r| range(r.start.into(), r.end.into())).collect()
        },
    }
}
