//! The thin layer between Redis's C calling convention and our command functions: argument
//! access, replies, and the guard that keeps a Rust panic from unwinding into Redis (which would
//! abort the server and lose every lock).

use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::raw;

use crate::error::LockError;

pub type Ctx = *mut raw::RedisModuleCtx;
pub type RString = *mut raw::RedisModuleString;

/// One command invocation: its context and arguments (argument 0 is the command name).
pub struct Call<'a> {
    pub ctx: Ctx,
    argv: &'a [RString],
}

impl Call<'_> {
    pub fn argc(&self) -> usize {
        self.argv.len()
    }

    /// The raw argument, for passing a key name back to Redis. `i` must be below `argc()`.
    pub fn raw(&self, i: usize) -> RString {
        self.argv.get(i).copied().unwrap_or(std::ptr::null_mut())
    }

    /// The bytes of argument `i` (empty when out of range; handlers check arity first).
    pub fn bytes(&self, i: usize) -> &[u8] {
        bytes(self.raw(i))
    }
}

/// The bytes of a Redis string; they live as long as the string does.
pub fn bytes<'a>(s: RString) -> &'a [u8] {
    if s.is_null() {
        return &[];
    }
    let mut len = 0;
    // SAFETY: `s` is a live RedisModuleString handed to us by Redis for this call.
    unsafe {
        let Some(ptr_len) = raw::RedisModule_StringPtrLen else { return &[] };
        let ptr = ptr_len(s, &mut len);
        if ptr.is_null() {
            return &[];
        }
        std::slice::from_raw_parts(ptr.cast::<u8>(), len)
    }
}

/// What a command answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Int(i64),
    Nil,
    Ints(Vec<i64>),
    WrongArity,
}

pub fn int(v: u64) -> Reply {
    Reply::Int(i64::try_from(v).unwrap_or(i64::MAX))
}

fn send(ctx: Ctx, reply: Result<Reply, LockError>) -> c_int {
    // SAFETY: `ctx` is the live command context; the reply functions were filled by Init.
    unsafe {
        match reply {
            Ok(Reply::Int(v)) => raw::RedisModule_ReplyWithLongLong.map_or(0, |f| f(ctx, v)),
            Ok(Reply::Nil) => raw::RedisModule_ReplyWithNull.map_or(0, |f| f(ctx)),
            Ok(Reply::Ints(vs)) => {
                if let (Some(array), Some(ll)) =
                    (raw::RedisModule_ReplyWithArray, raw::RedisModule_ReplyWithLongLong)
                {
                    array(ctx, vs.len() as std::ffi::c_long);
                    for v in vs {
                        ll(ctx, v);
                    }
                }
                raw::REDISMODULE_OK as c_int
            }
            Ok(Reply::WrongArity) => raw::RedisModule_WrongArity.map_or(0, |f| f(ctx)),
            Err(e) => reply_error(ctx, &e.to_string()),
        }
    }
}

fn reply_error(ctx: Ctx, msg: &str) -> c_int {
    let msg = CString::new(msg.replace(['\r', '\n', '\0'], " ")).unwrap_or_default();
    // SAFETY: as in `send`.
    unsafe { raw::RedisModule_ReplyWithError.map_or(0, |f| f(ctx, msg.as_ptr())) }
}

/// Runs a command function for Redis. A panic becomes an error reply instead of an abort.
pub fn run(
    ctx: Ctx,
    argv: *mut RString,
    argc: c_int,
    command: fn(&Call) -> Result<Reply, LockError>,
) -> c_int {
    let argv = match usize::try_from(argc) {
        // SAFETY: Redis passes `argc` valid string pointers at `argv`.
        Ok(n) if !argv.is_null() => unsafe { std::slice::from_raw_parts(argv, n) },
        _ => &[],
    };
    let call = Call { ctx, argv };
    let reply = catch_unwind(AssertUnwindSafe(|| command(&call))).unwrap_or_else(|_| {
        log_warning(ctx, "fencedlock: a command panicked; it replied an error and changed nothing");
        Err(LockError::Internal)
    });
    send(ctx, reply)
}

/// Runs a persistence or server callback; a panic is logged and turned into `fallback`.
pub fn guard<T>(what: &str, fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        log_warning(std::ptr::null_mut(), &format!("fencedlock: {what} panicked"));
        fallback
    })
}

pub fn log_warning(ctx: Ctx, msg: &str) {
    log(ctx, c"warning", msg);
}

pub fn log_notice(ctx: Ctx, msg: &str) {
    log(ctx, c"notice", msg);
}

