//! The Functions engine (issue 22) under faults: the `fencedlock` library on servers started
//! without the module, used through the client (`EngineChoice::Only(Engine::Functions)`) and,
//! where a test needs one exact request, through raw `FCALL`.
//!
//! What the library keeps fences with (`protocol/src/functions.lua`): the floor key of the
//! lock key's slot holds the slot's highest fence and the `run_id` of the server process that
//! last granted; a grant by another process (a restart, a promotion, a slot's new owner)
//! starts a new epoch at the wall clock's ms x 1024, or `EPOCH_GAP` above the last fence when
//! the clock is behind it. An idle lock key expires `RETENTION_MS` after its last lease ends.
//!
//! Each test is named for what it shows; the ones named for a failure show where the library
//! does not give a guarantee the module gives, so the functions column of docs/guarantees.md is honest:
//!
//! - `crash`: `kill -9` and restarts from an fsync-always AOF, and a power loss of the AOF's
//!   tail with `everysec`.
//! - `keys`: `DEL`, `FLUSHDB` / `FLUSHALL`, idle cleanup, and the floor-less form (numkeys 1).
//! - `failover`: replica promotion (confirmed and lost grants), two failovers in a row, an old
//!   primary that comes back.
//! - `limits`: no FIFO among waiters, and (on the script form) a fence raised past the wall
//!   clock after the floor is gone.

mod crash;
mod failover;
mod keys;
mod limits;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fencedlock::{Engine, EngineChoice, Error, LockConfig, Locker};
use fencedlock_protocol::command::{Command, ACQUIRE, RELEASE, STATUS};
use fencedlock_protocol::functions::{self, FENCES_PER_MILLISECOND, LIBRARY};
use fencedlock_protocol::LockStatus;
use harness::redis::{self, FromRedisValue, Value};
use harness::{decode_status, error_text, Server, ServerBuilder};

/// Leases the tests hold across a fault: long enough to outlive any restart or promotion here.
pub const HELD_TTL: Duration = Duration::from_secs(30);
/// How long a test retries a request that found the server gone (a restart, a promotion).
const UNAVAILABLE_LIMIT: Duration = Duration::from_secs(10);

/// A server without the module, with the library loaded (as an administrator of a managed
/// service would; `tests/client/functions.rs` shows the client loading it itself).
pub fn module_less(builder: ServerBuilder) -> Server {
    let server = builder.without_module().start();
    load_library(&server);
    server
}

/// `FUNCTION LOAD REPLACE` of the library on `server`.
pub fn load_library(server: &Server) {
    let name: String = server
        .cmd(&["FUNCTION", "LOAD", "REPLACE", LIBRARY])
        .unwrap_or_else(|e| panic!("FUNCTION LOAD on {}: {}", server.addr(), error_text(&e)));
    assert_eq!(name, functions::NAME);
}

/// `appendonly yes` with the given `appendfsync`.
pub fn with_aof(builder: ServerBuilder, fsync: &str) -> ServerBuilder {
    builder.arg("appendonly", "yes").arg("appendfsync", fsync)
}

/// The client's settings on the Functions engine, with leases of `ttl`.
pub fn config(ttl: Duration) -> fencedlock::LockConfigBuilder {
    LockConfig::builder()
        .ttl(ttl)
        .engine(EngineChoice::Only(Engine::Functions))
        .node_timeout(Duration::from_secs(2))
        .backoff(Duration::from_millis(5), Duration::from_millis(50))
        .max_wait(Duration::from_secs(5))
}

/// A client of `server` on the Functions engine.
pub fn locker(server: &Server, ttl: Duration) -> Locker {
    Locker::open(&server.url(), config(ttl).build().expect("valid config")).expect("locker")
}

/// The floor key of `key`'s slot, as the client names it.
pub fn floor(key: &str) -> String {
    String::from_utf8(functions::floor_key(key.as_bytes())).expect("floor keys are ASCII")
}

/// `FCALL` of the function serving `command` on `key` with the keys the client names (its
/// floor key where the function takes one, and a release its wake-up list), then `rest`.
pub fn call<T: FromRedisValue>(
    server: &Server,
    command: &Command,
    key: &str,
    rest: &[&[u8]],
) -> redis::RedisResult<T> {
    let name = functions::function(command).expect("the library serves this command");
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(name);
    let keys = functions::call_keys(command, key.as_bytes(), false);
    cmd.arg(keys.len()).arg(keys);
    for arg in rest {
        cmd.arg(*arg);
    }
    server.query(&cmd)
}

/// `fencedlock_acquire` on `key`: the fence, `None` when it is held.
pub fn try_grant(server: &Server, key: &str, token: &str, ttl_ms: u64) -> Option<u64> {
    call(server, &ACQUIRE, key, &[token.as_bytes(), ttl_ms.to_string().as_bytes()])
        .unwrap_or_else(|e| panic!("acquire {key} on {}: {}", server.addr(), error_text(&e)))
}

/// `fencedlock_acquire` on `key`, which must grant.
pub fn grant(server: &Server, key: &str, token: &str, ttl_ms: u64) -> u64 {
    try_grant(server, key, token, ttl_ms).unwrap_or_else(|| panic!("{key} on {} was refused", server.addr()))
}

