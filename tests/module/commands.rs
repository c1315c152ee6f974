//! The module's command contract (docs/commands.md) against a real server of the
//! flavor in `FENCEDLOCK_FLAVOR`: replies, the paused-worker A/B timeline, fences,
//! bad input (clear error, nothing changed), secrets, configs, counters, DUMP/RESTORE/COPY.

use std::time::Duration;

use crate::support::*;
use fencedlock_protocol::limits::{DEFAULT_MAX_TTL_MS, MAX_TOKEN_LEN};
use harness::{decode_status, error_text, redis, LockStatus, Server};
use redis::Value;

// ---------------------------------------------------------------------------------------
// The paused-worker story and the basic replies
// ---------------------------------------------------------------------------------------

#[test]
fn worker_a_b_timeline() {
    let s = Server::start();
    let key = "timeline:invoice-42";
    // A's lease must outlast the next command even on a loaded machine; expiry is polled.
    let fence_a = grant(&s, key, b"worker-a", 500);
    assert_eq!(acquire(&s, key, b"worker-b", 10_000), None, "B must wait while A holds it");

    // A pauses (GC, swap, a slow disk) past its lease; the server's clock expires it.
    wait_expired(&s, key);
    let fence_b = grant(&s, key, b"worker-b", 10_000);
    assert!(fence_b > fence_a, "B's fence {fence_b} must exceed A's {fence_a}");

    // A wakes up: its renew and release must fail and must not disturb B.
    assert_eq!(renew(&s, key, b"worker-a", 10_000), 0);
    assert_eq!(release(&s, key, b"worker-a"), 0);
    assert_eq!(acquire(&s, key, b"worker-a", 10_000), None);
    let st = status_of(&s, key);
    assert_eq!((st.fence, st.held), (fence_b, true));
    assert!(st.remaining.is_some_and(|d| !d.is_zero() && d <= Duration::from_millis(10_000)), "{st:?}");
    assert_eq!(release(&s, key, b"worker-b"), 1);
}

#[test]
fn acquire_is_idempotent_for_the_holder_and_restarts_the_lease() {
    let s = Server::start();
    let key = "idem:lock";
    let fence = grant(&s, key, b"tok", 1_000);
    assert!(status_of(&s, key).remaining.is_none_or(|d| d <= Duration::from_millis(1_000)));

    // A client whose reply was lost retries: same fence, lease runs ttl from now.
    assert_eq!(grant(&s, key, b"tok", LONG_TTL), fence);
    let st = status_of(&s, key);
    assert!(
        st.held
            && st
                .remaining
                .is_some_and(|d| d > Duration::from_millis(1_000) && d <= Duration::from_millis(LONG_TTL)),
        "{st:?}"
    );

    // Restarted, not extended: a shorter ttl shortens it.
    assert_eq!(grant(&s, key, b"tok", 500), fence);
    assert!(status_of(&s, key).remaining.is_none_or(|d| d <= Duration::from_millis(500)));
    assert_eq!(s.high_water(), fence, "a re-acquire issues no new fence");
}

#[test]
fn renew_extends_only_the_holders_live_lease() {
    let s = Server::start();
    let key = "renew:lock";
    let fence = grant(&s, key, b"holder", 1_000);
    assert_eq!(renew(&s, key, b"holder", LONG_TTL), 1);
    let st = status_of(&s, key);
    assert!(st.held && st.remaining.is_some_and(|d| d > Duration::from_millis(1_000)), "{st:?}");
    assert_eq!(st.fence, fence, "renew keeps the fence");

    assert_eq!(renew(&s, key, b"other", LONG_TTL), 0, "a non-holder cannot renew");
    assert_eq!(renew(&s, "renew:missing", b"holder", LONG_TTL), 0);
    assert_eq!(s.lock_status("renew:missing"), None, "renew must not create a key");

    assert_eq!(release(&s, key, b"holder"), 1);
    assert_eq!(renew(&s, key, b"holder", LONG_TTL), 0, "no renew after release");
    assert!(!status_of(&s, key).held);

    // After expiry a renew must not resurrect the lease.
    let fence2 = grant(&s, key, b"holder", 100);
    wait_expired(&s, key);
    assert_eq!(renew(&s, key, b"holder", LONG_TTL), 0);
    assert_eq!(status_of(&s, key), LockStatus { fence: fence2, held: false, remaining: None, label: None });
}

#[test]
fn release_ends_the_lease_and_keeps_the_fence() {
    let s = Server::start();
    let key = "release:lock";
    let fence = grant(&s, key, b"a", LONG_TTL);
    assert_eq!(release(&s, key, b"b"), 0, "a non-holder cannot release");
    assert!(status_of(&s, key).held);
    assert_eq!(release(&s, key, b"a"), 1);
    assert_eq!(status_of(&s, key), LockStatus { fence, held: false, remaining: None, label: None });
    assert_eq!(release(&s, key, b"a"), 0, "a second release is refused");
    assert_eq!(release(&s, "release:missing", b"a"), 0);
    assert_eq!(s.lock_status("release:missing"), None);

    // Keys have no Redis TTL: the fence must outlive the lease.
    let ttl: i64 = s.cmd(&["PTTL", key]).unwrap();
    assert_eq!(ttl, -1, "lock keys carry no Redis TTL");
    assert_eq!(grant(&s, key, b"b", LONG_TTL), fence + 1);
}

