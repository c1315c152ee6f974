//! fencedlock: a Redis / Valkey module for leases whose fencing tokens never repeat.
//!
//! Three layers, each importing only the ones below it:
//! - **Pure core** (decisions as functions of state, the high-water mark and an injected clock,
//!   unit-tested without a server): `lock/` (a key's value and every decision about it; one file
//!   per kind, the shared words in `lock::terms`, the travelling record in `lock::record`),
//!   `fence`, `reclaim`, `slot`, `waiting`, `histogram`, `error`.
//! - **Glue**, safe code: `server` (all server-wide state, one `SERVER`), `store` (the only code
//!   that opens, stores and deletes lock values, and files them for reclaim), `commands`,
//!   `blocking`, `sweeper`, `floor`, `epoch`, `counters` (a leaf), `info` (renders `INFO`).
//! - **FFI**, the only `unsafe` and the only calls into Redis's raw API: `ffi/`.
//!
//! The wire contract (command shapes, limits, replies, errors) is the `fencedlock-protocol`
//! crate's, not this one's. Must not: panic across the FFI boundary (every entry point runs
//! behind `ffi::run` or `ffi::guard`), block the event loop, or re-decide on a replica.

#![cfg_attr(test, allow(dead_code))] // the FFI glue is only reached from `redis_module!`, not built in tests

mod blocking;
mod commands;
mod counters;
mod epoch;
mod error;
mod fence;
mod ffi;
mod floor;
mod histogram;
mod info;
mod lock;
mod migration;
mod reclaim;
mod server;
mod slot;
mod store;
mod sweeper;
mod waiting;

#[cfg(not(test))]
mod module {
    use fencedlock_protocol::command;
    use fencedlock_protocol::config;
    use redis_module::configuration::{register_i64_configuration, ConfigurationFlags};
    // `RedisResult` is used by the code `redis_module!` expands to.
    use redis_module::{Context, InfoContext, RedisResult, RedisString, Status};

    use crate::ffi::datatype::{self, Hooks, LOCK_TYPE};
    use crate::ffi::register::{self, command_table, Registration};
    use crate::ffi::{self, clock};
    use crate::server::{self, SERVER};
    use crate::{blocking, commands, info, sweeper};

    // Above each command: why its key access (`KeyAccess`, the last column) is what it is.
    const COMMANDS: [Registration; 9] = command_table! {
        // Replies the fence. Creates the key or takes over an expired lease: an update, not INSERT.
        command::ACQUIRE => commands::acquire, "write deny-oom fast", RW | ACCESS | UPDATE;
        // ACQUIRE on each of its keys, all or none; O(keys), so not `fast`. Cluster routing
        // finds module keys by the legacy first/last/step or the getkeys API only (not key
        // specs): without `getkeys-api` it would see no key, route nothing, and never refuse
        // keys of several slots.
        command::ACQUIREALL => commands::acquire_all, "write deny-oom getkeys-api", RW | ACCESS | UPDATE;
        // Replies only 1 or 0, as LREM its count: write access alone.
        command::RENEW => commands::renew, "write fast", RW | UPDATE;
        // Ends the lease (or hands it to a waiter); the key and its fence stay until reclaim.
        command::RELEASE => commands::release, "write fast", RW | UPDATE;
        // Replies the fence it raised; nil, and no key made, where there is none.
        command::RAISE => commands::raise, "write fast", RW | ACCESS | UPDATE;
        // Deletes the whole key or nothing and replies 1 or 0, as Valkey's DELIFEQ declares.
        command::CAD => commands::cad, "write fast", RM | DELETE;
        // Replies the key's state, changes nothing: a `%R~` user may watch locks.
        command::STATUS => commands::status, "readonly fast", RO | ACCESS;
        // Both replace the key's whole value with the primary's record, as RESTORE does.
        command::APPLY => commands::apply, "write deny-script no-monitor no-slowlog", OW | UPDATE;
        command::APPLYSEM => commands::apply_semaphore, "write deny-script no-monitor no-slowlog", OW | UPDATE;
    };

    fn init(ctx: &Context, _args: &[RedisString]) -> Status {
        ffi::guard("init", Status::Err, || match register(ctx) {
            Ok(()) => Status::Ok,
            Err(e) => {
                ctx.log_warning(&format!("fencedlock: {e}"));
                Status::Err
            }
        })
    }

    fn register(ctx: &Context) -> Result<(), String> {
        let migration = ffi::migration::server(ctx);
        register::set_module_options(ctx, migration);
        ffi::blocked::init(ctx);
        datatype::attach(Hooks {
            high_water: || SERVER.high_water(),
            observe: |fence| {
                SERVER.update_high_water(|mark| mark.observe(fence));
            },
            file: |lock, db, name| SERVER.file(lock, db, name),
            any_waiters: || SERVER.waiters() > 0,
            unlinked: blocking::unlinked,
        });
        let category =
            register::add_acl_category(ctx, command::ACL_CATEGORY_C).then_some(command::ACL_CATEGORY_C);
        for c in &COMMANDS {
            register::create_command(ctx, c, category)?;
        }
        // Registered here rather than through `redis_module!`, whose config arm needs a string
        // config as well. LoadConfigs applies values from redis.conf or the command line.
        for (config, value, default, min) in [
            (config::MAX_TTL_MS, &SERVER.max_ttl_ms, server::CONFIG_DEFAULT_MAX_TTL_MS, 1),
            (config::RESTART_GRACE_MS, &SERVER.restart_grace_ms, 0, 0),
            (config::RECLAIM_AFTER_MS, &SERVER.reclaim_after_ms, server::CONFIG_DEFAULT_RECLAIM_AFTER_MS, 0),
        ] {
            register_i64_configuration(
                ctx,
                config.name,
                value,
                default,
                min,
                server::CONFIG_MAX_MS,
                ConfigurationFlags::DEFAULT,
                None,
            );
        }
        register::load_configs(ctx)?;
        SERVER.start_grace(clock::now());
        ffi::every(ctx, sweeper::IDLE_DELAY_MS, sweeper::sweep);
        ffi::blocked::on_flush(ctx, blocking::flushed);
        if let Some(server) = migration {
            ffi::migration::on_export(ctx, server, blocking::exporting);
        }
        Ok(())
    }

    fn info(ctx: &InfoContext, _for_crash_report: bool) {
        ffi::guard("info", (), || info::render(&ffi::info::Section::begin(ctx)));
    }

    redis_module::redis_module! {
        name: "fencedlock",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [LOCK_TYPE],
        init: init,
        info: info,
    }
}
