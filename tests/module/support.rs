//! Typed wrappers over the module's commands, shared by the module's tests. They panic on
//! unexpected replies so each test reads as the contract it checks. Reading lock state and
//! counters is the harness's job: `Server::lock_status`, `fencedlock_counter`, `high_water`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use fencedlock_protocol::command::{ACQUIRE, CAD, LABEL, RAISE, RELEASE, RENEW};
use harness::{error_text, poll, redis, AcquireReply, BlockedAcquire, LockStatus, Server};
use redis::{RedisResult, ToRedisArgs, Value};

/// A ttl long enough that no lease in a test expires by accident.
pub const LONG_TTL: u64 = 60_000;

/// Run a command; the raw reply or error.
pub fn run(s: &Server, args: &[&[u8]]) -> RedisResult<Value> {
    let mut cmd = redis::Cmd::new();
    for a in args {
        cmd.arg(*a);
    }
    s.query(&cmd)
}

/// Build a byte-argument list from mixed `&str` / `&[u8]` / numbers.
macro_rules! args {
    ($($a:expr),* $(,)?) => {{
        let v: Vec<Vec<u8>> = vec![$( $crate::support::bytes(&$a) ),*];
        v
    }};
}
pub(crate) use args;

/// One argument as bytes.
pub fn bytes(a: &impl ToRedisArgs) -> Vec<u8> {
    let mut out = a.to_redis_args();
    assert_eq!(out.len(), 1, "one argument expected");
    out.remove(0)
}

/// Run a command given as owned byte vectors.
/// `base` followed by `extra` (e.g. a command and some options to try on it).
pub fn with_words(base: &[Vec<u8>], extra: &[&str]) -> Vec<Vec<u8>> {
    base.iter().cloned().chain(extra.iter().map(|a| a.as_bytes().to_vec())).collect()
}

pub fn run_v(s: &Server, args: &[Vec<u8>]) -> RedisResult<Value> {
    let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    run(s, &refs)
}

/// The error text of a command that must fail.
pub fn expect_err(s: &Server, args: &[Vec<u8>]) -> String {
    match run_v(s, args) {
        Err(e) => error_text(&e),
        Ok(v) => panic!("expected an error from {}, got {v:?}", printable(args)),
    }
}