#[test]
fn status_shapes() {
    let s = Server::start();
    assert_eq!(run(&s, &[b"FENCEDLOCK.STATUS", b"status:missing"]).unwrap(), Value::Nil);
    let fence = grant(&s, "status:k", b"t", 5_000);
    let st = status_of(&s, "status:k");
    assert_eq!((st.fence, st.held), (fence, true));
    assert!(st.remaining.is_some_and(|d| !d.is_zero() && d <= Duration::from_millis(5_000)), "{st:?}");
    assert_eq!(release(&s, "status:k", b"t"), 1);
    assert_eq!(status_of(&s, "status:k"), LockStatus { fence, held: false, remaining: None, label: None });
}

#[test]
fn fences_follow_the_high_water_mark_across_keys() {
    let s = Server::start();
    let f1 = grant(&s, "hwm:a", b"t", LONG_TTL);
    let f2 = grant(&s, "hwm:b", b"t", LONG_TTL);
    let f3 = grant(&s, "hwm:c", b"u", LONG_TTL);
    assert_eq!((f2, f3), (f1 + 1, f1 + 2), "fence = max(key fence, high-water) + 1");
    assert_eq!(s.high_water(), f3);
    assert_eq!(release(&s, "hwm:a", b"t"), 1);
    assert_eq!(grant(&s, "hwm:a", b"x", LONG_TTL), f3 + 1);
}

#[test]
fn fences_increase_across_release_expiry_del_and_flushall() {
    let s = Server::start();
    let key = "mono:lock";
    let mut seen = vec![grant(&s, key, b"t1", LONG_TTL)];
    assert_eq!(release(&s, key, b"t1"), 1);
    seen.push(grant(&s, key, b"t2", 100));
    wait_expired(&s, key);
    seen.push(grant(&s, key, b"t3", LONG_TTL));
    let deleted: i64 = s.cmd(&["DEL", key]).unwrap();
    assert_eq!(deleted, 1);
    assert_eq!(s.lock_status(key), None);
    seen.push(grant(&s, key, b"t4", LONG_TTL));
    let _: () = s.cmd(&["FLUSHALL"]).unwrap();
    assert_eq!(s.lock_status(key), None);
    seen.push(grant(&s, key, b"t5", LONG_TTL));
    let _: () = s.cmd(&["FLUSHALL", "SYNC"]).unwrap();
    seen.push(grant(&s, key, b"t6", LONG_TTL));
    assert!(seen.windows(2).all(|w| w[1] > w[0]), "fences must strictly increase: {seen:?}");
}

#[test]
fn takeover_of_an_expired_lease_by_another_token() {
    let s = Server::start();
    let key = "takeover:lock";
    let f1 = grant(&s, key, b"old", 50);
    wait_expired(&s, key);
    // The old holder re-acquiring after expiry is a new grant, not a re-entry.
    let f2 = grant(&s, key, b"old", 50);
    assert!(f2 > f1, "an expired lease re-acquired gets a new fence");
    wait_expired(&s, key);
    let before = s.fencedlock_counter("fencedlock_takeovers");
    let f3 = grant(&s, key, b"new", LONG_TTL);
    assert!(f3 > f2);
    assert!(s.fencedlock_counter("fencedlock_takeovers") > before, "{:?}", info(&s));
}

#[test]
fn raise_lifts_the_fence_for_the_holder_only() {
    let s = Server::start();
    let key = "raise:lock";
    let f = grant(&s, key, b"h", LONG_TTL);
    assert_eq!(raise(&s, key, b"h", f + 100), Some(f + 100));
    assert_eq!(raise(&s, key, b"h", f), Some(f + 100), "never lowered");
    assert_eq!(raise(&s, key, b"x", f + 1000), None, "non-holder");
    assert_eq!(raise(&s, "raise:missing", b"h", 5), None);
    assert_eq!(status_of(&s, key).fence, f + 100);
    assert_eq!(release(&s, key, b"h"), 1);
    assert_eq!(raise(&s, key, b"h", f + 1000), None, "after release");
    assert!(grant(&s, key, b"y", LONG_TTL) > f + 100);
    assert!(grant(&s, "raise:other", b"y", LONG_TTL) > f + 100, "the high-water mark follows");
}

// ---------------------------------------------------------------------------------------
// CAD
// ---------------------------------------------------------------------------------------

#[test]
fn cad_deletes_only_an_equal_string() {
    let s = Server::start();
    let _: () = s.cmd(&["SET", "cad:k", "owner-1"]).unwrap();
    assert_eq!(cad(&s, "cad:k", b"owner-2"), 0);
    let v: String = s.cmd(&["GET", "cad:k"]).unwrap();
    assert_eq!(v, "owner-1");
    assert_eq!(cad(&s, "cad:k", b"owner-"), 0, "a prefix is not equal");
    assert_eq!(cad(&s, "cad:k", b"owner-1"), 1);
    let exists: i64 = s.cmd(&["EXISTS", "cad:k"]).unwrap();
    assert_eq!(exists, 0);
    assert_eq!(cad(&s, "cad:k", b"owner-1"), 0, "missing key");

    // Binary-safe, and integer-encoded strings compare by their text.
    let bin = binary_token(7);
    let _: () = s.query(redis::cmd("SET").arg("cad:bin").arg(&bin)).unwrap();
    assert_eq!(cad(&s, "cad:bin", &bin[..bin.len() - 1]), 0);
    assert_eq!(cad(&s, "cad:bin", &bin), 1);
    let _: () = s.cmd(&["SET", "cad:int", "12345"]).unwrap();
    assert_eq!(cad(&s, "cad:int", b"12345"), 1);
}

