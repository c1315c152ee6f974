//! Module load: the command table's C entry points, what Redis is told about each command
//! (flags, key access, ACL category, docs), module options and the config load.

use std::ffi::{c_int, CStr, CString};

use fencedlock_protocol::{Arg, ArgKind, Command};
use redis_module::{raw, Context};

use super::{log_warning, OK};
use crate::migration::Server;

/// One registered command: its shape (from the protocol crate, which also gives its arity
/// and docs), its flags, its key access, and the C entry point Redis calls.
///
/// The `redis-module` crate's command macros are not used: they set ACL categories through
/// `RedisModule_SetCommandACLCategories`, which Redis 7.0 lacks (the module would not
/// load there), and their handlers have no panic guard (a panic would abort Redis).
pub struct Registration {
    pub spec: Command,
    /// Only ACQUIRE is `deny-oom`, so leases can always be renewed and freed under memory
    /// pressure. APPLY and APPLYSEM stay out of MONITOR and SLOWLOG: they carry tokens.
    pub flags: &'static str,
    pub key: KeyAccess,
    pub entry: raw::RedisModuleCmdFunc,
}

/// What a command does with its key, in the server's words (`COMMAND GETKEYSANDFLAGS` shows
/// them): exactly one of `RO`, `RW`, `OW`, `RM` for the key itself; `ACCESS` if the key's data
/// is replied or copied; at most one of `INSERT`, `UPDATE`, `DELETE` for how that data changes.
/// ACL key selectors check the last two: `ACCESS` needs `%R~`, a change needs `%W~`. Without
/// it Redis assumes `RW ACCESS UPDATE`, so a read-only user could not even run `STATUS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyAccess(u64);

impl KeyAccess {
    pub const RO: Self = Self(raw::REDISMODULE_CMD_KEY_RO as u64);
    pub const RW: Self = Self(raw::REDISMODULE_CMD_KEY_RW as u64);
    pub const OW: Self = Self(raw::REDISMODULE_CMD_KEY_OW as u64);
    pub const RM: Self = Self(raw::REDISMODULE_CMD_KEY_RM as u64);
    pub const ACCESS: Self = Self(raw::REDISMODULE_CMD_KEY_ACCESS as u64);
    pub const INSERT: Self = Self(raw::REDISMODULE_CMD_KEY_INSERT as u64);
    pub const UPDATE: Self = Self(raw::REDISMODULE_CMD_KEY_UPDATE as u64);
    pub const DELETE: Self = Self(raw::REDISMODULE_CMD_KEY_DELETE as u64);

    /// Each flag and its name, for messages.
    const NAMES: [(Self, &'static str); 8] = [
        (Self::RO, "RO"),
        (Self::RW, "RW"),
        (Self::OW, "OW"),
        (Self::RM, "RM"),
        (Self::ACCESS, "ACCESS"),
        (Self::INSERT, "INSERT"),
        (Self::UPDATE, "UPDATE"),
        (Self::DELETE, "DELETE"),
    ];

    /// All of `flags` at once.
    pub const fn all(flags: &[Self]) -> Self {
        let (mut bits, mut i) = (0, 0);
        while i < flags.len() {
            bits |= flags[i].0;
            i += 1;
        }
        Self(bits)
    }
}

impl std::fmt::Display for KeyAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = Self::NAMES.iter().filter(|(flag, _)| self.0 & flag.0 != 0).map(|(_, name)| *name);
        f.write_str(&names.collect::<Vec<_>>().join(" "))
    }
}

/// The command table: `spec => handler, "flags", KEY | ACCESS;` per command. Each entry's C
/// function runs its handler through `ffi::run`, which checks the arity against `spec` and
/// guards against panics.
macro_rules! command_table {
    ($($spec:expr => $handler:expr, $flags:literal, $($key:ident)|+;)*) => {
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
            $crate::ffi::register::Registration {
                spec: $spec,
                flags: $flags,
                key: $crate::ffi::register::KeyAccess::all(&[$($crate::ffi::register::KeyAccess::$key),+]),
                entry: Some(entry),
            }
        },)*]
    };
}
pub(crate) use command_table;

