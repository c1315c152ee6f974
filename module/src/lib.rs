//! fencedlock: a Redis / Valkey module for leases whose fencing tokens never repeat.
//!
//! `lease`, `fence` and `args` are the pure core (unit-tested without a server); the rest is
//! the FFI glue that parses, opens keys, replies, persists and replicates.

#![cfg_attr(test, allow(dead_code))] // the FFI glue is only reached from `redis_module!`, not built in tests

pub mod args;
pub mod error;
pub mod fence;
pub mod lease;

mod clock;
mod commands;
mod datatype;
mod epoch;
mod ffi;
mod key;
mod replication;
mod state;
mod stats;

#[cfg(not(test))]
mod module {
    use std::ffi::c_int;

    use redis_module::configuration::{register_i64_configuration, ConfigurationFlags};
    use redis_module::{raw, Context, InfoContext, RedisResult, RedisString, Status};

    use crate::datatype::LOCK_TYPE;
    use crate::{clock, commands, ffi, state, stats};

    macro_rules! command {
        ($extern_fn:ident => $command:path) => {
            extern "C" fn $extern_fn(
                ctx: *mut raw::RedisModuleCtx,
                argv: *mut *mut raw::RedisModuleString,
                argc: c_int,
            ) -> c_int {
                ffi::run(ctx, argv, argc, $command)
            }
        };
    }

    command!(acquire => commands::acquire);
    command!(renew => commands::renew);
    command!(release => commands::release);
    command!(raise => commands::raise);
    command!(cad => commands::cad);
    command!(status => commands::status);
    command!(apply => commands::apply);

    type Handler = extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

    /// Flags follow DESIGN.md: only ACQUIRE is `deny-oom`, so leases can always be renewed and
    /// freed under memory pressure. APPLY stays out of MONITOR and SLOWLOG: it carries tokens.
    const COMMANDS: [(&str, Handler, &str); 7] = [
        ("FENCEDLOCK.ACQUIRE", acquire, "write deny-oom fast"),
        ("FENCEDLOCK.RENEW", renew, "write fast"),
        ("FENCEDLOCK.RELEASE", release, "write fast"),
        ("FENCEDLOCK.RAISE", raise, "write fast"),
        ("FENCEDLOCK.CAD", cad, "write fast"),
        ("FENCEDLOCK.STATUS", status, "readonly fast"),
        ("FENCEDLOCK.APPLY", apply, "write deny-script no-monitor no-slowlog"),
    ];

    fn init(ctx: &Context, _args: &[RedisString]) -> Status {
        ctx.set_module_options(raw::ModuleOptions::HANDLE_IO_ERRORS);
        let category = ffi::add_acl_category(ctx.ctx, c"fencedlock").then_some(c"fencedlock");
        for (name, handler, flags) in COMMANDS {
            if let Err(e) = ffi::create_command(ctx.ctx, name, Some(handler), flags, category) {
                ctx.log_warning(&format!("fencedlock: {e}"));
                return Status::Err;
            }
        }
        // Registered here rather than through `redis_module!`, whose config arm needs a string
        // config as well. LoadConfigs applies values from redis.conf or the command line.
        for (name, value, default) in [
            ("max-ttl-ms", &state::MAX_TTL_MS, state::DEFAULT_MAX_TTL_MS),
            ("restart-grace-ms", &state::RESTART_GRACE_MS, 0),
        ] {
            let min = i64::from(name == "max-ttl-ms");
            register_i64_configuration(ctx, name, value, default, min, state::MAX_MAX_TTL_MS, ConfigurationFlags::DEFAULT, None);
        }
        // SAFETY: called from OnLoad with the module's context, after registering the configs.
        if let Some(load_configs) = unsafe { raw::RedisModule_LoadConfigs } {
            if unsafe { load_configs(ctx.ctx) } != raw::REDISMODULE_OK as c_int {
                ctx.log_warning("fencedlock: invalid fencedlock.* configuration");
                return Status::Err;
            }
        }
        state::start_grace(clock::now());
        Status::Ok
    }

    fn info(ctx: &InfoContext, _for_crash_report: bool) {
        stats::add_info_section(ctx);
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