#[test]
fn cad_on_other_types_is_wrongtype_and_changes_nothing() {
    let s = Server::start();
    grant(&s, "cad:lock", b"tok", LONG_TTL);
    let _: () = s.cmd(&["RPUSH", "cad:list", "tok"]).unwrap();
    let _: () = s.cmd(&["HSET", "cad:hash", "f", "tok"]).unwrap();
    let keys = ["cad:lock", "cad:list", "cad:hash"];
    let before = fingerprint(&s, &keys);
    for key in keys {
        let err = expect_err(&s, &args!["FENCEDLOCK.CAD", key, "tok"]);
        assert!(err.starts_with("WRONGTYPE"), "CAD {key}: {err}");
    }
    assert_eq!(fingerprint(&s, &keys), before);
}

// ---------------------------------------------------------------------------------------
// Bad input: a clear error, and nothing changes
// ---------------------------------------------------------------------------------------

/// A server with a lock key (held), a string, a list and a hash, and the keys to fingerprint.
fn populated() -> (Server, [&'static str; 5]) {
    let s = Server::start();
    grant(&s, "bad:lock", b"holder", LONG_TTL);
    let _: () = s.cmd(&["SET", "bad:string", "v"]).unwrap();
    let _: () = s.cmd(&["RPUSH", "bad:list", "a", "b"]).unwrap();
    let _: () = s.cmd(&["HSET", "bad:hash", "f", "v"]).unwrap();
    (s, ["bad:lock", "bad:string", "bad:list", "bad:hash", "bad:missing"])
}

fn assert_refused(s: &Server, keys: &[&str], args: Vec<Vec<u8>>, prefix: &str) {
    let before = fingerprint(s, keys);
    let err = expect_err(s, &args);
    assert!(err.starts_with(prefix), "expected `{prefix}...` for {:?}, got {err:?}", shown(&args));
    assert_eq!(fingerprint(s, keys), before, "state changed after refused {:?}", shown(&args));
}

fn shown(args: &[Vec<u8>]) -> Vec<String> {
    args.iter().map(|a| String::from_utf8_lossy(&a[..a.len().min(24)]).into_owned()).collect()
}

#[test]
fn wrong_arity_is_refused() {
    let (s, keys) = populated();
    let arity = "ERR wrong number of arguments";
    let cases: Vec<Vec<Vec<u8>>> = vec![
        args!["FENCEDLOCK.ACQUIRE"],
        args!["FENCEDLOCK.ACQUIRE", "bad:lock"],
        args!["FENCEDLOCK.ACQUIRE", "bad:lock", "holder"],
        // More words than every option takes (BLOCK, LABEL and PERMITS with values, SHARED).
        args![
            "FENCEDLOCK.ACQUIRE",
            "bad:new",
            "t",
            "1000",
            "BLOCK",
            "1",
            "LABEL",
            "l",
            "PERMITS",
            "2",
            "SHARED",
            "x"
        ],
        args!["FENCEDLOCK.RENEW"],
        args!["FENCEDLOCK.RENEW", "bad:lock", "holder"],
        args!["FENCEDLOCK.RENEW", "bad:lock", "holder", "1000", "extra"],
        args!["FENCEDLOCK.RELEASE"],
        args!["FENCEDLOCK.RELEASE", "bad:lock"],
        args!["FENCEDLOCK.RELEASE", "bad:lock", "holder", "extra"],
        args!["FENCEDLOCK.CAD"],
        args!["FENCEDLOCK.CAD", "bad:string"],
        args!["FENCEDLOCK.CAD", "bad:string", "v", "extra"],
        args!["FENCEDLOCK.STATUS"],
        args!["FENCEDLOCK.STATUS", "bad:lock", "extra"],
        args!["FENCEDLOCK.RAISE", "bad:lock", "holder"],
        args!["FENCEDLOCK.RAISE", "bad:lock", "holder", "5", "extra"],
    ];
    for case in cases {
        assert_refused(&s, &keys, case, arity);
    }
    // A stray word after the ttl passes the arity check (it could be SHARED): the syntax error.
    assert_refused(
        &s,
        &keys,
        args!["FENCEDLOCK.ACQUIRE", "bad:new", "t", "1000", "extra"],
        "ERR syntax error",
    );
    assert!(status_of(&s, "bad:lock").held, "the holder still holds it");
}

#[test]
fn bad_ttls_are_refused() {
    let (s, keys) = populated();
    let max = DEFAULT_MAX_TTL_MS;
    let bad = [
        "abc".to_string(),
        "1.5".into(),
        "".into(),
        "0".into(),
        "-5".into(),
        "+5".into(),
        " 5".into(),
        "1e3".into(),
        (max + 1).to_string(),
        "9223372036854775808".into(),
        "99999999999999999999".into(),
    ];
    for ttl in &bad {
        for key in ["bad:new", "bad:lock"] {
            assert_refused(&s, &keys, args!["FENCEDLOCK.ACQUIRE", key, "holder", ttl.as_str()], "ERR ttl");
        }
        assert_refused(&s, &keys, args!["FENCEDLOCK.RENEW", "bad:lock", "holder", ttl.as_str()], "ERR ttl");
    }
    // The edge is accepted.
    assert!(grant(&s, "bad:edge", b"t", max) > 0);
    assert_eq!(renew(&s, "bad:edge", b"t", max), 1);
    assert!(grant(&s, "bad:one-ms", b"t", 1) > 0);
}

#[test]
fn token_length_is_checked() {
    let (s, keys) = populated();
    let long = vec![b'x'; MAX_TOKEN_LEN + 1];
    for token in [Vec::new(), long.clone()] {
        assert_refused(&s, &keys, args!["FENCEDLOCK.ACQUIRE", "bad:new", token.clone(), "1000"], "ERR token");
        assert_refused(
            &s,
            &keys,
            args!["FENCEDLOCK.ACQUIRE", "bad:lock", token.clone(), "1000"],
            "ERR token",
        );
        assert_refused(&s, &keys, args!["FENCEDLOCK.RENEW", "bad:lock", token.clone(), "1000"], "ERR token");
        assert_refused(&s, &keys, args!["FENCEDLOCK.RELEASE", "bad:lock", token.clone()], "ERR token");
    }
    // 512 bytes is the maximum and works end to end; 1 byte is the minimum.
    let max = vec![b'y'; MAX_TOKEN_LEN];
    let fence = grant(&s, "bad:max-token", &max, LONG_TTL);
    assert_eq!(grant(&s, "bad:max-token", &max, LONG_TTL), fence);
    assert_eq!(renew(&s, "bad:max-token", &max, LONG_TTL), 1);
    assert_eq!(release(&s, "bad:max-token", &max[..MAX_TOKEN_LEN - 1]), 0);
    assert_eq!(release(&s, "bad:max-token", &max), 1);
    assert!(grant(&s, "bad:min-token", b"z", LONG_TTL) > 0);
}

#[test]
fn other_types_are_wrongtype() {
    let (s, keys) = populated();
    for key in ["bad:string", "bad:list", "bad:hash"] {
        for args in [
            args!["FENCEDLOCK.ACQUIRE", key, "holder", "1000"],
            args!["FENCEDLOCK.RENEW", key, "holder", "1000"],
            args!["FENCEDLOCK.RELEASE", key, "holder"],
            args!["FENCEDLOCK.RAISE", key, "holder", "10"],
            args!["FENCEDLOCK.STATUS", key],
        ] {
            assert_refused(&s, &keys, args, "WRONGTYPE");
        }
    }
}

#[test]
fn apply_is_refused_from_clients_and_scripts() {
    let (s, keys) = populated();
    let fence = status_of(&s, "bad:lock").fence;
    let huge = (fence + 1_000_000).to_string();
    for args in [
        args!["FENCEDLOCK.APPLY", "bad:lock", huge.as_str(), huge.as_str(), "intruder", "60000000"],
        args!["FENCEDLOCK.APPLY", "bad:new", huge.as_str(), huge.as_str()],
        args!["FENCEDLOCK.APPLY", "bad:lock"],
    ] {
        assert_refused(&s, &keys, args, "ERR");
    }
    // A refused APPLY must be refused by the module, not be an unknown command.
    let err = expect_err(&s, &args!["FENCEDLOCK.APPLY", "bad:lock", "1", "1"]);
    assert!(!err.contains("unknown command"), "{err}");

    // Nor can a script launder it into a trusted context.
    let before = fingerprint(&s, &keys);
    let script =
        format!("return redis.call('FENCEDLOCK.APPLY', KEYS[1], '{huge}', '{huge}', 'intruder', '60000000')");
    let res: redis::RedisResult<Value> = s.query(redis::cmd("EVAL").arg(script).arg(1).arg("bad:lock"));
    assert!(res.is_err(), "APPLY from a script must be refused, got {res:?}");
    assert_eq!(fingerprint(&s, &keys), before);
    assert_eq!(release(&s, "bad:lock", b"intruder"), 0);
    assert_eq!(release(&s, "bad:lock", b"holder"), 1);
}

#[test]
fn bad_raise_fences_are_refused() {
    let (s, keys) = populated();
    for fence in ["0", "-1", "x", "9223372036854775808", ""] {
        assert_refused(&s, &keys, args!["FENCEDLOCK.RAISE", "bad:lock", "holder", fence], "ERR");
    }
}

// ---------------------------------------------------------------------------------------
// Tokens are secrets
// ---------------------------------------------------------------------------------------

#[test]
fn tokens_never_leak() {
    const SECRET: &str = "s3cr3t-Tok3n-f00dcafe";
    let s = Server::start();
    let _: () = s.cmd(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]).unwrap();

    // Listen to every keyspace event while the lease goes through its life.
    let mut sub = s.conn();
    sub.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut pubsub = sub.as_pubsub();
    pubsub.psubscribe("__key*__:*").unwrap();

    let key = "secret:lock";
    let fence = grant(&s, key, SECRET.as_bytes(), LONG_TTL);
    assert_eq!(grant(&s, key, SECRET.as_bytes(), LONG_TTL), fence);
    assert_eq!(renew(&s, key, SECRET.as_bytes(), LONG_TTL), 1);
    let _: () = s.cmd(&["SET", "secret:string", "v"]).unwrap();

    let mut replies: Vec<String> = Vec::new();
    replies.push(format!("{:?}", run(&s, &[b"FENCEDLOCK.STATUS", key.as_bytes()]).unwrap()));
    replies.push(format!("{:?}", run(&s, &[b"FENCEDLOCK.ACQUIRE", key.as_bytes(), b"intruder", b"1000"])));
    for args in [
        args!["FENCEDLOCK.ACQUIRE", key, SECRET, "0"],
        args!["FENCEDLOCK.ACQUIRE", key, SECRET, "abc"],
        args!["FENCEDLOCK.ACQUIRE", key, SECRET, "999999999999"],
        args!["FENCEDLOCK.RENEW", key, SECRET, "-1"],
        args!["FENCEDLOCK.ACQUIRE", "secret:string", SECRET, "1000"],
        args!["FENCEDLOCK.RENEW", "secret:string", SECRET, "1000"],
        args!["FENCEDLOCK.RELEASE", "secret:string", SECRET],
        args!["FENCEDLOCK.RAISE", key, SECRET, "0"],
        args!["FENCEDLOCK.ACQUIRE", key, SECRET],
        args!["FENCEDLOCK.APPLY", key, "1", "1", SECRET, "1000"],
        args!["FENCEDLOCK.CAD", key, SECRET],
    ] {
        replies.push(expect_err(&s, &args));
    }
    let info: String = s.cmd(&["INFO", "everything"]).unwrap();
    replies.push(info);
    let info_module: String = s.cmd(&["INFO", "fencedlock"]).unwrap();
    replies.push(info_module);
    replies.push(format!("{:?}", s.cmd::<Value>(&["DEBUG", "DIGEST-VALUE", key]).unwrap()));
    replies.push(format!("{:?}", s.cmd::<Value>(&["MEMORY", "USAGE", key]).unwrap()));
    assert_eq!(release(&s, key, SECRET.as_bytes()), 1);

    for r in &replies {
        assert!(!r.contains(SECRET) && !r.contains("s3cr3t"), "token leaked in a reply: {r}");
    }
    let mut events = Vec::new();
    while let Ok(msg) = pubsub.get_message() {
        events.push(format!("{} {:?}", msg.get_channel_name(), msg.get_payload::<Vec<u8>>()));
    }
    assert!(!events.is_empty(), "keyspace events were expected (ACQUIRE writes a key)");
    for e in &events {
        assert!(!e.contains(SECRET), "token leaked in a keyspace event: {e}");
    }
    let log = s.log_contents();
    assert!(!log.contains(SECRET), "token leaked in the server log");
}

