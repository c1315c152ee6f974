//! fencedlock: a Redis / Valkey module for leases whose fencing tokens never repeat.
//!
//! Owns the lock state on the server: `lease`, `fence` and `args` are the pure core (decisions
//! as functions of state, the high-water mark and an injected clock, unit-tested without a
//! server); the rest is the FFI glue that parses, opens keys, replies, persists and replicates.
//! The wire contract (command shapes, limits, replies, errors) is the `fencedlock-protocol`
//! crate's, not this one's. Must not: panic across the FFI boundary (every entry point runs
//! behind `ffi::run` or `ffi::guard`), block the event loop, or re-decide on a replica.

#![cfg_attr(test, allow(dead_code))] // the FFI glue is only reached from `redis_module!`, not built in tests

mod args;
mod blocking;
mod clock;
mod commands;
mod datatype;
mod epoch;
mod error;
mod fence;
mod ffi;
mod floor;
mod histogram;
mod holder;
mod key;
mod lease;
mod reclaim;
mod replication;
mod semaphore;
mod slot;
mod state;
mod stats;
mod sweeper;
mod waiting;

#[cfg(not(test))]
mod module {
    use std::ffi::c_int;

    use fencedlock_protocol::command::{self, Command};
    use fencedlock_protocol::config;
    use redis_module::configuration::{register_i64_configuration, ConfigurationFlags};
    // `RedisResult` is used by the code `redis_module!` expands to.
    use redis_module::{raw, Context, InfoContext, RedisResult, RedisString, Status};

    use crate::datatype::LOCK_TYPE;
    use crate::ffi::{self, Handler};
    use crate::{blocking, clock, commands, state, stats, sweeper};

    /// One registered command: its shape (from the protocol crate, which also gives its arity
    /// and docs), its flags, its implementation, and the C entry point Redis calls.
    ///
    /// The `redis-module` crate's command macros are not used: they set ACL categories through
    /// `RedisModule_SetCommandACLCategories`, which Redis 7.0 lacks (the module would not
    /// load there), and their handlers have no panic guard (a panic would abort Redis).
    struct Registration {
        spec: Command,
        /// Only ACQUIRE is `deny-oom`, so leases can always be renewed and freed under memory
        /// pressure. APPLY and APPLYSEM stay out of MONITOR and SLOWLOG: they carry tokens.
        flags: &'static str,
        entry: raw::RedisModuleCmdFunc,
    }

    /// The command table: each entry's C function runs its handler through `ffi::run`, which
    /// checks the arity against `spec` and guards against panics.
    macro_rules! commands {
        ($($spec:expr => $handler:expr, $flags:literal;)*) => {
            [$({
                extern "C" fn entry(
                    ctx: *mut raw::RedisModuleCtx,
                    argv: *mut *mut raw::RedisModuleString,
                    argc: c_int,
                ) -> c_int {
                    const HANDLER: Handler = $handler;
                    // SAFETY: Redis calls this with the context and arguments of this command.
                    unsafe { ffi::run(ctx, argv, argc, &$spec, HANDLER) }
                }
                Registration { spec: $spec, flags: $flags, entry: Some(entry) }
            },)*]
        };
    }

    const COMMANDS: [Registration; 8] = commands! {
        command::ACQUIRE => commands::acquire, "write deny-oom fast";
        command::RENEW => commands::renew, "write fast";
        command::RELEASE => commands::release, "write fast";
        command::RAISE => commands::raise, "write fast";
        command::CAD => commands::cad, "write fast";
        command::STATUS => commands::status, "readonly fast";
        command::APPLY => commands::apply, "write deny-script no-monitor no-slowlog";
        command::APPLYSEM => commands::apply_semaphore, "write deny-script no-monitor no-slowlog";
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
        ctx.set_module_options(raw::ModuleOptions::HANDLE_IO_ERRORS);
        ffi::blocked::init(ctx);
        let category = ffi::add_acl_category(ctx, command::ACL_CATEGORY_C).then_some(command::ACL_CATEGORY_C);
        for c in COMMANDS {
            ffi::create_command(ctx, &c.spec, c.entry, c.flags, category)?;
        }
        // Registered here rather than through `redis_module!`, whose config arm needs a string
        // config as well. LoadConfigs applies values from redis.conf or the command line.
        for (config, value, default, min) in [
            (config::MAX_TTL_MS, &state::MAX_TTL_MS, state::CONFIG_DEFAULT_MAX_TTL_MS, 1),
            (config::RESTART_GRACE_MS, &state::RESTART_GRACE_MS, 0, 0),
            (config::RECLAIM_AFTER_MS, &state::RECLAIM_AFTER_MS, state::CONFIG_DEFAULT_RECLAIM_AFTER_MS, 0),
        ] {
            register_i64_configuration(
                ctx,
                config.name,
                value,
                default,
                min,
                state::CONFIG_MAX_MS,
                ConfigurationFlags::DEFAULT,
                None,
            );
        }
        // SAFETY: called from OnLoad with the module's context, after registering the configs.
        if let Some(load_configs) = unsafe { raw::RedisModule_LoadConfigs } {
            // SAFETY: as above.
            if unsafe { load_configs(ctx.ctx) } != raw::REDISMODULE_OK as c_int {
                return Err("invalid fencedlock.* configuration".into());
            }
        }
        state::start_grace(clock::now());
        ffi::every(ctx, sweeper::IDLE_DELAY_MS, sweeper::sweep);
        ffi::blocked::on_flush(ctx, blocking::flushed);
        Ok(())
    }

    fn info(ctx: &InfoContext, _for_crash_report: bool) {
        ffi::guard("info", (), || stats::add_info_section(ctx));
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