fn printable(args: &[Vec<u8>]) -> String {
    args.iter()
        .map(|a| {
            let s = String::from_utf8_lossy(a);
            if s.len() > 40 {
                format!("{}…({} bytes)", &s[..20], a.len())
            } else {
                s.into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `ACQUIRE`: `Ok(Some(fence))` on grant, `Ok(None)` when held by another token.
pub fn try_acquire(s: &Server, key: &str, token: &[u8], ttl_ms: u64) -> RedisResult<Option<u64>> {
    match run(s, &[ACQUIRE.name.as_bytes(), key.as_bytes(), token, ttl_ms.to_string().as_bytes()])? {
        Value::Nil => Ok(None),
        Value::Int(f) => {
            assert!(f > 0, "fence must be positive, got {f}");
            Ok(Some(f as u64))
        }
        other => panic!("ACQUIRE replied {other:?}"),
    }
}

/// `ACQUIRE … LABEL label`: `Ok(Some(fence))` on grant, `Ok(None)` when held by another token.
pub fn try_acquire_labelled(
    s: &Server,
    key: &str,
    token: &[u8],
    ttl_ms: u64,
    label: &[u8],
) -> RedisResult<Option<u64>> {
    let ttl = ttl_ms.to_string();
    match run(s, &[ACQUIRE.name.as_bytes(), key.as_bytes(), token, ttl.as_bytes(), LABEL.as_bytes(), label])?
    {
        Value::Nil => Ok(None),
        Value::Int(f) if f > 0 => Ok(Some(f as u64)),
        other => panic!("ACQUIRE … LABEL replied {other:?}"),
    }
}

/// `ACQUIRE … LABEL label` that must grant (or re-enter): the fence.
pub fn grant_labelled(s: &Server, key: &str, token: &[u8], ttl_ms: u64, label: &[u8]) -> u64 {
    try_acquire_labelled(s, key, token, ttl_ms, label)
        .unwrap_or_else(|e| panic!("ACQUIRE {key} LABEL: {}", error_text(&e)))
        .unwrap_or_else(|| panic!("ACQUIRE {key} LABEL was refused"))
}

/// `ACQUIRE` that must not error.
pub fn acquire(s: &Server, key: &str, token: &[u8], ttl_ms: u64) -> Option<u64> {
    try_acquire(s, key, token, ttl_ms).unwrap_or_else(|e| panic!("ACQUIRE {key}: {}", error_text(&e)))
}

/// `ACQUIRE` that must grant.
pub fn grant(s: &Server, key: &str, token: &[u8], ttl_ms: u64) -> u64 {
    acquire(s, key, token, ttl_ms).unwrap_or_else(|| panic!("ACQUIRE {key} was refused"))
}

fn int_reply(s: &Server, args: &[&[u8]]) -> i64 {
    match run(s, args) {
        Ok(Value::Int(n)) => n,
        other => panic!("{} replied {other:?}", String::from_utf8_lossy(args[0])),
    }
}

/// `RENEW` -> 0 / 1.
pub fn renew(s: &Server, key: &str, token: &[u8], ttl_ms: u64) -> i64 {
    int_reply(s, &[RENEW.name.as_bytes(), key.as_bytes(), token, ttl_ms.to_string().as_bytes()])
}

/// `RELEASE` -> 0 / 1.
pub fn release(s: &Server, key: &str, token: &[u8]) -> i64 {
    int_reply(s, &[RELEASE.name.as_bytes(), key.as_bytes(), token])
}

/// `CAD` -> 0 / 1.
pub fn cad(s: &Server, key: &str, value: &[u8]) -> i64 {
    int_reply(s, &[CAD.name.as_bytes(), key.as_bytes(), value])
}

/// `RAISE` -> the key's fence after raising, or `None` when the token does not hold it.
pub fn raise(s: &Server, key: &str, token: &[u8], fence: u64) -> Option<u64> {
    match run(s, &[RAISE.name.as_bytes(), key.as_bytes(), token, fence.to_string().as_bytes()]) {
        Ok(Value::Nil) => None,
        Ok(Value::Int(f)) => Some(f as u64),
        other => panic!("RAISE replied {other:?}"),
    }
}

/// `STATUS` of a key that must exist.
pub fn status_of(s: &Server, key: &str) -> LockStatus {
    s.lock_status(key).unwrap_or_else(|| panic!("STATUS {key} is nil"))
}

/// `INFO fencedlock` fields.
pub fn info(s: &Server) -> HashMap<String, String> {
    s.info("fencedlock")
}

/// Wait (bounded) until the lease on `key` has expired.
pub fn wait_expired(s: &Server, key: &str) {
    poll(&format!("lease on {key} to expire"), Duration::from_secs(5), || !status_of(s, key).held);
}

/// One key's type and, for a lock, its fence and held flag.
#[derive(Debug, PartialEq, Eq)]
pub struct KeyState {
    key: String,
    ty: String,
    lock: Option<LockState>,
}

/// A lock's fence, whether it is held, and its label (public; part of the state a failed
/// command must keep). Its remaining time aside: that moves with time.
pub type LockState = (u64, bool, Option<Vec<u8>>);

/// Everything a failed command must leave alone: the dataset digest, each key's type and
/// lock state (remaining time aside, it moves with time), and the module's counters that a
/// grant or a refusal would move.
#[derive(Debug, PartialEq, Eq)]
pub struct Fingerprint {
    dataset: String,
    keys: Vec<KeyState>,
    high_water: u64,
    grants: u64,
}

pub fn fingerprint(s: &Server, keys: &[&str]) -> Fingerprint {
    let dataset = s.digest();
    let keys = keys
        .iter()
        .map(|k| {
            let ty: String = s.cmd(&["TYPE", k]).expect("TYPE");
            let lock = if ty == "none" || is_lock_type(&ty) {
                s.lock_status(k).map(|st| (st.fence, st.held, st.label))
            } else {
                None
            };
            KeyState { key: k.to_string(), ty, lock }
        })
        .collect();
    Fingerprint {
        dataset,
        keys,
        high_water: s.high_water(),
        grants: s.fencedlock_counter("fencedlock_grants"),
    }
}

/// Whether a `TYPE` reply names the module's data type (anything not built in).
pub fn is_lock_type(ty: &str) -> bool {
    !matches!(ty, "none" | "string" | "list" | "set" | "zset" | "hash" | "stream")
}

/// A token with bytes that lossy UTF-8 handling would corrupt.
pub fn binary_token(tag: u8) -> Vec<u8> {
    vec![0, 0xff, b't', tag, 0x80, b'\n', 0xfe, 0]
}

/// Bad inputs: each `(args, kind)` of `cases` must be refused — with the module's error `kind`,
/// or with the server's arity error when `kind` is `None` — and leave `state` as it was;
/// `check` runs after each case too (e.g. that a queued waiter still waits).
pub fn assert_refused_unchanged<T: PartialEq + std::fmt::Debug>(
    s: &Server,
    cases: Vec<(Vec<Vec<u8>>, Option<fencedlock_protocol::ReplyError>)>,
    state: impl Fn() -> T,
    check: impl Fn(&[String]),
) {
    for (args, kind) in cases {
        let shown: Vec<String> = args.iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        let before = state();
        let err = match run_v(s, &args) {
            Err(e) => e,
            Ok(v) => panic!("{shown:?} was answered {v:?}"),
        };
        match kind {
            Some(kind) => assert_eq!(harness::classify(&err), Some(kind), "{shown:?}: {}", error_text(&err)),
            None => assert!(
                err.code() == Some("ERR")
                    && err.detail().is_some_and(|d| d.starts_with("wrong number of arguments")),
                "{shown:?}: expected the arity error, got {}",
                error_text(&err)
            ),
        }
        assert_eq!(state(), before, "{shown:?} changed something");
        check(&shown);
    }
}

/// Calls `attempt(at)` every 200 µs while `waiter` waits for its reply, for at most 2 s past
/// `deadline`: the probe of the no-barging tests, whose attempts must all be refused. Returns
/// the waiter's reply (within `limit`) and when each attempt was made.
pub fn attempts_until_answered(
    waiter: &mut BlockedAcquire,
    limit: Duration,
    deadline: Instant,
    mut attempt: impl FnMut(Instant),
) -> (AcquireReply, Vec<Instant>) {
    let done = &AtomicBool::new(false);
    thread::scope(|scope| {
        let reader = scope.spawn(move || {
            let reply = waiter.reply(limit);
            done.store(true, Ordering::SeqCst);
            reply
        });
        let mut tries = Vec::new();
        while !done.load(Ordering::SeqCst) && Instant::now() < deadline + Duration::from_secs(2) {
            let at = Instant::now();
            attempt(at);
            tries.push(at);
            thread::sleep(Duration::from_micros(200));
        }
        (reader.join().expect("reader"), tries)
    })
}