// ---------------------------------------------------------------------------------------
// Configs
// ---------------------------------------------------------------------------------------

#[test]
fn max_ttl_config_is_settable_and_enforced() {
    let s = Server::start();
    let get = |name: &str| -> String {
        let v: Vec<String> = s.cmd(&["CONFIG", "GET", name]).unwrap();
        assert_eq!(v.len(), 2, "CONFIG GET {name}: {v:?}");
        v[1].clone()
    };
    assert_eq!(get("fencedlock.max-ttl-ms"), DEFAULT_MAX_TTL_MS.to_string());
    assert_eq!(get("fencedlock.restart-grace-ms"), "0");

    let _: () = s.cmd(&["CONFIG", "SET", "fencedlock.max-ttl-ms", "1000"]).unwrap();
    assert_eq!(get("fencedlock.max-ttl-ms"), "1000");
    let before = fingerprint(&s, &["cfg:lock"]);
    let err = expect_err(&s, &args!["FENCEDLOCK.ACQUIRE", "cfg:lock", "t", "1001"]);
    assert!(err.starts_with("ERR ttl"), "{err}");
    assert_eq!(fingerprint(&s, &["cfg:lock"]), before);
    let fence = grant(&s, "cfg:lock", b"t", 1000);
    let err = expect_err(&s, &args!["FENCEDLOCK.RENEW", "cfg:lock", "t", "1001"]);
    assert!(err.starts_with("ERR ttl"), "{err}");
    assert_eq!(renew(&s, "cfg:lock", b"t", 1000), 1);

    // Raising it again lets longer leases through.
    let _: () = s.cmd(&["CONFIG", "SET", "fencedlock.max-ttl-ms", "5000"]).unwrap();
    assert_eq!(renew(&s, "cfg:lock", b"t", 5000), 1);
    assert_eq!(status_of(&s, "cfg:lock").fence, fence);

    let bad: redis::RedisResult<()> = s.cmd(&["CONFIG", "SET", "fencedlock.max-ttl-ms", "abc"]);
    assert!(bad.is_err(), "a non-number is refused");
    assert_eq!(get("fencedlock.max-ttl-ms"), "5000");
    let _: () = s.cmd(&["CONFIG", "SET", "fencedlock.restart-grace-ms", "250"]).unwrap();
    assert_eq!(get("fencedlock.restart-grace-ms"), "250");
}

