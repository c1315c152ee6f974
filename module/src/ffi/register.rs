//! Module load: the command table's C entry points, module options and the config load.

use std::ffi::c_int;

use fencedlock_protocol::command::Command;
use redis_module::{raw, Context};

/// One registered command: its shape (from the protocol crate, which also gives its arity
/// and docs), its flags, and the C entry point Redis calls.
///
/// The `redis-module` crate's command macros are not used: they set ACL categories through
/// `RedisModule_SetCommandACLCategories`, which Redis 7.0 lacks (the module would not
/// load there), and their handlers have no panic guard (a panic would abort Redis).
pub struct Registration {
    pub spec: Command,
    /// Only ACQUIRE is `deny-oom`, so leases can always be renewed and freed under memory
    /// pressure. APPLY and APPLYSEM stay out of MONITOR and SLOWLOG: they carry tokens.
    pub flags: &'static str,
    pub entry: raw::RedisModuleCmdFunc,
}

/// The command table: `spec => handler, "flags";` per command. Each entry's C function runs its
/// handler through `ffi::run`, which checks the arity against `spec` and guards against panics.
macro_rules! command_table {
    ($($spec:expr => $handler:expr, $flags:literal;)*) => {
        [$({
            extern "C" fn entry(
                ctx: *mut redis_module::raw::RedisModuleCtx,
                argv: *mut *mut redis_module::raw::RedisModuleString,
                argc: std::ffi::c_int,
            ) -> std::ffi::c_int {
                const HANDLER: $crate::ffi::Handler = $handler;
                // SAFETY: Redis calls this with the context and arguments of this command.
                unsafe { $crate::ffi::run(ctx, argv, argc, &$spec, HANDLER) }
            }
            $crate::ffi::register::Registration { spec: $spec, flags: $flags, entry: Some(entry) }
        },)*]
    };
}
pub(crate) use command_table;

/// Lets the type's load callbacks see truncated input as an error instead of aborting.
pub fn handle_io_errors(ctx: &Context) {
    ctx.set_module_options(raw::ModuleOptions::HANDLE_IO_ERRORS);
}

/// Applies the `fencedlock.*` values from redis.conf or the command line, after the configs
/// were registered. Servers without `RedisModule_LoadConfigs` apply them as they register.
pub fn load_configs(ctx: &Context) -> Result<(), String> {
    // SAFETY: called from OnLoad with the module's context, after registering the configs.
    if let Some(load_configs) = unsafe { raw::RedisModule_LoadConfigs } {
        // SAFETY: as above.
        if unsafe { load_configs(ctx.ctx) } != raw::REDISMODULE_OK as c_int {
            return Err("invalid fencedlock.* configuration".into());
        }
    }
    Ok(())
}
