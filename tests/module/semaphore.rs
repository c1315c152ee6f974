//! Fenced semaphores (issue #14): `FENCEDLOCK.ACQUIRE … PERMITS n` against a real server of the
//! flavor in `FENCEDLOCK_FLAVOR`, through raw commands.
//!
//! Up to `n` tokens hold a semaphore key at once, each with its own fence (fences strictly
//! increase over every grant on the key), ttl and label. Cases: bad counts and the internal
//! `APPLYSEM` refused without a change; grants, re-entry, `RENEW` / `RELEASE` by token, expiry
//! of one holder; another count refused while held, taking effect once idle; the `STATUS`
//! shape (never a token); `BLOCK` waiters served in arrival order as permits free, at a
//! release, two releases at once and an expiry, no barging, a waiter whose count no longer
//! matches; replicas, AOF and RDB restarts, `DUMP`/`RESTORE`, `COPY`, `RENAME`, reclaim; and
//! 16 clients contending for 3 permits.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use fencedlock_protocol::command::{ACQUIRE, APPLYSEM, LABEL, PERMITS, RELEASE};
use fencedlock_protocol::config::RECLAIM_AFTER_MS;
use fencedlock_protocol::limits::MAX_PERMITS;
use fencedlock_protocol::{ReplyError, SemaphoreStatus};
use harness::{acquire_cmd, classify, epoch_of, error_text, poll, redis, BlockedAcquire, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{RedisResult, Value};

use crate::support::*;

/// Bound on a reply that must come (a hang fails the test instead of CI).
const REPLY: Duration = Duration::from_secs(10);
/// Bound on how late an expired permit is handed over after its deadline.
const LATE: Duration = Duration::from_millis(100);
/// Rounding between the server's clocks (µs, ms) and the client's.
const SLACK: Duration = Duration::from_millis(1);

/// `ACQUIRE key token ttl_ms [PERMITS n] [LABEL label] [BLOCK timeout_ms]` as a command.
fn sem_cmd(key: &str, token: &str, ttl_ms: u64, permits: Option<u32>, label: Option<&[u8]>) -> redis::Cmd {
    let mut cmd = acquire_cmd(key, token.as_bytes(), ttl_ms, None);
    if let Some(n) = permits {
        cmd.arg(PERMITS).arg(n);
    }
    if let Some(label) = label {
        cmd.arg(LABEL).arg(label);
    }
    cmd
}

/// `ACQUIRE … PERMITS n`: `Ok(Some(fence))` granted, `Ok(None)` nil, or the error reply.
fn try_sem(s: &Server, key: &str, token: &str, ttl_ms: u64, permits: u32) -> RedisResult<Option<u64>> {
    s.query(&sem_cmd(key, token, ttl_ms, Some(permits), None))
}

/// `ACQUIRE … PERMITS n` that must grant (or re-enter): the fence.
fn sem_grant(s: &Server, key: &str, token: &str, ttl_ms: u64, permits: u32) -> u64 {
    try_sem(s, key, token, ttl_ms, permits)
        .unwrap_or_else(|e| panic!("ACQUIRE {key} {token} PERMITS {permits}: {}", error_text(&e)))
        .unwrap_or_else(|| panic!("ACQUIRE {key} {token} PERMITS {permits} was refused"))
}

/// `ACQUIRE … PERMITS n` that must answer nil (every permit held, or others wait).
fn sem_nil(s: &Server, key: &str, token: &str, permits: u32) {
    let reply = try_sem(s, key, token, LONG_TTL, permits);
    assert!(matches!(reply, Ok(None)), "ACQUIRE {key} {token} PERMITS {permits} must be nil: {reply:?}");
}

/// An `ACQUIRE` (with `PERMITS n` when given) that must be refused with an error: the error.
fn sem_error(s: &Server, key: &str, token: &str, permits: Option<u32>) -> redis::RedisError {
    match s.query::<Option<u64>>(&sem_cmd(key, token, LONG_TTL, permits, None)) {
        Err(e) => e,
        Ok(v) => panic!("ACQUIRE {key} {token} PERMITS {permits:?} must be refused, got {v:?}"),
    }
}

/// Asserts that `err` is the count mismatch naming the key's count `permits`.
fn assert_mismatch(err: &redis::RedisError, permits: u64, what: &str) {
    assert_eq!(classify(err), Some(ReplyError::PermitsMismatch), "{what}: {}", error_text(err));
    assert_eq!(error_text(err), ReplyError::PermitsMismatch.message(permits), "{what}: the key's count");
}

/// A key's `STATUS` as a semaphore (a mutex is one permit); panics when it has no lock state.
fn sem(s: &Server, key: &str) -> SemaphoreStatus {
    s.semaphore_status(key).unwrap_or_else(|| panic!("STATUS {key} is nil"))
}

/// The holders' fences, in `STATUS` order.
fn fences(st: &SemaphoreStatus) -> Vec<u64> {
    st.holders.iter().map(|h| h.fence).collect()
}

/// The time left on the permit with `fence`.
fn remaining(st: &SemaphoreStatus, fence: u64) -> Duration {
    st.holders
        .iter()
        .find(|h| h.fence == fence)
        .unwrap_or_else(|| panic!("no holder {fence}: {st:?}"))
        .remaining
}

/// A key's `STATUS` with every holder's time left zeroed (it moves with time): what a refused
/// command must leave as it was, and what a copy, replica or restart must show.
fn masked(s: &Server, key: &str) -> Option<SemaphoreStatus> {
    s.semaphore_status(key).map(|mut st| {
        for h in &mut st.holders {
            h.remaining = Duration::ZERO;
        }
        st
    })
}

/// Everything a refused command must leave alone: the dataset digest, each key's status (time
/// left aside), the high-water mark, the grants counter and the queue.
fn state(s: &Server, keys: &[&str]) -> (String, Vec<Option<SemaphoreStatus>>, u64, u64, u64) {
    let statuses = keys.iter().map(|k| masked(s, k)).collect();
    (s.digest(), statuses, s.high_water(), s.fencedlock_counter("fencedlock_grants"), s.waiters())
}

/// The raw `STATUS` reply, to check its shape (not only its decoding).
fn raw_status(s: &Server, key: &str) -> Value {
    s.cmd(&[fencedlock_protocol::command::STATUS.name, key])
        .unwrap_or_else(|e| panic!("STATUS {key}: {}", error_text(&e)))
}

/// Send `ACQUIRE … PERMITS n BLOCK 0` on a connection of its own and wait until the server has
/// blocked it: it is queued behind every waiter queued before.
fn queue(s: &Server, key: &str, token: &str, ttl_ms: u64, permits: u32) -> BlockedAcquire {
    let mut cmd = acquire_cmd(key, token.as_bytes(), ttl_ms, Some(0));
    cmd.arg(PERMITS).arg(permits);
    let w = s.send_acquire_cmd(&cmd);
    w.wait_blocked(s, REPLY);
    w
}

// ---------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------

#[test]
fn bad_counts_and_the_internal_record_are_refused_and_change_nothing() {
    let s = Server::start();
    let (semaphore, mutex, free) = ("sem:bad:sem", "sem:bad:mutex", "sem:bad:free");
    sem_grant(&s, semaphore, "holder", LONG_TTL, 3);
    sem_grant(&s, semaphore, "second", LONG_TTL, 3);
    grant(&s, mutex, b"holder", LONG_TTL);
    let keys = [semaphore, mutex, free];
    let too_many = (MAX_PERMITS + 1).to_string();
    let mut cases: Vec<(Vec<Vec<u8>>, Option<ReplyError>)> = Vec::new();
    for key in keys {
        for token in ["holder", "newcomer"] {
            let base = args![ACQUIRE.name, key, token, LONG_TTL];
            let with = |extra: &[&str]| with_words(&base, extra);
            for bad in
                ["0", too_many.as_str(), "-1", "x", "", "3.0", " 3", "18446744073709551619", "4294967299"]
            {
                cases.push((with(&[PERMITS, bad]), Some(ReplyError::BadPermits)));
                // A bad count with BLOCK is refused at once, never queued.
                cases.push((with(&["BLOCK", "0", PERMITS, bad]), Some(ReplyError::BadPermits)));
            }
            cases.push((with(&[PERMITS, "3", PERMITS, "3"]), Some(ReplyError::Syntax)));
            cases.push((with(&[PERMITS, "2", "permits", "3"]), Some(ReplyError::Syntax)));
            cases.push((with(&["PERMIT", "3"]), Some(ReplyError::Syntax)));
            cases.push((with(&[PERMITS, "3", "BLOCK", "x"]), Some(ReplyError::BadTimeout)));
            // An option without its value: the module's syntax error; more words than all the
            // options take: Redis's own arity error.
            cases.push((with(&[PERMITS]), Some(ReplyError::Syntax)));
            cases.push((with(&[LABEL, "a", PERMITS]), Some(ReplyError::Syntax)));
            cases.push((with(&[PERMITS, "3", LABEL, "a", "BLOCK", "1", PERMITS, "3"]), None));
        }
        cases.push((args![ACQUIRE.name, key, "t", "0", PERMITS, "3"], Some(ReplyError::BadTtl)));
        cases.push((args![ACQUIRE.name, key, "", LONG_TTL, PERMITS, "3"], Some(ReplyError::BadToken)));
        // The internal record, from a client, even well formed in appearance.
        cases.push((
            args![APPLYSEM.name, key, "99999", "99999", "3", "junk"],
            Some(ReplyError::InternalCommand),
        ));
        cases.push((args![APPLYSEM.name, key, "1", "1", "3", ""], Some(ReplyError::InternalCommand)));
        cases.push((args![APPLYSEM.name, key], None));
    }
    assert_refused_unchanged(&s, cases, || state(&s, &keys), |_| {});

    // Nor from a script (the command is deny-script).
    let before = state(&s, &keys);
    let script = format!("return redis.call('{}', KEYS[1], '99999', '99999', '3', 'junk')", APPLYSEM.name);
    let res: RedisResult<Value> = s.query(redis::cmd("EVAL").arg(script).arg(1).arg(semaphore));
    assert!(res.is_err(), "APPLYSEM from a script must be refused, got {res:?}");
    assert_eq!(state(&s, &keys), before, "a refused scripted APPLYSEM changed something");

    // The bounds themselves are accepted: MAX_PERMITS, and 1 (the mutex).
    let top = sem_grant(&s, "sem:bad:max", "t", LONG_TTL, MAX_PERMITS);
    let st = sem(&s, "sem:bad:max");
    assert_eq!((st.fence, st.permits, fences(&st)), (top, MAX_PERMITS, vec![top]));
    let one = sem_grant(&s, "sem:bad:one", "t", LONG_TTL, 1);
    let st = status_of(&s, "sem:bad:one");
    assert_eq!((st.fence, st.held), (one, true), "PERMITS 1 is the mutex, with its STATUS shape");
}

// ---------------------------------------------------------------------------------------
// Grants, re-entry, renew, release, expiry
// ---------------------------------------------------------------------------------------

#[test]
fn n_permits_admit_n_holders_each_with_its_own_rising_fence() {
    let s = Server::start();
    let key = "sem:basic";
    let grants = s.fencedlock_counter("fencedlock_grants");
    let f: Vec<u64> = ["a", "b", "c"].iter().map(|t| sem_grant(&s, key, t, LONG_TTL, 3)).collect();
    assert!(f.windows(2).all(|w| w[1] > w[0]), "fences strictly increase: {f:?}");
    assert!(f[0] > 0);
    sem_nil(&s, key, "d", 3);
    let st = sem(&s, key);
    assert_eq!((st.fence, st.permits, fences(&st)), (f[2], 3, f.clone()), "{st:?}");
    assert_eq!(s.fencedlock_counter("fencedlock_grants"), grants + 3, "every permit grant counts");

    // Re-entry by a holder: its own fence, its lease restarted at the new ttl, no new fence.
    let high_water = s.high_water();
    assert_eq!(sem_grant(&s, key, "b", 2_000, 3), f[1]);
    assert!(remaining(&sem(&s, key), f[1]) <= Duration::from_millis(2_000), "restarted, not extended");
    assert_eq!(sem_grant(&s, key, "b", LONG_TTL, 3), f[1]);
    assert!(remaining(&sem(&s, key), f[1]) > Duration::from_millis(2_000));
    assert_eq!(s.high_water(), high_water, "a re-entry issues no fence");

    // RENEW acts on the caller's own permit only.
    assert_eq!(renew(&s, key, b"a", 3_000), 1);
    let st = sem(&s, key);
    assert!(remaining(&st, f[0]) <= Duration::from_millis(3_000), "{st:?}");
    assert!(
        remaining(&st, f[1]) > Duration::from_millis(3_000)
            && remaining(&st, f[2]) > Duration::from_millis(3_000)
    );
    assert_eq!(renew(&s, key, b"d", LONG_TTL), 0, "a non-holder renews nothing");
    // RAISE (fenced Redlock) has no semaphores: nil, nothing raised.
    assert_eq!(raise(&s, key, b"a", f[2] + 1_000), None);
    assert_eq!(sem(&s, key).fence, f[2]);

    // RELEASE frees exactly one permit: the caller's.
    assert_eq!(release(&s, key, b"b"), 1);
    assert_eq!(release(&s, key, b"b"), 0, "released once");
    assert_eq!(release(&s, key, b"d"), 0);
    assert_eq!(fences(&sem(&s, key)), [f[0], f[2]]);
    let d = sem_grant(&s, key, "d", LONG_TTL, 3);
    assert!(d > f[2], "the freed permit gets a new fence {d} above {}", f[2]);
    sem_nil(&s, key, "e", 3);
    sem_nil(&s, key, "b", 3);
    assert_eq!(fences(&sem(&s, key)), [f[0], f[2], d]);

    // After all leave, the key keeps its fence and count.
    for t in [b"a", b"c", b"d"] {
        assert_eq!(release(&s, key, t), 1);
    }
    assert_eq!(
        raw_status(&s, key),
        Value::Array(vec![Value::Int(d as i64), Value::Int(0), Value::Int(3), Value::Array(vec![])])
    );
    let next = sem_grant(&s, key, "a", LONG_TTL, 3);
    assert!(next > d, "a returning token gets a new fence: {next} after {d}");
}

#[test]
fn the_expiry_of_one_holder_frees_exactly_one_permit() {
    let s = Server::start();
    let key = "sem:expiry";
    let short = sem_grant(&s, key, "short", 300, 2);
    let long = sem_grant(&s, key, "long", LONG_TTL, 2);
    sem_nil(&s, key, "x", 2);
    poll("the short permit to expire", Duration::from_secs(5), || sem(&s, key).holders.len() == 1);
    let st = sem(&s, key);
    assert_eq!((st.fence, fences(&st)), (long, vec![long]), "only the expired holder left");
    let x = sem_grant(&s, key, "x", LONG_TTL, 2);
    assert!(x > long && long > short);
    sem_nil(&s, key, "y", 2);
    assert_eq!(renew(&s, key, b"short", LONG_TTL), 0, "an expired permit is not renewed");
    assert_eq!(release(&s, key, b"short"), 0);
    sem_nil(&s, key, "short", 2);
    assert_eq!(fences(&sem(&s, key)), [long, x]);
}

// ---------------------------------------------------------------------------------------
// The key's count
// ---------------------------------------------------------------------------------------

#[test]
fn another_count_is_refused_while_held_and_takes_effect_once_idle() {
    let s = Server::start();
    let key = "sem:count";
    sem_grant(&s, key, "a", LONG_TTL, 3);
    let b = sem_grant(&s, key, "b", LONG_TTL, 3);
    let before = state(&s, &[key]);
    // Newcomers and the holders' own re-entry alike; with BLOCK it is answered at once.
    for (token, permits) in [
        ("c", Some(2)),
        ("c", None),
        ("c", Some(1)),
        ("c", Some(4)),
        ("a", Some(2)),
        ("a", None),
        ("b", Some(MAX_PERMITS)),
    ] {
        let what = format!("{token} PERMITS {permits:?} on a key held with 3");
        assert_mismatch(&sem_error(&s, key, token, permits), 3, &what);
        let mut cmd = sem_cmd(key, token, LONG_TTL, permits, None);
        cmd.arg("BLOCK").arg(0);
        let reply = s.send_acquire_cmd(&cmd).reply(REPLY);
        assert_eq!(reply.error_kind(), Some(ReplyError::PermitsMismatch), "{what}, BLOCK: {reply:?}");
        assert_eq!(state(&s, &[key]), before, "{what} changed something");
    }
    // Operators see the disagreement: each refusal, plain and blocking, counts.
    assert_eq!(s.fencedlock_counter("fencedlock_permits_mismatches"), 14);

    // A held mutex is a count of 1.
    let mutex = "sem:count:mutex";
    let m = grant(&s, mutex, b"holder", LONG_TTL);
    for token in ["holder", "other"] {
        assert_mismatch(&sem_error(&s, mutex, token, Some(3)), 1, &format!("{token} PERMITS 3 on a mutex"));
    }
    assert_eq!(sem_grant(&s, mutex, "holder", LONG_TTL, 1), m, "PERMITS 1 re-enters the mutex");
    sem_nil(&s, mutex, "other", 1);
    let st = status_of(&s, mutex);
    assert_eq!((st.fence, st.held), (m, true), "still the mutex");

    // Once every holder left, the next grant sets the count anew.
    assert_eq!((release(&s, key, b"a"), release(&s, key, b"b")), (1, 1));
    let c = sem_grant(&s, key, "c", LONG_TTL, 2);
    assert!(c > b);
    let d = sem_grant(&s, key, "d", LONG_TTL, 2);
    sem_nil(&s, key, "e", 2);
    assert_mismatch(&sem_error(&s, key, "e", Some(3)), 2, "the new count holds");
    let st = sem(&s, key);
    assert_eq!((st.fence, st.permits, fences(&st)), (d, 2, vec![c, d]));
    // An idle semaphore becomes a mutex again, with the mutex's STATUS shape.
    assert_eq!((release(&s, key, b"c"), release(&s, key, b"d")), (1, 1));
    let plain = grant(&s, key, b"m", LONG_TTL);
    assert!(plain > d);
    let st = status_of(&s, key);
    assert_eq!((st.fence, st.held), (plain, true));
    assert_mismatch(&sem_error(&s, key, "x", Some(2)), 1, "a semaphore turned mutex");
    // An idle mutex becomes a semaphore.
    assert_eq!(release(&s, mutex, b"holder"), 1);
    let big = sem_grant(&s, mutex, "x", LONG_TTL, 5);
    let st = sem(&s, mutex);
    assert_eq!((st.fence, st.permits, fences(&st)), (big, 5, vec![big]));
    assert!(big > m);

    // Expired holders have left too.
    let lapsed = "sem:count:lapsed";
    sem_grant(&s, lapsed, "a", 150, 3);
    sem_grant(&s, lapsed, "b", 150, 3);
    assert_mismatch(&sem_error(&s, lapsed, "c", Some(4)), 3, "while the holders run");
    poll("both permits to expire", Duration::from_secs(5), || sem(&s, lapsed).holders.is_empty());
    sem_grant(&s, lapsed, "c", LONG_TTL, 4);
    assert_eq!(sem(&s, lapsed).permits, 4);
}

// ---------------------------------------------------------------------------------------
// STATUS
// ---------------------------------------------------------------------------------------

/// Every bulk string anywhere in a reply.
fn bulk_strings(v: &Value, out: &mut Vec<Vec<u8>>) {
    match v {
        Value::BulkString(b) => out.push(b.clone()),
        Value::Array(items) => items.iter().for_each(|i| bulk_strings(i, out)),
        _ => {}
    }
}

#[test]
fn status_lists_every_unexpired_holder_oldest_first_and_never_a_token() {
    let s = Server::start();
    let key = "sem:status";
    let tokens = ["secret-token-alpha", "secret-token-beta", "secret-token-gamma"];
    let label: &[u8] = b"node \x00\xff\r\n7";
    let a: Option<u64> = s.query(&sem_cmd(key, tokens[0], LONG_TTL, Some(4), Some(b"node-a"))).unwrap();
    let b = sem_grant(&s, key, tokens[1], 5_000, 4);
    let c: Option<u64> = s.query(&sem_cmd(key, tokens[2], LONG_TTL, Some(4), Some(label))).unwrap();
    let (a, c) = (a.expect("granted"), c.expect("granted"));
    let reply = raw_status(&s, key);
    let Value::Array(items) = &reply else { panic!("STATUS replied {reply:?}") };
    assert_eq!(items[..3], [Value::Int(c as i64), Value::Int(3), Value::Int(4)], "{reply:?}");
    let Value::Array(holders) = &items[3] else { panic!("the holders are an array: {reply:?}") };
    let expect = [
        (a, Some(b"node-a".to_vec()), 5_000, LONG_TTL),
        (b, None, 0, 5_000),
        (c, Some(label.to_vec()), 5_000, LONG_TTL),
    ];
    assert_eq!(holders.len(), expect.len(), "{reply:?}");
    for (holder, (fence, label, above, at_most)) in holders.iter().zip(expect) {
        let Value::Array(entry) = holder else { panic!("a holder is an array: {reply:?}") };
        assert_eq!(entry.len(), 3, "[fence, pttl, label]: {reply:?}");
        assert_eq!(entry[0], Value::Int(fence as i64), "lowest fence first: {reply:?}");
        assert!(
            matches!(entry[1], Value::Int(ms) if ms as u64 > above && ms as u64 <= at_most),
            "pttl of {fence}: {reply:?}"
        );
        assert_eq!(entry[2], label.map_or(Value::Nil, Value::BulkString), "label of {fence}");
    }
    let mut bulks = Vec::new();
    bulk_strings(&reply, &mut bulks);
    for token in tokens {
        assert!(
            !bulks.iter().any(|b| b.windows(token.len()).any(|w| w == token.as_bytes())),
            "STATUS shows a token: {reply:?}"
        );
    }

    // Labels: a re-entry with LABEL replaces, without keeps; a holder without one may add one.
    let labels = |s: &Server| sem(s, key).holders.into_iter().map(|h| h.label).collect::<Vec<_>>();
    let _: Option<u64> = s.query(&sem_cmd(key, tokens[0], LONG_TTL, Some(4), Some(b"node-a2"))).unwrap();
    assert_eq!(sem_grant(&s, key, tokens[2], LONG_TTL, 4), c);
    let _: Option<u64> = s.query(&sem_cmd(key, tokens[1], LONG_TTL, Some(4), Some(b"node-b"))).unwrap();
    assert_eq!(labels(&s), [Some(b"node-a2".to_vec()), Some(b"node-b".to_vec()), Some(label.to_vec())]);
    assert_eq!(fences(&sem(&s, key)), [a, b, c], "re-entries keep the order");

    // Idle: `[fence, 0, permits, []]`; a missing key: nil.
    for t in tokens {
        assert_eq!(release(&s, key, t.as_bytes()), 1);
    }
    assert_eq!(
        raw_status(&s, key),
        Value::Array(vec![Value::Int(c as i64), Value::Int(0), Value::Int(4), Value::Array(vec![])])
    );
    assert_eq!(raw_status(&s, "sem:status:missing"), Value::Nil);
}

// ---------------------------------------------------------------------------------------
// BLOCK
// ---------------------------------------------------------------------------------------

#[test]
fn waiters_are_granted_in_arrival_order_as_permits_free() {
    const TTL: Duration = Duration::from_millis(300);
    let s = Server::start();
    let key = "sem:fifo";
    sem_grant(&s, key, "h1", LONG_TTL, 2);
    let top = sem_grant(&s, key, "h2", LONG_TTL, 2);
    // w3's lease, once granted, is short: its expiry hands over to w4.
    let ttl = |i: usize| if i == 3 { TTL.as_millis() as u64 } else { LONG_TTL };
    let mut w: Vec<BlockedAcquire> = (0..5).map(|i| queue(&s, key, &format!("w{i}"), ttl(i), 2)).collect();
    assert_eq!(s.waiters(), 5);
    sem_nil(&s, key, "barger", 2);

    // One release: the head, and only the head.
    assert_eq!(release(&s, key, b"h1"), 1);
    assert_eq!(w[0].reply(REPLY).fence(), top + 1);
    s.wait_waiters(4, REPLY);
    assert!(w[1..].iter().all(|w| w.is_blocked(&s)));
    sem_nil(&s, key, "barger", 2);
    assert_eq!(release(&s, key, b"h2"), 1);
    assert_eq!(w[1].reply(REPLY).fence(), top + 2);
    s.wait_waiters(3, REPLY);

    // Two releases at once (one transaction) free two permits: the next two heads, in order.
    let mut conn = s.conn();
    let multi_sent = Instant::now();
    let released: Vec<i64> = redis::pipe()
        .atomic()
        .cmd(RELEASE.name)
        .arg(key)
        .arg("w0")
        .cmd(RELEASE.name)
        .arg(key)
        .arg("w1")
        .query(&mut conn)
        .unwrap_or_else(|e| panic!("MULTI RELEASE RELEASE: {}", error_text(&e)));
    assert_eq!(released, [1, 1]);
    let (r2, r3) = (w[2].reply(REPLY), w[3].reply(REPLY));
    assert_eq!((r2.fence(), r3.fence()), (top + 3, top + 4), "the two heads, in arrival order");
    s.wait_waiters(1, REPLY);
    assert!(w[4].is_blocked(&s), "the fifth still waits: two permits, two grants");

    // An expiry grants at the holder's deadline: w3's lease ran TTL from its grant.
    let r4 = w[4].reply(REPLY);
    assert_eq!(r4.fence(), top + 5);
    assert!(
        r4.at + SLACK >= multi_sent + TTL,
        "granted {:?} before the deadline",
        (multi_sent + TTL) - r4.at
    );
    let late = r4.at.saturating_duration_since(r3.at + TTL);
    assert!(late < LATE, "handed over {late:?} after the deadline");
    assert_eq!(s.waiters(), 0);
    let st = sem(&s, key);
    assert_eq!((st.fence, st.permits, fences(&st)), (top + 5, 2, vec![top + 3, top + 5]));
    eprintln!("semaphore expiry handoff: {:.2} ms after the deadline at most", late.as_secs_f64() * 1e3);
}

#[test]
fn nobody_barges_past_waiters_at_an_expiry() {
    const TTL: Duration = Duration::from_millis(300);
    let s = Server::start();
    let key = "sem:barge";
    let kept = sem_grant(&s, key, "kept", LONG_TTL, 2);
    let sent = Instant::now();
    let short = sem_grant(&s, key, "short", TTL.as_millis() as u64, 2);
    let mut w = queue(&s, key, "waiter", LONG_TTL, 2);
    let deadline = sent + TTL;
    let (reply, tries) = attempts_until_answered(&mut w, REPLY, deadline, |at| {
        let reply = try_sem(&s, key, "barger", LONG_TTL, 2);
        assert!(
            matches!(reply, Ok(None)),
            "a plain ACQUIRE {:?} after the deadline: {reply:?}",
            at.checked_duration_since(deadline)
        );
    });
    assert_eq!(reply.fence(), short + 1, "the waiter got the freed permit");
    assert_eq!(fences(&sem(&s, key)), [kept, short + 1]);
    eprintln!("no barging on a semaphore: {} refused tries", tries.len());
}

#[test]
fn a_waiter_whose_count_no_longer_matches_is_refused_when_its_turn_comes() {
    let s = Server::start();
    let (key, source) = ("sem:turn", "sem:turn:source");
    grant(&s, key, b"holder", LONG_TTL);
    // Queued on a mutex: a count of 1.
    let mut one = s.queue_acquire(key, b"one", LONG_TTL, 0);
    // The key is replaced by a full semaphore of 2.
    sem_grant(&s, source, "a", LONG_TTL, 2);
    let b = sem_grant(&s, source, "b", LONG_TTL, 2);
    let _: () = s.cmd(&["RENAME", source, key]).unwrap_or_else(|e| panic!("RENAME: {}", error_text(&e)));
    let st = sem(&s, key);
    assert_eq!((st.permits, st.holders.len()), (2, 2), "the renamed semaphore, full: {st:?}");
    let mut two = queue(&s, key, "two", LONG_TTL, 2);
    assert_eq!(release(&s, key, b"a"), 1);
    let reply = one.reply(REPLY);
    assert_eq!(reply.error_kind(), Some(ReplyError::PermitsMismatch), "{reply:?}");
    assert_eq!(s.fencedlock_counter("fencedlock_permits_mismatches"), 1, "a waiter's refusal counts");
    let fence = two.reply(REPLY).fence();
    assert!(fence > b);
    assert_eq!(fences(&sem(&s, key)), [b, fence]);
    assert_eq!(s.waiters(), 0);
}

// ---------------------------------------------------------------------------------------
// Replication, persistence, copies, reclaim
// ---------------------------------------------------------------------------------------

/// A full semaphore with a labelled holder, one with a free permit, an idle one.
const KEPT: [&str; 3] = ["sem:p:full", "sem:p:one", "sem:p:idle"];

/// Writes [`KEPT`] and returns their statuses (time left aside).
fn write_semaphores(s: &Server) -> Vec<Option<SemaphoreStatus>> {
    let _: Option<u64> = s.query(&sem_cmd(KEPT[0], "a", LONG_TTL, Some(3), Some(b"la"))).unwrap();
    sem_grant(s, KEPT[0], "b", LONG_TTL, 3);
    sem_grant(s, KEPT[0], "c", LONG_TTL, 3);
    sem_grant(s, KEPT[1], "d", LONG_TTL, 5);
    sem_grant(s, KEPT[2], "e", LONG_TTL, 2);
    assert_eq!(release(s, KEPT[2], b"e"), 1);
    KEPT.iter().map(|k| masked(s, k)).collect()
}

/// The statuses are `expected`; on a primary (`writable`) also that each permit is still its
/// token's and that no fourth holder gets in.
fn check_semaphores(s: &Server, expected: &[Option<SemaphoreStatus>], what: &str, writable: bool) {
    let now: Vec<_> = KEPT.iter().map(|k| masked(s, k)).collect();
    assert_eq!(now, expected, "{what}");
    assert!(now[0].as_ref().is_some_and(|st| st.holders.len() == 3 && st.permits == 3), "{what}: {now:?}");
    if !writable {
        return;
    }
    sem_nil(s, KEPT[0], "intruder", 3);
    for (key, token) in [(KEPT[0], "a"), (KEPT[0], "b"), (KEPT[0], "c"), (KEPT[1], "d")] {
        assert_eq!(renew(s, key, token.as_bytes(), LONG_TTL), 1, "{what}: {key}'s permit is still {token}'s");
    }
    assert_mismatch(&sem_error(s, KEPT[1], "x", Some(3)), 5, what);
}

#[test]
fn replicas_follow_grants_renewals_releases_and_expiries() {
    let p = Server::start();
    let early = sem_grant(&p, "sem:r:early", "x", LONG_TTL, 3);
    let r = p.start_replica();
    let expected = write_semaphores(&p);
    p.wait_caught_up(&r);
    check_semaphores(&r, &expected, "replica", false);
    assert_eq!(fences(&sem(&r, "sem:r:early")), [early], "the full sync carries semaphores");
    for key in KEPT {
        assert_eq!(r.digest_value(key), p.digest_value(key), "{key}");
    }
    assert_eq!(r.high_water(), p.high_water());

    let full = KEPT[0];
    let f = fences(&sem(&p, full));
    assert_eq!(renew(&p, full, b"a", 3_000), 1);
    assert_eq!(release(&p, full, b"b"), 1);
    let late = sem_grant(&p, full, "late", 300, 3);
    p.wait_caught_up(&r);
    let st = sem(&r, full);
    assert_eq!(fences(&st), [f[0], f[2], late], "replica after renew, release, grant");
    assert!(
        remaining(&st, f[0]) <= Duration::from_millis(3_000)
            && remaining(&st, f[2]) > Duration::from_millis(3_000)
    );
    // The replica's own clock ends the short permit.
    poll("the short permit to expire on the replica", Duration::from_secs(5), || {
        sem(&r, full).holders.len() == 2
    });
    assert_eq!(fences(&sem(&r, full)), [f[0], f[2]]);
    assert_eq!(masked(&r, full), masked(&p, full));
}

#[test]
fn an_aof_restart_and_a_rewrite_bring_holders_and_fences_back() {
    let mut s = Server::builder()
        .arg("appendonly", "yes")
        .arg("appendfsync", "always")
        .arg("aof-use-rdb-preamble", "no")
        .start();
    let expected = write_semaphores(&s);
    let top = s.high_water();
    s.kill9();
    s.restart();
    check_semaphores(&s, &expected, "AOF replay after kill -9", true);
    let next = sem_grant(&s, "sem:p:after", "new", LONG_TTL, 5);
    assert!(next > top && epoch_of(next) > epoch_of(top), "{next} after the restart, {top} before");

    // A rewrite without the RDB preamble writes each semaphore as an APPLYSEM record.
    s.rewrite_aof();
    s.stop();
    s.restart();
    check_semaphores(&s, &expected, "AOF rewrite, then restart", true);
    assert!(epoch_of(sem_grant(&s, "sem:p:after", "newer", LONG_TTL, 5)) > epoch_of(next));
}

#[test]
fn an_rdb_restart_and_debug_reload_keep_the_holders() {
    let mut s = Server::start();
    let expected = write_semaphores(&s);
    let digest = s.digest_value(KEPT[0]);
    let _: () = s.cmd(&["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(s.digest_value(KEPT[0]), digest);
    check_semaphores(&s, &expected, "DEBUG RELOAD", true);
    let top = s.high_water();
    s.save();
    s.kill9();
    s.restart();
    check_semaphores(&s, &expected, "RDB restart", true);
    assert!(epoch_of(sem_grant(&s, "sem:p:after", "new", LONG_TTL, 5)) > epoch_of(top));
}

#[test]
fn dump_restore_copy_and_rename_carry_every_holder() {
    let s = Server::start();
    let expected = write_semaphores(&s);
    let key = KEPT[0];
    let dump: Vec<u8> = s.cmd(&["DUMP", key]).unwrap();
    let _: () = s.query(redis::cmd("RESTORE").arg("sem:v:restored").arg(0).arg(dump)).unwrap();
    let _: i64 = s.cmd(&["COPY", key, "sem:v:copy"]).unwrap();
    let _: i64 = s.cmd(&["COPY", key, "sem:v:moved"]).unwrap();
    let _: () = s.cmd(&["RENAME", "sem:v:moved", "sem:v:renamed"]).unwrap();
    for copy in ["sem:v:restored", "sem:v:copy", "sem:v:renamed"] {
        assert_eq!(masked(&s, copy), expected[0], "{copy}");
        sem_nil(&s, copy, "intruder", 3);
        for token in ["a", "b", "c"] {
            assert_eq!(renew(&s, copy, token.as_bytes(), LONG_TTL), 1, "{copy}: {token}'s token came along");
        }
        assert_eq!(release(&s, copy, b"b"), 1);
        assert!(sem_grant(&s, copy, "next", LONG_TTL, 3) > expected[0].as_ref().map_or(0, |st| st.fence));
    }
    assert_eq!(masked(&s, key), expected[0], "the source is untouched");
}

#[test]
fn reclaim_takes_a_semaphore_key_only_after_its_last_holder_left() {
    const RETENTION: Duration = Duration::from_millis(200);
    let s = Server::builder().arg(RECLAIM_AFTER_MS.full_name, RETENTION.as_millis().to_string()).start();
    let (released, expired) = ("sem:reclaim:released", "sem:reclaim:expired");
    sem_grant(&s, released, "a", LONG_TTL, 2);
    let last = sem_grant(&s, released, "b", LONG_TTL, 2);
    assert_eq!(release(&s, released, b"a"), 1);
    sem_grant(&s, expired, "a", 200, 3);
    sem_grant(&s, expired, "b", 600, 3);
    // Well past the retention after one holder left (and after `a` expired): both stay.
    thread::sleep(RETENTION * 3);
    assert!(s.exists(released), "a semaphore with a holder left was reclaimed");
    assert!(s.exists(expired), "a semaphore with an unexpired holder was reclaimed");

    let sent = Instant::now();
    assert_eq!(release(&s, released, b"b"), 1);
    let mut gone_at = None;
    poll("the idle semaphore to be reclaimed", Duration::from_secs(5), || {
        let exists = s.exists(released);
        if !exists {
            gone_at = Some(Instant::now());
        }
        !exists
    });
    let gone_after = gone_at.expect("gone").duration_since(sent);
    assert!(gone_after + SLACK >= RETENTION, "reclaimed {gone_after:?} after its last holder left");
    poll("the expired semaphore to be reclaimed", Duration::from_secs(5), || !s.exists(expired));
    assert!(sem_grant(&s, released, "new", LONG_TTL, 2) > last, "fences rise across the reclaim");
    eprintln!("semaphore reclaimed {:.0} ms after its last release", gone_after.as_secs_f64() * 1e3);
}

// ---------------------------------------------------------------------------------------
// Contention
// ---------------------------------------------------------------------------------------

/// A grant's fence, when its ACQUIRE was sent and when the reply came.
type Grant = (u64, Instant, Instant);

#[test]
fn sixteen_clients_never_hold_more_than_three_permits() {
    const CLIENTS: usize = 16;
    const ROUNDS: usize = 60;
    const N: u32 = 3;
    let s = Server::start();
    let key = "sem:contention";
    let grants_before = s.fencedlock_counter("fencedlock_grants");
    // Incremented after a grant's reply, decremented before its RELEASE is sent: each client's
    // span lies inside its permit's on the server, so this never exceeds the permits held.
    let inside = AtomicUsize::new(0);
    let most = AtomicUsize::new(0);
    let conns: Vec<redis::Connection> = (0..CLIENTS).map(|_| s.conn()).collect();
    let started = Instant::now();
    let per_client: Vec<(Vec<Grant>, usize)> = thread::scope(|scope| {
        let threads: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(i, mut conn)| {
                let (inside, most) = (&inside, &most);
                scope.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(0x5e4a ^ i as u64);
                    let (mut granted, mut refused) = (Vec::new(), 0);
                    for round in 0..ROUNDS {
                        let token = format!("c{i}-{round}");
                        // Random ttls, all far longer than a hold: nothing expires while held.
                        let ttl = rng.random_range(2_000..5_000u64);
                        let sent = Instant::now();
                        let reply: Option<u64> = sem_cmd(key, &token, ttl, Some(N), None)
                            .query(&mut conn)
                            .unwrap_or_else(|e| panic!("client {i}: {}", error_text(&e)));
                        let acked = Instant::now();
                        let Some(fence) = reply else {
                            refused += 1;
                            thread::sleep(Duration::from_micros(rng.random_range(0..500)));
                            continue;
                        };
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        assert!(now <= N as usize, "{now} clients hold permits of {N} at once");
                        granted.push((fence, sent, acked));
                        if round % 4 == 0 {
                            let st: Value = redis::cmd(fencedlock_protocol::command::STATUS.name)
                                .arg(key)
                                .query(&mut conn)
                                .expect("STATUS");
                            let st = harness::try_decode_semaphore_status(&st)
                                .unwrap_or_else(|why| panic!("{why}"))
                                .expect("the key exists");
                            assert!(st.holders.len() <= N as usize && st.permits == N, "{st:?}");
                            assert!(fences(&st).contains(&fence), "client {i} holds {fence}: {st:?}");
                        }
                        thread::sleep(Duration::from_micros(rng.random_range(0..2_000)));
                        inside.fetch_sub(1, Ordering::SeqCst);
                        let released: i64 =
                            redis::cmd(RELEASE.name).arg(key).arg(&token).query(&mut conn).expect("RELEASE");
                        assert_eq!(released, 1, "client {i}'s permit {fence} was still held");
                    }
                    (granted, refused)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().expect("a client thread panicked")).collect()
    });
    let elapsed = started.elapsed();
    let refused: usize = per_client.iter().map(|(_, r)| r).sum();
    let mut grants: Vec<Grant> = per_client.into_iter().flat_map(|(g, _)| g).collect();
    assert!(grants.len() >= ROUNDS / 2, "the load must really run: only {} grants", grants.len());
    assert!(refused > 0, "16 clients for 3 permits must contend");
    assert_eq!(s.fencedlock_counter("fencedlock_grants"), grants_before + grants.len() as u64);

    // Fences all distinct; a grant acknowledged before another was sent has a smaller fence.
    let distinct: HashSet<u64> = grants.iter().map(|g| g.0).collect();
    assert_eq!(distinct.len(), grants.len(), "a fence was issued twice");
    grants.sort_by_key(|g| g.2);
    let mut by_sent = grants.clone();
    by_sent.sort_by_key(|g| g.1);
    let (mut i, mut top) = (0, 0);
    for (fence, sent, _) in &by_sent {
        while i < grants.len() && grants[i].2 < *sent {
            top = top.max(grants[i].0);
            i += 1;
        }
        assert!(*fence > top, "fence {fence} was granted after {top} was acknowledged");
    }
    let st = sem(&s, key);
    assert_eq!((st.fence, st.holders.len()), (grants.iter().map(|g| g.0).max().unwrap_or(0), 0));
    eprintln!(
        "{CLIENTS} clients x {ROUNDS} rounds on {N} permits: {} grants, {refused} refused, at most {} inside at once, {:.0} ms",
        grants.len(),
        most.load(Ordering::SeqCst),
        elapsed.as_secs_f64() * 1e3
    );
}

/// A permit's lease shortened by its holder (`RENEW` with a smaller ttl, or a re-entry) ends at
/// the new deadline, and that expiry frees the permit for the head waiter then, as any expiry
/// does ("when permits free up ... expiry of one holder ... the heads are granted"). The mutex
/// (`PERMITS 1`) too: before issue #14 its waiters were served only at the old deadline.
#[test]
fn a_shortened_permit_hands_over_at_its_new_deadline() {
    const TTL: Duration = Duration::from_millis(300);
    let s = Server::start();
    for (n, (shorten, permits)) in
        [("RENEW", 2), ("ACQUIRE", 2), ("RENEW", 1), ("ACQUIRE", 1)].into_iter().enumerate()
    {
        let key = format!("sem:shorten:{n}");
        if permits == 2 {
            sem_grant(&s, &key, "kept", LONG_TTL, permits);
        }
        let shortened = sem_grant(&s, &key, "shortened", LONG_TTL, permits);
        let mut w = queue(&s, &key, "waiter", LONG_TTL, permits);
        let sent = Instant::now();
        match shorten {
            "RENEW" => assert_eq!(renew(&s, &key, b"shortened", TTL.as_millis() as u64), 1),
            _ => assert_eq!(sem_grant(&s, &key, "shortened", TTL.as_millis() as u64, permits), shortened),
        }
        let acked = Instant::now();
        let give_up = acked + TTL + Duration::from_secs(1);
        while w.is_blocked(&s) && Instant::now() < give_up {
            thread::sleep(Duration::from_millis(1));
        }
        assert!(
            !w.is_blocked(&s),
            "{shorten} (PERMITS {permits}) shortened a lease to {TTL:?} while a waiter queued: 1 s after the new deadline the \
             waiter still waits (the permit expired: STATUS shows {:?})",
            fences(&sem(&s, &key))
        );
        let reply = w.reply(REPLY);
        assert!(
            reply.at + SLACK >= sent + TTL,
            "{shorten} (PERMITS {permits}): granted before the new deadline"
        );
        let late = reply.at.saturating_duration_since(acked + TTL);
        assert!(
            late < LATE,
            "{shorten} (PERMITS {permits}) shortened a lease to {TTL:?} while a waiter queued: the waiter was granted {late:?} after the new deadline"
        );
        assert_eq!(reply.fence(), shortened + 1, "{shorten} (PERMITS {permits})");
    }
}