#[test]
fn configs_are_read_from_the_config_file() {
    let s = Server::builder().arg("fencedlock.max-ttl-ms", "2000").start();
    let v: Vec<String> = s.cmd(&["CONFIG", "GET", "fencedlock.max-ttl-ms"]).unwrap();
    assert_eq!(v[1], "2000");
    let err = expect_err(&s, &args!["FENCEDLOCK.ACQUIRE", "cfgfile:lock", "t", "2001"]);
    assert!(err.starts_with("ERR ttl"), "{err}");
    grant(&s, "cfgfile:lock", b"t", 2000);
}

// ---------------------------------------------------------------------------------------
// Redis's own key commands on lock keys
// ---------------------------------------------------------------------------------------

#[test]
fn memory_usage_and_type() {
    let s = Server::start();
    grant(&s, "mem:lock", &vec![b'q'; MAX_TOKEN_LEN], LONG_TTL);
    let bytes: i64 = s.cmd(&["MEMORY", "USAGE", "mem:lock"]).unwrap();
    assert!(bytes > 0, "MEMORY USAGE {bytes}");
    let ty: String = s.cmd(&["TYPE", "mem:lock"]).unwrap();
    assert!(is_lock_type(&ty), "TYPE of a lock key is the module type, got {ty}");
}