fn log(ctx: Ctx, level: &std::ffi::CStr, msg: &str) {
    let Ok(msg) = CString::new(msg) else { return };
    // SAFETY: RedisModule_Log accepts a null context and a "%s" format with one C string.
    unsafe {
        if let Some(log) = raw::RedisModule_Log {
            log(ctx, level.as_ptr(), c"%s".as_ptr(), msg.as_ptr());
        }
    }
}

/// Registers one command with its single key at position 1 (so Cluster routing, ACL key patterns
/// and `COMMAND GETKEYS` work), and puts it in the `fencedlock` ACL category where supported.
pub fn create_command(
    ctx: Ctx,
    name: &str,
    handler: raw::RedisModuleCmdFunc,
    flags: &str,
    acl_category: Option<&std::ffi::CStr>,
) -> Result<(), String> {
    let c_name = CString::new(name).map_err(|e| e.to_string())?;
    let c_flags = CString::new(flags).map_err(|e| e.to_string())?;
    // SAFETY: called from OnLoad with the module's context; strings outlive the calls.
    unsafe {
        let create = raw::RedisModule_CreateCommand.ok_or("no RedisModule_CreateCommand")?;
        if create(ctx, c_name.as_ptr(), handler, c_flags.as_ptr(), 1, 1, 1) != raw::REDISMODULE_OK as c_int {
            return Err(format!("cannot create command {name} with flags '{flags}'"));
        }
        if let (Some(category), Some(set), Some(get)) =
            (acl_category, raw::RedisModule_SetCommandACLCategories, raw::RedisModule_GetCommand)
        {
            let command = get(ctx, c_name.as_ptr());
            if command.is_null() || set(command, category.as_ptr()) != raw::REDISMODULE_OK as c_int {
                log_warning(ctx, &format!("fencedlock: cannot set ACL category of {name}"));
            }
        }
    }
    Ok(())
}

/// Adds the `fencedlock` ACL category (Redis 7.4+, Valkey 8+), so `+@fencedlock` grants every
/// command at once. Returns whether the server supports it.
pub fn add_acl_category(ctx: Ctx, name: &std::ffi::CStr) -> bool {
    // SAFETY: called from OnLoad with the module's context.
    unsafe {
        raw::RedisModule_AddACLCategory
            .is_some_and(|add| add(ctx, name.as_ptr() as *const c_char) == raw::REDISMODULE_OK as c_int)
    }
}

/// One argument in a command's documentation.
pub enum Arg {
    Key(&'static std::ffi::CStr),
    Text(&'static std::ffi::CStr),
    Integer(&'static std::ffi::CStr),
}

/// Documents a command for `COMMAND DOCS` / `COMMAND INFO` and lets Redis check its arity before
/// calling us. Best effort: servers without `RedisModule_SetCommandInfo` skip it.
pub fn set_command_info(ctx: Ctx, name: &str, arity: c_int, summary: &'static std::ffi::CStr, args: &[Arg]) {
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    let mut docs: Vec<raw::RedisModuleCommandArg> = args
        .iter()
        .map(|arg| {
            // SAFETY: the bindgen struct is plain data; all-zero is its C "unset" value.
            let mut doc: raw::RedisModuleCommandArg = unsafe { std::mem::zeroed() };
            let (arg_name, kind, key_spec) = match arg {
                Arg::Key(n) => (n, raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY, 0),
                Arg::Text(n) => (n, raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING, -1),
                Arg::Integer(n) => (n, raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER, -1),
            };
            doc.name = arg_name.as_ptr();
            doc.type_ = kind;
            doc.key_spec_index = key_spec;
            doc
        })
        .collect();
    // SAFETY: as above; the zeroed entry terminates the argument array.
    docs.push(unsafe { std::mem::zeroed() });
    // SAFETY: as above.
    let mut info: raw::RedisModuleCommandInfo = unsafe { std::mem::zeroed() };
    info.version = &version;
    info.summary = summary.as_ptr();
    info.complexity = c"O(1)".as_ptr();
    info.since = c"0.1.0".as_ptr();
    info.arity = arity;
    info.args = docs.as_mut_ptr();
    let Ok(c_name) = CString::new(name) else { return };
    // SAFETY: Redis copies the info during the call; every pointer outlives it.
    unsafe {
        if let (Some(get), Some(set)) = (raw::RedisModule_GetCommand, raw::RedisModule_SetCommandInfo) {
            let command = get(ctx, c_name.as_ptr());
            if command.is_null() || set(command, &info) != raw::REDISMODULE_OK as c_int {
                log_warning(ctx, &format!("fencedlock: cannot document {name}"));
            }
        }
    }
}
