//! Memory pressure: eviction and out-of-memory.
//!
//! - Under an `allkeys-*` policy the server may evict lock keys, held leases included (a lost
//!   lease, like a crash without persistence), but the high-water mark is server state, so a
//!   fence still never repeats.
//! - Lock keys carry no Redis TTL, so `volatile-*` policies never evict them: the recommended
//!   setting when the same server holds other data.
//! - At `maxmemory` with `noeviction`, ACQUIRE (`deny-oom`) is refused with OOM while RENEW,
//!   RELEASE and STATUS keep working, so holders can still renew and free their leases.

use fencedlock_protocol::command::ACQUIRE;
use harness::redis::{self, Value};
use harness::{error_text, Server};

const VALUE_BYTES: usize = 64 * 1024;
/// Upper bound on filler writes (32 MiB): every fill loop ends.
const MAX_FILL: usize = 512;

fn used_memory(s: &Server) -> u64 {
    s.info_field("memory", "used_memory").expect("used_memory").parse().expect("a number")
}

fn evicted(s: &Server) -> u64 {
    s.info_field("stats", "evicted_keys").expect("evicted_keys").parse().expect("a number")
}

fn limit_memory(s: &Server, headroom: u64, policy: &str) {
    let max = used_memory(s) + headroom;
    let _: () = s.cmd(&["CONFIG", "SET", "maxmemory", &max.to_string()]).expect("maxmemory");
    let _: () = s.cmd(&["CONFIG", "SET", "maxmemory-policy", policy]).expect("maxmemory-policy");
}

fn acquire(s: &Server, key: &str, token: &str, ttl: u64) -> redis::RedisResult<Option<u64>> {
    s.cmd(&[ACQUIRE.name, key, token, &ttl.to_string()])
}

fn exists(s: &Server, key: &str) -> bool {
    s.cmd::<i64>(&["EXISTS", key]).expect("EXISTS") == 1
}

/// Write filler values (with `ex` seconds of TTL, if given) until `done` or the bound.
fn fill(s: &Server, ex: Option<u64>, mut done: impl FnMut(&Server) -> bool) -> usize {
    let value = vec![b'v'; VALUE_BYTES];
    for i in 0..MAX_FILL {
        let mut cmd = redis::cmd("SET");
        cmd.arg(format!("fill:{i}")).arg(&value);
        if let Some(ex) = ex {
            cmd.arg("EX").arg(ex);
        }
        let _: redis::RedisResult<Value> = s.query(&cmd);
        if done(s) {
            return i + 1;
        }
    }
    panic!("no eviction / OOM after {MAX_FILL} filler writes (used_memory {})", used_memory(s));
}

#[test]
fn evicted_lock_keys_never_let_a_fence_repeat() {
    let s = Server::start();
    let keys: Vec<String> = (0..300).map(|i| format!("ev:{i}")).collect();
    let mut max = 0;
    for (i, key) in keys.iter().enumerate() {
        let fence = acquire(&s, key, "holder", 60_000).expect("grant").expect("free");
        if i % 2 == 0 {
            let _: i64 = s.cmd(&["FENCEDLOCK.RELEASE", key, "holder"]).expect("RELEASE");
        }
        max = max.max(fence);
    }
    limit_memory(&s, 2 << 20, "allkeys-random");
    fill(&s, None, |s| keys.iter().filter(|k| !exists(s, k)).count() >= 20);
    let _: () = s.cmd(&["CONFIG", "SET", "maxmemory", "0"]).expect("lift the limit");
    let gone: Vec<&String> = keys.iter().filter(|k| !exists(&s, k)).collect();
    assert!(evicted(&s) > 0 && gone.len() >= 20, "lock keys were evicted: {}", gone.len());

    // Each evicted key (held ones included: eviction loses leases, so use a volatile-* policy
    // or a dedicated server) is granted again above every fence issued before.
    for key in gone {
        let fence = acquire(&s, key, "next", 60_000).expect("grant").expect("an evicted key is free");
        assert!(fence > max, "{key}: fence {fence} repeats or goes below {max} after eviction");
        max = fence;
    }
}

#[test]
fn volatile_eviction_spares_lock_keys_and_oom_refuses_only_new_grants() {
    let s = Server::start();
    let keys: Vec<String> = (0..100).map(|i| format!("vol:{i}")).collect();
    let mut max = 0;
    for key in &keys {
        max = max.max(acquire(&s, key, "holder", 60_000).expect("grant").expect("free"));
    }
    // Fillers with a TTL are the only eviction candidates under volatile-lru.
    limit_memory(&s, 2 << 20, "volatile-lru");
    fill(&s, Some(600), |s| evicted(s) >= 10);
    for key in &keys {
        assert!(s.lock_held(key), "{key}: a lock key was evicted under volatile-lru");
    }

    // Now nothing may be evicted, and the data is above the limit: the server is out of
    // memory for every command that may allocate.
    let _: () = s.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]).expect("policy");
    let below = used_memory(&s) - (1 << 20);
    let _: () = s.cmd(&["CONFIG", "SET", "maxmemory", &below.to_string()]).expect("maxmemory below use");
    let err = s.cmd::<Value>(&["SET", "oom:probe", "x"]).unwrap_err();
    assert!(error_text(&err).starts_with("OOM"), "the server is out of memory: {}", error_text(&err));

    // New grants are refused (deny-oom), and so is a re-acquire: ACQUIRE may allocate.
    for (key, token) in [("vol:new", "t"), ("vol:0", "holder")] {
        let err = acquire(&s, key, token, 60_000)
            .map(|f| panic!("ACQUIRE {key} under OOM answered {f:?}"))
            .unwrap_err();
        assert!(error_text(&err).starts_with("OOM"), "{key}: {}", error_text(&err));
    }
    assert!(!exists(&s, "vol:new"));
    // Holders can still renew and release, and anyone can read.
    let renewed: i64 = s.cmd(&["FENCEDLOCK.RENEW", "vol:1", "holder", "60000"]).expect("RENEW under OOM");
    assert_eq!(renewed, 1);
    let released: i64 = s.cmd(&["FENCEDLOCK.RELEASE", "vol:2", "holder"]).expect("RELEASE under OOM");
    assert_eq!(released, 1);
    let st = s.lock_status("vol:2").expect("STATUS under OOM");
    assert!(!st.held, "{st:?}");

    // With memory back, grants resume above everything before.
    let _: () = s.cmd(&["CONFIG", "SET", "maxmemory", "0"]).expect("lift the limit");
    let fence = acquire(&s, "vol:2", "next", 60_000).expect("grant").expect("free");
    assert!(fence > max);
}