#[test]
fn dump_restore_and_copy_round_trip() {
    let s = Server::start();
    let token = binary_token(1);
    let fence = grant(&s, "dump:src", &token, LONG_TTL);
    let payload: Vec<u8> = s.cmd(&["DUMP", "dump:src"]).unwrap();

    let _: () = s.query(redis::cmd("RESTORE").arg("dump:dst").arg(0).arg(&payload)).unwrap();
    let st = status_of(&s, "dump:dst");
    assert_eq!((st.fence, st.held), (fence, true), "{st:?}");
    assert!(st.remaining.is_some_and(|d| !d.is_zero() && d <= Duration::from_millis(LONG_TTL)));
    assert_eq!(s.digest_value("dump:dst"), s.digest_value("dump:src"));
    // The (binary) token travelled with it: the holder can release the copy.
    assert_eq!(release(&s, "dump:dst", b"other"), 0);
    assert_eq!(release(&s, "dump:dst", &token), 1);
    assert!(status_of(&s, "dump:src").held, "the source is untouched");

    // RESTORE onto an existing key needs REPLACE.
    let busy = s.query::<()>(redis::cmd("RESTORE").arg("dump:dst").arg(0).arg(&payload));
    assert!(busy.is_err());
    let _: () = s.query(redis::cmd("RESTORE").arg("dump:dst").arg(0).arg(&payload).arg("REPLACE")).unwrap();
    assert!(status_of(&s, "dump:dst").held);

    let copied: i64 = s.cmd(&["COPY", "dump:src", "dump:copy"]).unwrap();
    assert_eq!(copied, 1);
    assert_eq!(status_of(&s, "dump:copy").fence, fence);
    assert_eq!(s.digest_value("dump:copy"), s.digest_value("dump:src"));
    assert_eq!(release(&s, "dump:copy", &token), 1);
    assert!(status_of(&s, "dump:src").held, "releasing the copy leaves the source held");
    assert!(!status_of(&s, "dump:copy").held);

    // Fences keep increasing past restored state.
    assert!(grant(&s, "dump:copy", b"next", LONG_TTL) > fence);
}

#[test]
fn corrupt_dump_payloads_are_refused_without_crashing() {
    let s = Server::start();
    let token = b"corrupt-test-token".to_vec();
    grant(&s, "corrupt:src", &token, LONG_TTL);
    let payload: Vec<u8> = s.cmd(&["DUMP", "corrupt:src"]).unwrap();
    let body = &payload[..payload.len() - 8];
    assert_eq!(
        harness::seal_dump(body),
        payload,
        "our CRC matches the server's, so tampered payloads reach the module"
    );
    // body = [type][module value ...][2-byte RDB version]
    let (value, version) = body.split_at(body.len() - 2);

    let restore =
        |p: &[u8]| s.query::<()>(redis::cmd("RESTORE").arg("corrupt:dst").arg(0).arg(p).arg("REPLACE"));

    // A bad checksum is refused by Redis itself.
    let mut bad_crc = payload.clone();
    *bad_crc.last_mut().unwrap() ^= 0x55;
    assert!(restore(&bad_crc).is_err());

    // RESTORE parses the value from the whole payload, footer included, and ignores what
    // is left over; so a cut value followed by the version and CRC bytes can still parse (a
    // trailing `uint` opcode reads the version byte as its number). Damage must therefore be
    // refused or yield a sane lock, never crash, and a refused RESTORE must leave no key.
    let check = |sealed: &[u8]| -> bool {
        match restore(sealed) {
            Err(_) => {
                let exists: i64 = s.cmd(&["EXISTS", "corrupt:dst"]).unwrap();
                assert_eq!(exists, 0, "a refused RESTORE left a key behind");
                false
            }
            Ok(()) => {
                match run(&s, &[b"FENCEDLOCK.STATUS", b"corrupt:dst"]) {
                    Ok(v) => assert!(decode_status(&v).is_some(), "a restored lock has a status"),
                    Err(e) => panic!("STATUS on a restored value failed: {}", error_text(&e)),
                }
                let _: i64 = s.cmd(&["DEL", "corrupt:dst"]).unwrap();
                true
            }
        }
    };

    let mut refused_cuts = 0;
    for cut in 0..value.len() {
        let mut body = value[..cut].to_vec();
        body.extend_from_slice(version);
        if !check(&harness::seal_dump(&body)) {
            refused_cuts += 1;
        }
    }
    assert!(
        refused_cuts * 4 >= value.len() * 3,
        "only {refused_cuts} of {} truncations were refused",
        value.len()
    );

    // Random byte damage, correctly sealed.
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut accepted = 0;
    for _ in 0..300 {
        let mut damaged = value.to_vec();
        for _ in 0..=(next() % 3) {
            let i = (next() % damaged.len() as u64) as usize;
            damaged[i] = next() as u8;
        }
        damaged.extend_from_slice(version);
        if check(&harness::seal_dump(&damaged)) {
            accepted += 1;
        }
    }
    let pong: String = s.cmd(&["PING"]).unwrap();
    assert_eq!(pong, "PONG", "the server survived ({accepted} damaged payloads were accepted)");
    assert!(status_of(&s, "corrupt:src").held);
}

