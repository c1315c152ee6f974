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
    use std::ffi::{c_int, CStr};

    use redis_module::configuration::{register_i64_configuration, ConfigurationFlags};
    use redis_module::{raw, Context, InfoContext, RedisResult, RedisString, Status};

    use crate::datatype::LOCK_TYPE;
    use crate::ffi::Arg;
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

    struct Command {
        name: &'static str,
        handler: Handler,
        /// Flags follow DESIGN.md: only ACQUIRE is `deny-oom`, so leases can always be renewed
        /// and freed under memory pressure. APPLY stays out of MONITOR and SLOWLOG: it carries
        /// tokens.
        flags: &'static str,
        arity: c_int,
        summary: &'static CStr,
        args: &'static [Arg],
    }

    const KEY: Arg = Arg::Key(c"key");
    const TOKEN: Arg = Arg::Text(c"token");
    const TTL: Arg = Arg::Integer(c"ttl_ms");

    const COMMANDS: [Command; 7] = [
        Command {
            name: "FENCEDLOCK.ACQUIRE",
            handler: acquire,
            flags: "write deny-oom fast",
            arity: 4,
            summary:
                c"Takes the lease on key for token; replies its fence, or nil while another token holds it",
            args: &[KEY, TOKEN, TTL],
        },
        Command {
            name: "FENCEDLOCK.RENEW",
            handler: renew,
            flags: "write fast",
            arity: 4,
            summary: c"Extends the caller's unexpired lease to ttl_ms from now; 1 or 0",
            args: &[KEY, TOKEN, TTL],
        },
        Command {
            name: "FENCEDLOCK.RELEASE",
            handler: release,
            flags: "write fast",
            arity: 3,
            summary: c"Ends the caller's unexpired lease, keeping the fence; 1 or 0",
            args: &[KEY, TOKEN],
        },
        Command {
            name: "FENCEDLOCK.RAISE",
            handler: raise,
            flags: "write fast",
            arity: 4,
            summary: c"Raises the holder's fence to at least fence (fenced Redlock); the fence, or nil",
            args: &[KEY, TOKEN, Arg::Integer(c"fence")],
        },
        Command {
            name: "FENCEDLOCK.CAD",
            handler: cad,
            flags: "write fast",
            arity: 3,
            summary: c"Deletes a string key if it holds value; 1 or 0",
            args: &[KEY, Arg::Text(c"value")],
        },
        Command {
            name: "FENCEDLOCK.STATUS",
            handler: status,
            flags: "readonly fast",
            arity: 2,
            summary: c"Replies [fence, held, pttl_ms or -1] for a lock key, nil for a missing key",
            args: &[KEY],
        },
        Command {
            name: "FENCEDLOCK.APPLY",
            handler: apply,
            flags: "write deny-script no-monitor no-slowlog",
            arity: -4,
            summary: c"Internal: a lock state record from the replication link or the AOF",
            args: &[],
        },
    ];

    fn init(ctx: &Context, _args: &[RedisString]) -> Status {
        ctx.set_module_options(raw::ModuleOptions::HANDLE_IO_ERRORS);
        let category = ffi::add_acl_category(ctx.ctx, c"fencedlock").then_some(c"fencedlock");
        for c in COMMANDS {
            if let Err(e) = ffi::create_command(ctx.ctx, c.name, Some(c.handler), c.flags, category) {
                ctx.log_warning(&format!("fencedlock: {e}"));
                return Status::Err;
            }
            ffi::set_command_info(ctx.ctx, c.name, c.arity, c.summary, c.args);
        }
        // Registered here rather than through `redis_module!`, whose config arm needs a string
        // config as well. LoadConfigs applies values from redis.conf or the command line.
        for (name, value, default) in [
            ("max-ttl-ms", &state::MAX_TTL_MS, state::DEFAULT_MAX_TTL_MS),
            ("restart-grace-ms", &state::RESTART_GRACE_MS, 0),
        ] {
            let min = i64::from(name == "max-ttl-ms");
            register_i64_configuration(
                ctx,
                name,
                value,
                default,
                min,
                state::MAX_MAX_TTL_MS,
                ConfigurationFlags::DEFAULT,
                None,
            );
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