/// Lets the type's load callbacks see truncated input as an error instead of aborting, and
/// on Valkey 9+ declares that the module handles atomic slot migration (see `migration.rs`).
pub fn set_module_options(ctx: &Context, migration: Option<Server>) {
    let mut options = raw::ModuleOptions::HANDLE_IO_ERRORS.bits();
    if migration == Some(Server::Valkey) {
        options |= super::migration::HANDLE_ATOMIC_SLOT_MIGRATION;
    }
    // SAFETY: called from OnLoad with the module's context; the pointer is filled by Init.
    if let Some(set) = unsafe { raw::RedisModule_SetModuleOptions } {
        // SAFETY: as above.
        unsafe { set(ctx.ctx, options) };
    }
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

/// Registers a command with its single key at position 1 (so Cluster routing, ACL key patterns
/// and `COMMAND GETKEYS` work), puts it in `acl_category` where supported, and declares its key
/// access and documents it (see [`set_command_info`]).
pub fn create_command(
    ctx: &Context,
    command: &Registration,
    acl_category: Option<&CStr>,
) -> Result<(), String> {
    let Registration { spec, flags, key, entry: handler } = command;
    let c_flags = CString::new(*flags).map_err(|e| e.to_string())?;
    let name = spec.name;
    // SAFETY: called from OnLoad with the module's context; the strings outlive the calls.
    unsafe {
        let create = raw::RedisModule_CreateCommand.ok_or("no RedisModule_CreateCommand")?;
        // A command that counts its keys declares none here: its key spec (below) and the
        // getkeys API (its handler) find them.
        let first_key = if spec.counts_keys() { 0 } else { 1 };
        if create(ctx.ctx, spec.c_name.as_ptr(), *handler, c_flags.as_ptr(), first_key, first_key, first_key)
            != OK
        {
            return Err(format!("cannot create command {name} with flags '{flags}'"));
        }
        let command = raw::RedisModule_GetCommand
            .map_or(std::ptr::null_mut(), |get| get(ctx.ctx, spec.c_name.as_ptr()));
        if command.is_null() {
            return Err(format!("cannot find command {name} after creating it"));
        }
        if let (Some(category), Some(set)) = (acl_category, raw::RedisModule_SetCommandACLCategories) {
            if set(command, category.as_ptr()) != OK {
                log_warning(&format!("fencedlock: cannot set ACL category of {name}"));
            }
        }
        set_command_info(command, spec, *key).map_err(|e| format!("{name}: {e}"))
    }
}

/// Adds an ACL category (Redis 7.4+, Valkey 8+), so `+@fencedlock` grants every command at
/// once. Returns whether the server supports it.
pub fn add_acl_category(ctx: &Context, name: &CStr) -> bool {
    // SAFETY: called from OnLoad with the module's context.
    unsafe { raw::RedisModule_AddACLCategory.is_some_and(|add| add(ctx.ctx, name.as_ptr()) == OK) }
}

/// Declares a command's key access (replacing Redis's default `RW ACCESS UPDATE`), documents it
/// for `COMMAND DOCS` / `COMMAND INFO`, and lets Redis check its arity before calling us.
///
/// Servers before Redis 7.0 have no `RedisModule_SetCommandInfo` and no key specs: there it is
/// skipped, and ACL key patterns see the key from `CreateCommand`'s first/last/step. Where the
/// server has it and refuses the info, the module does not load: the info is fixed at build
/// time, so a refusal is a bug of ours, and loading anyway would leave every ACL read or
/// write selector judging the commands by the wrong access.
///
/// # Safety
/// `command` is a command this module just created.
unsafe fn set_command_info(
    command: *mut raw::RedisModuleCommand,
    spec: &Command,
    key: KeyAccess,
) -> Result<(), String> {
    // SAFETY: the API pointers are filled by RedisModule_Init and only read afterwards.
    let Some(set) = (unsafe { raw::RedisModule_SetCommandInfo }) else { return Ok(()) };
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    // (argument, its option word if it is an option's value, optional); `numkeys key [key
    // ...]` is documented as Redis documents EVAL's: the count, then the key, repeated.
    let required = spec.args.iter().flat_map(|a| match a.kind {
        ArgKind::Keys => vec![(&NUMKEYS, None, false), (a, None, false)],
        _ => vec![(a, None, false)],
    });
    let optional = spec.optional.iter().flat_map(|group| group.iter()).map(|a| (a, None, true));
    let options = spec.options.iter().map(|o| (&o.value, Some(o.word), true));
    let args: Vec<_> = required.chain(optional).chain(options).collect();
    let names: Vec<CString> = args.iter().filter_map(|(a, _, _)| CString::new(a.name).ok()).collect();
    let words: Vec<Option<CString>> =
        args.iter().map(|(_, w, _)| w.and_then(|w| CString::new(w).ok())).collect();
    if names.len() != args.len() || words.iter().flatten().count() != spec.options.len() {
        return Err("an argument name or option word holds a NUL byte".into());
    }
    let mut docs: Vec<raw::RedisModuleCommandArg> = args
        .iter()
        .zip(&names)
        .zip(&words)
        .map(|(((arg, _, optional), name), word)| {
            // SAFETY: the bindgen struct is plain data; all-zero is its C "unset" value.
            let mut doc: raw::RedisModuleCommandArg = unsafe { std::mem::zeroed() };
            doc.name = name.as_ptr();
            (doc.type_, doc.key_spec_index) = match arg.kind {
                ArgKind::Key | ArgKind::Keys => (raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY, 0),
                ArgKind::Text => (raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING, -1),
                ArgKind::Integer => (raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER, -1),
                ArgKind::Flag => (raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN, -1),
            };
            // An option is documented as Redis documents its own (`SET … PX milliseconds`):
            // its value, introduced by the word; a flag (`SET … NX`) is the word alone.
            if let Some(word) = word {
                doc.token = word.as_ptr();
            }
            if *optional {
                doc.flags = raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int;
            }
            if arg.kind == ArgKind::Keys {
                doc.flags = raw::REDISMODULE_CMD_ARG_MULTIPLE as c_int;
            }
            doc
        })
        .collect();
    // SAFETY: as above; the zeroed entry terminates the argument array.
    docs.push(unsafe { std::mem::zeroed() });
    let summary = CString::new(spec.summary).map_err(|_| "its summary holds a NUL byte")?;
    let key_specs = [key_spec(key, spec.counts_keys()), key_spec_end()];
    // SAFETY: as above.
    let mut info: raw::RedisModuleCommandInfo = unsafe { std::mem::zeroed() };
    info.version = &version;
    info.summary = summary.as_ptr();
    info.complexity =
        if spec.counts_keys() { c"O(N) where N is the number of keys" } else { c"O(1)" }.as_ptr();
    info.since = c"0.1.0".as_ptr();
    info.arity = spec.arity();
    info.args = docs.as_mut_ptr();
    info.key_specs = key_specs.as_ptr().cast_mut();
    // SAFETY: `command` is ours (the caller's promise); Redis copies the info during the call and
    // every pointer in it outlives the call.
    if unsafe { set(command, &info) } != OK {
        return Err(format!(
            "the server refused its key access '{key}' or its docs (the log line above says why)"
        ));
    }
    Ok(())
}

/// The one key, argument 1, with `access`; or, for a command that counts its keys, the keys
/// after their count in argument 1 (as EVAL's), each with `access`.
fn key_spec(access: KeyAccess, counted: bool) -> raw::RedisModuleCommandKeySpec {
    // SAFETY: the bindgen struct is plain data; all-zero is its C "unset" value.
    let mut spec: raw::RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
    spec.flags = access.0;
    spec.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    spec.bs.index = raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 1 };
    if counted {
        spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
        spec.fk.keynum = raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_2 {
            keynumidx: 0,
            firstkey: 1,
            keystep: 1,
        };
    } else {
        spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
        spec.fk.range =
            raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 { lastkey: 0, keystep: 1, limit: 0 };
    }
    spec
}

/// The count before a command's keys, in its docs.
const NUMKEYS: Arg = Arg { name: "numkeys", kind: ArgKind::Integer };

/// The entry that ends a key spec array: no begin search type.
fn key_spec_end() -> raw::RedisModuleCommandKeySpec {
    // SAFETY: as above; Redis stops at the first spec whose `begin_search_type` is 0.
    unsafe { std::mem::zeroed() }
}