/// A `DUMP` payload whose checksum is all zeros. Redis 8.6 takes it as one without a checksum,
/// so a tampered or cut value reaches the module's loader unchecked and the loader alone must
/// refuse it; every other server in the matrix refuses it for the checksum. Either way a bad
/// value makes no key, and an intact one restores as itself where the server takes it.
#[test]
fn a_zero_checksum_reaches_the_loader_only_where_the_server_skips_it() {
    let s = Server::start();
    let release = s.release();
    let fence = grant(&s, "zero:src", b"zero-crc-token", LONG_TTL);
    let payload: Vec<u8> = s.cmd(&["DUMP", "zero:src"]).unwrap();
    let zeroed = |body: &[u8]| [body, &[0u8; 8][..]].concat();
    let restore =
        |p: &[u8]| s.query::<()>(redis::cmd("RESTORE").arg("zero:dst").arg(0).arg(p).arg("REPLACE"));
    let exists = || s.cmd::<i64>(&["EXISTS", "zero:dst"]).unwrap() == 1;
    let checksum_refusal = |text: &str| text.contains("checksum");

    let (body, _) = payload.split_at(payload.len() - 8);
    match restore(&zeroed(body)) {
        Ok(()) => {
            assert!(release.restore_takes_a_zero_checksum(), "{release} took a zero checksum");
            let st = status_of(&s, "zero:dst");
            assert_eq!((st.fence, st.held), (fence, true), "{release}: the intact value restored");
        }
        Err(e) => {
            assert!(!release.restore_takes_a_zero_checksum(), "{release} refused: {}", error_text(&e));
            assert!(checksum_refusal(&error_text(&e)), "{release}: {}", error_text(&e));
            assert!(!exists(), "{release}: a refused RESTORE left a key");
        }
    }

    // The value cut in half, followed by the RDB version: refused by the loader when sealed
    // with a right checksum, so with a zero one it is refused by whichever checks first.
    let _: i64 = s.cmd(&["DEL", "zero:dst"]).unwrap();
    let (value, version) = body.split_at(body.len() - 2);
    let cut = [&value[..value.len() / 2], version].concat();
    let sealed = restore(&harness::seal_dump(&cut)).expect_err("the loader refuses the cut value");
    assert!(!checksum_refusal(&error_text(&sealed)), "{}", error_text(&sealed));
    let err = restore(&zeroed(&cut)).expect_err("a cut value with a zero checksum");
    assert_eq!(
        checksum_refusal(&error_text(&err)),
        !release.restore_takes_a_zero_checksum(),
        "{release}: who refused it: {}",
        error_text(&err)
    );
    assert!(!exists(), "{release}: a refused RESTORE left a key");
    assert!(status_of(&s, "zero:src").held, "the source is untouched");
}

// ---------------------------------------------------------------------------------------
// Observability
// ---------------------------------------------------------------------------------------

#[test]
fn info_counters_move() {
    let s = Server::start();
    let fields = info(&s);
    for f in [
        "fencedlock_grants",
        "fencedlock_contended",
        "fencedlock_renew_failures",
        "fencedlock_release_failures",
        "fencedlock_takeovers",
        "fencedlock_high_water_mark",
        "fencedlock_epoch",
    ] {
        let v = fields.get(f).unwrap_or_else(|| panic!("INFO fencedlock lacks {f}: {fields:?}"));
        v.parse::<u64>().unwrap_or_else(|_| panic!("{f}={v} is not a number"));
    }
    let c = |name: &str| s.fencedlock_counter(name);
    let (g0, cont0, rf0, relf0, to0) = (
        c("fencedlock_grants"),
        c("fencedlock_contended"),
        c("fencedlock_renew_failures"),
        c("fencedlock_release_failures"),
        c("fencedlock_takeovers"),
    );

    let f1 = grant(&s, "info:a", b"a", 50);
    let f2 = grant(&s, "info:b", b"b", LONG_TTL);
    assert_eq!(c("fencedlock_grants"), g0 + 2);
    assert_eq!(c("fencedlock_high_water_mark"), f2);

    assert_eq!(acquire(&s, "info:b", b"x", LONG_TTL), None);
    assert_eq!(acquire(&s, "info:b", b"y", LONG_TTL), None);
    assert_eq!(c("fencedlock_contended"), cont0 + 2);

    assert_eq!(renew(&s, "info:b", b"x", 1000), 0);
    assert_eq!(c("fencedlock_renew_failures"), rf0 + 1);

    assert_eq!(release(&s, "info:b", b"x"), 0);
    assert_eq!(c("fencedlock_release_failures"), relf0 + 1);

    wait_expired(&s, "info:a");
    assert_eq!(release(&s, "info:a", b"a"), 0, "a late release");
    assert_eq!(c("fencedlock_release_failures"), relf0 + 2);
    let f3 = grant(&s, "info:a", b"c", LONG_TTL);
    assert!(f3 > f1);
    assert_eq!(c("fencedlock_takeovers"), to0 + 1);
    assert_eq!(c("fencedlock_grants"), g0 + 3);
    assert_eq!(c("fencedlock_high_water_mark"), f3);

    // Refused input moves no counter.
    let before = info(&s);
    let _ = expect_err(&s, &args!["FENCEDLOCK.ACQUIRE", "info:b", "x", "0"]);
    let _ = expect_err(&s, &args!["FENCEDLOCK.RENEW", "info:b", "", "10"]);
    assert_eq!(info(&s), before);
}