/// `fencedlock_release` of `token`'s lease on `key`: whether it was held.
pub fn release(server: &Server, key: &str, token: &str) -> bool {
    let released: i64 = call(server, &RELEASE, key, &[token.as_bytes()])
        .unwrap_or_else(|e| panic!("release {key} on {}: {}", server.addr(), error_text(&e)));
    released == 1
}

/// `fencedlock_status` of `key`, `None` for a missing key.
pub fn status(server: &Server, key: &str) -> Option<LockStatus> {
    let reply: Value = call(server, &STATUS, key, &[])
        .unwrap_or_else(|e| panic!("status {key} on {}: {}", server.addr(), error_text(&e)));
    decode_status(&reply)
}

/// `(fence, held)` of `key` on `server`.
pub fn held_fence(server: &Server, key: &str) -> Option<(u64, bool)> {
    status(server, key).map(|st| (st.fence, st.held))
}

/// A field of the floor hash of `key`'s slot (`fence` or `run`).
pub fn floor_field(server: &Server, key: &str, field: &str) -> Option<String> {
    server
        .cmd(&["HGET", &floor(key), field])
        .unwrap_or_else(|e| panic!("HGET floor on {}: {}", server.addr(), error_text(&e)))
}

/// The fence the floor of `key`'s slot keeps.
pub fn floor_fence(server: &Server, key: &str) -> Option<u64> {
    floor_field(server, key, "fence").map(|f| f.parse().unwrap_or_else(|e| panic!("floor fence {f:?}: {e}")))
}

/// The server process's `run_id`, which the library stores in the floor.
pub fn run_id(server: &Server) -> String {
    server.info_field("server", "run_id").unwrap_or_else(|| panic!("{}: no run_id", server.addr()))
}

/// How a raw request reaches the library: `FCALL`, or the same source run as a script
/// (`EVALSHA`), which keeps nothing between calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Form {
    Library,
    /// The script's SHA1.
    Script(String),
}

impl Form {
    /// Both forms on `server` (the library loaded, the script loaded).
    pub fn both(server: &Server) -> [Form; 2] {
        let sha: String = server
            .cmd(&["SCRIPT", "LOAD", functions::eval_script()])
            .unwrap_or_else(|e| panic!("SCRIPT LOAD on {}: {}", server.addr(), error_text(&e)));
        [Form::Library, Form::Script(sha)]
    }

    /// `function` on `keys`, then `args`, as this form sends it.
    pub fn request(&self, function: &str, keys: &[&str], args: &[&str]) -> redis::Cmd {
        let mut cmd = match self {
            Form::Library => redis::cmd("FCALL").arg(function).take(),
            Form::Script(sha) => redis::cmd("EVALSHA").arg(sha).take(),
        };
        cmd.arg(keys.len()).arg(keys);
        if matches!(self, Form::Script(_)) {
            cmd.arg(function);
        }
        cmd.arg(args).take()
    }

    /// The client's engine for this form.
    pub fn engine(&self) -> Engine {
        match self {
            Form::Library => Engine::Functions,
            Form::Script(_) => Engine::Script,
        }
    }
}

/// Milliseconds since 1970 on this machine's clock, which the servers here share.
pub fn wall_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).expect("the clock is after 1970");
    u64::try_from(since.as_millis()).expect("ms fit in u64")
}

/// The first fence of an epoch the library starts at wall time `ms`.
pub fn epoch_at(ms: u64) -> u64 {
    ms * FENCES_PER_MILLISECOND
}

/// The server's own clock (`TIME`) in ms: the clock the library's leases run on.
pub fn server_ms(server: &Server) -> u64 {
    let (secs, micros): (u64, u64) =
        server.cmd(&["TIME"]).unwrap_or_else(|e| panic!("TIME on {}: {}", server.addr(), error_text(&e)));
    secs * 1000 + micros / 1000
}

/// `PEXPIRETIME key` (-1 without an expiry, -2 for a missing key).
pub fn pexpiretime(server: &Server, key: &str) -> i64 {
    server
        .cmd(&["PEXPIRETIME", key])
        .unwrap_or_else(|e| panic!("PEXPIRETIME on {}: {}", server.addr(), error_text(&e)))
}

/// Runs `op` until it returns something other than an unavailability (a connection to a
/// server that was killed, restarted or promoted, which the client reconnects by itself), for
/// at most [`UNAVAILABLE_LIMIT`].
pub async fn answered<T, F, Fut>(what: &str, mut op: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let deadline = Instant::now() + UNAVAILABLE_LIMIT;
    loop {
        match op().await {
            Err(e) if e.is_unavailable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) if e.is_unavailable() => {
                panic!("{what}: still unavailable after {UNAVAILABLE_LIMIT:?}: {e}")
            }
            other => return other,
        }
    }
}

/// A resource that checks fences as docs/resource.md tells one to: it takes a write whose fence is
/// at least the largest it has taken (the same holder may write again) and refuses a lower
/// one. The check is the point of the fence, so the tests ask it, not only compare numbers.
#[derive(Debug, Default)]
pub struct FencedResource {
    last: u64,
}

impl FencedResource {
    /// Whether a write with `fence` is taken.
    pub fn write(&mut self, fence: u64) -> bool {
        if fence < self.last {
            return false;
        }
        self.last = fence;
        true
    }
}