#[test]
fn commands_declare_their_key_and_flags() {
    let s = Server::start();
    let cases: [(&str, &[&str], bool); 6] = [
        ("fencedlock.acquire", &["tok", "1000"], true),
        ("fencedlock.renew", &["tok", "1000"], true),
        ("fencedlock.release", &["tok"], true),
        ("fencedlock.raise", &["tok", "5"], true),
        ("fencedlock.cad", &["value"], true),
        ("fencedlock.status", &[], false),
    ];
    for (cmd, rest, write) in cases {
        let keys: Vec<String> = s
            .query(redis::cmd("COMMAND").arg("GETKEYS").arg(cmd).arg("the-key").arg(rest))
            .unwrap_or_else(|e| panic!("COMMAND GETKEYS {cmd}: {}", error_text(&e)));
        assert_eq!(keys, ["the-key"], "{cmd}");
        let info: Value = s.cmd(&["COMMAND", "INFO", cmd]).unwrap();
        let text = format!("{info:?}");
        assert_eq!(text.contains("\"write\""), write, "{cmd} flags: {text}");
        if !write {
            assert!(text.contains("readonly"), "{cmd} flags: {text}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// redis-cli, as a reader of the docs types it
// ---------------------------------------------------------------------------------------

#[test]
fn redis_cli_session() {
    let s = Server::start();
    let cli = |args: &[&str]| -> String {
        let out = s.redis_cli(args);
        assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    };
    let fence_a: u64 =
        cli(&["FENCEDLOCK.ACQUIRE", "invoice:42", "worker-a", "500"]).parse().expect("a fence");
    assert_eq!(cli(&["FENCEDLOCK.ACQUIRE", "invoice:42", "worker-b", "30000"]), "", "nil prints empty");
    let status = cli(&["FENCEDLOCK.STATUS", "invoice:42"]);
    let lines: Vec<&str> = status.lines().collect();
    assert_eq!(lines.len(), 3, "{status}");
    assert_eq!(lines[0], fence_a.to_string());
    assert_eq!(lines[1], "1");

    // Three redis-cli processes ran within A's lease; now its expiry is polled (bounded).
    wait_expired(&s, "invoice:42");
    let fence_b: u64 =
        cli(&["FENCEDLOCK.ACQUIRE", "invoice:42", "worker-b", "30000"]).parse().expect("a fence");
    assert!(fence_b > fence_a);
    assert_eq!(cli(&["FENCEDLOCK.RENEW", "invoice:42", "worker-a", "30000"]), "0");
    assert_eq!(cli(&["FENCEDLOCK.RELEASE", "invoice:42", "worker-a"]), "0");
    assert_eq!(cli(&["FENCEDLOCK.RENEW", "invoice:42", "worker-b", "30000"]), "1");
    assert_eq!(cli(&["FENCEDLOCK.RELEASE", "invoice:42", "worker-b"]), "1");
    assert_eq!(cli(&["FENCEDLOCK.STATUS", "invoice:42"]), format!("{fence_b}\n0\n-1"));
    assert_eq!(cli(&["FENCEDLOCK.STATUS", "nothing-here"]), "");
    assert_eq!(cli(&["SET", "job:owner", "me"]), "OK");
    assert_eq!(cli(&["FENCEDLOCK.CAD", "job:owner", "you"]), "0");
    assert_eq!(cli(&["FENCEDLOCK.CAD", "job:owner", "me"]), "1");
    let err = cli(&["FENCEDLOCK.ACQUIRE", "invoice:42", "worker-c", "0"]);
    assert!(err.contains("ERR ttl"), "{err}");
    let err = cli(&["FENCEDLOCK.ACQUIRE", "job:list"]);
    assert!(err.contains("wrong number of arguments"), "{err}");
    let help = cli(&["COMMAND", "INFO", "FENCEDLOCK.ACQUIRE"]);
    assert!(help.to_lowercase().contains("fencedlock.acquire"), "{help}");
}

// ---------------------------------------------------------------------------------------
// Cluster routing: the key is declared, so only its slot's owner serves it
// ---------------------------------------------------------------------------------------

#[test]
fn commands_route_by_key_in_a_cluster() {
    let cluster = harness::Cluster::builder().start();
    let mut granted = Vec::new();
    for node in cluster.nodes() {
        match try_acquire(node, "cluster:lock", b"t", LONG_TTL) {
            Ok(Some(fence)) => granted.push((node.port(), fence)),
            Ok(None) => panic!("{}: refused a free lock", node.addr()),
            Err(e) => assert!(error_text(&e).starts_with("MOVED"), "{}", error_text(&e)),
        }
    }
    assert_eq!(granted.len(), 1, "exactly the slot owner grants: {granted:?}");
    let owner = cluster.nodes().iter().find(|n| n.port() == granted[0].0).expect("owner");
    assert_eq!(status_of(owner, "cluster:lock").fence, granted[0].1);
    let out = owner.redis_cli(["-c", "FENCEDLOCK.STATUS", "cluster:lock"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().next(), Some(granted[0].1.to_string().as_str()));
}
