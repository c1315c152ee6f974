//! All-or-nothing leases on several keys (issue #36): `FENCEDLOCK.ACQUIREALL numkeys key [key
//! ...] token ttl_ms [LABEL label] [PERMITS n | SHARED]` against a real server of the flavor
//! in `FENCEDLOCK_FLAVOR`, through raw commands.
//!
//! Every key is granted (or re-entered) together, each with its own fence, or none is: a
//! refusal on any key (another holder, the other mode, a waiter in its queue) or an error
//! leaves every key as it was, created none, and counted no grant. Cases: the set granted and
//! its fences above every earlier one; refusals that change nothing; a retry that gets the
//! same fences; readers, writers and semaphore counts as `ACQUIRE` decides them; a waiting
//! writer that keeps a set of readers out; bad requests; `MULTI` and scripts; `COMMAND
//! GETKEYS`; the ACL on every key; replicas and the AOF after `kill -9`.

use fencedlock_protocol::command::{ACQUIREALL, PERMITS, SHARED};
use fencedlock_protocol::limits::MAX_ACQUIRE_KEYS;
use fencedlock_protocol::ReplyError;
use harness::redis::{RedisResult, Value};
use harness::{acquire_cmd, classify, epoch_of, error_text, Server};

use crate::security_acl::{connect_as, exists, noperm, run as run_as, setuser};
use crate::support::*;

/// `ACQUIREALL` of `keys` for `token`, then `extra` words: the fences, `None` for nil, or the
/// error reply.
fn try_all(s: &Server, keys: &[&str], token: &str, extra: &[&str]) -> RedisResult<Option<Vec<u64>>> {
    let count = keys.len().to_string();
    let mut args: Vec<&[u8]> = vec![ACQUIREALL.name.as_bytes(), count.as_bytes()];
    args.extend(keys.iter().map(|k| k.as_bytes()));
    let ttl = LONG_TTL.to_string();
    args.extend([token.as_bytes(), ttl.as_bytes()]);
    args.extend(extra.iter().map(|w| w.as_bytes()));
    match run(s, &args)? {
        Value::Nil => Ok(None),
        Value::Array(fences) => Ok(Some(
            fences
                .iter()
                .map(|f| match f {
                    Value::Int(f) => u64::try_from(*f).expect("a positive fence"),
                    other => panic!("not a fence: {other:?}"),
                })
                .collect(),
        )),
        other => panic!("ACQUIREALL {keys:?} {token}: unexpected reply {other:?}"),
    }
}

/// An `ACQUIREALL` that must be granted: one fence per key.
fn all(s: &Server, keys: &[&str], token: &str, extra: &[&str]) -> Vec<u64> {
    let fences = try_all(s, keys, token, extra)
        .unwrap_or_else(|e| panic!("ACQUIREALL {keys:?} {token}: {}", error_text(&e)))
        .unwrap_or_else(|| panic!("ACQUIREALL {keys:?} {token} was refused"));
    assert_eq!(fences.len(), keys.len(), "one fence per key");
    fences
}

/// Everything a refused `ACQUIREALL` must leave as it was: the dataset, each key's value, the
/// high-water mark and the grants counted.
fn state(s: &Server, keys: &[&str]) -> (String, Vec<String>, u64, u64) {
    let values = keys.iter().map(|k| s.digest_value(k)).collect();
    (s.digest(), values, s.high_water(), s.fencedlock_counter("fencedlock_grants"))
}

/// An `ACQUIREALL` that must be refused with nil and change nothing on any of its keys.
fn all_nil(s: &Server, keys: &[&str], token: &str, extra: &[&str]) {
    let before = state(s, keys);
    let reply = try_all(s, keys, token, extra);
    assert!(matches!(reply, Ok(None)), "ACQUIREALL {keys:?} {token} {extra:?} must be nil: {reply:?}");
    assert_eq!(state(s, keys), before, "a refused ACQUIREALL changed a key");
}

/// An `ACQUIREALL` that must be refused with `kind` and change nothing on any of its keys.
fn all_err(s: &Server, keys: &[&str], token: &str, extra: &[&str], kind: ReplyError) {
    let before = state(s, keys);
    match try_all(s, keys, token, extra) {
        Err(e) => assert_eq!(classify(&e), Some(kind), "{}", error_text(&e)),
        Ok(reply) => panic!("ACQUIREALL {keys:?} {token} {extra:?} must fail with {kind:?}: {reply:?}"),
    }
    assert_eq!(state(s, keys), before, "a refused ACQUIREALL changed a key");
}

#[test]
fn a_set_is_granted_together_or_not_at_all() {
    let s = Server::start();
    let before = grant(&s, "aa:old", b"x", LONG_TTL);
    let fences = all(&s, &["aa:1", "aa:2", "aa:3"], "t1", &[]);
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "each key its own fence, in order: {fences:?}");
    assert!(fences[0] > before, "{fences:?} after {before}");
    for (key, fence) in ["aa:1", "aa:2", "aa:3"].iter().zip(&fences) {
        let st = status_of(&s, key);
        assert_eq!((st.fence, st.held), (*fence, true), "{key}");
    }

    // One key held by another token: nil, and neither free key is created or fenced.
    let grants = s.fencedlock_counter("fencedlock_grants");
    all_nil(&s, &["aa:new1", "aa:2", "aa:new2"], "t2", &[]);
    assert!(!exists(&s, "aa:new1") && !exists(&s, "aa:new2"), "a refused set created a key");
    assert_eq!(s.fencedlock_counter("fencedlock_grants"), grants);

    // A retry after a lost reply: the same fences, each lease restarted.
    assert_eq!(all(&s, &["aa:3", "aa:1", "aa:2"], "t1", &[]), [fences[2], fences[0], fences[1]]);
    // Keys the token holds re-entered, a free one granted with a fence above all.
    let mixed = all(&s, &["aa:1", "aa:4"], "t1", &[]);
    assert_eq!(mixed[0], fences[0]);
    assert!(mixed[1] > fences[2]);

    // Released keys, and an expired lease of another token, are taken over in one step.
    assert_eq!(release(&s, "aa:1", b"t1"), 1);
    grant(&s, "aa:short", b"other", 50);
    wait_expired(&s, "aa:short");
    let taken = all(&s, &["aa:1", "aa:short"], "t3", &[]);
    assert!(taken.iter().all(|f| *f > mixed[1]), "{taken:?}");
    assert_eq!(s.fencedlock_counter("fencedlock_takeovers"), 1);
    // RENEW and RELEASE stay per key.
    assert_eq!(renew(&s, "aa:short", b"t3", LONG_TTL), 1);
    assert_eq!(release(&s, "aa:1", b"t3"), 1);
    assert!(status_of(&s, "aa:short").held);
}

#[test]
fn readers_writers_and_counts_are_decided_as_acquire_decides_them() {
    let s = Server::start();
    // Readers together: a set of read leases beside another reader.
    let _: Option<u64> = s
        .query(&{
            let mut cmd = acquire_cmd("rw:a", b"r0", LONG_TTL, None);
            cmd.arg(SHARED);
            cmd
        })
        .expect("read lease");
    let read = all(&s, &["rw:a", "rw:b"], "r1", &[SHARED]);
    assert_eq!(s.semaphore_status("rw:a").map(|st| st.holders.len()), Some(2));
    // A writer is refused while anyone reads any of its keys.
    all_nil(&s, &["rw:c", "rw:a"], "w", &[]);
    // A reader's upgrade is an error for the whole set; a semaphore's count must match.
    all_err(&s, &["rw:new", "rw:b"], "r1", &[], ReplyError::UpgradeRefused);
    all_err(&s, &["rw:new", "rw:a"], "p", &[PERMITS, "3"], ReplyError::PermitsMismatch);
    assert!(!exists(&s, "rw:new"));
    // The writer of a key downgrades it inside a set: same fence.
    let written = all(&s, &["rw:w1", "rw:w2"], "w", &[]);
    assert_eq!(all(&s, &["rw:w1", "rw:w2"], "w", &[SHARED]), written);
    assert_eq!(read.len(), 2);
    // Semaphore permits: each key up to its count.
    all(&s, &["sem:1", "sem:2"], "p1", &[PERMITS, "2"]);
    all(&s, &["sem:1", "sem:2"], "p2", &[PERMITS, "2"]);
    all_nil(&s, &["sem:1", "sem:3"], "p3", &[PERMITS, "2"]);
}

#[test]
fn a_writer_waiting_in_one_keys_queue_keeps_a_set_of_readers_out() {
    let s = Server::start();
    all(&s, &["q:a"], "r1", &[SHARED]);
    let mut writer = s.send_acquire_cmd(&acquire_cmd("q:a", b"w", LONG_TTL, Some(0)));
    writer.wait_blocked(&s, std::time::Duration::from_secs(10));
    // q:a has room for readers, but a writer waits: a fresh read lease would pass it.
    all_nil(&s, &["q:b", "q:a"], "r2", &[SHARED]);
    // The reader already in re-enters (its own lease, not a fresh grant).
    all(&s, &["q:a"], "r1", &[SHARED]);
    assert_eq!(release(&s, "q:a", b"r1"), 1);
    let fence = writer.reply(std::time::Duration::from_secs(10)).fence();
    assert_eq!(status_of(&s, "q:a").fence, fence, "the waiting writer got the key");
    all_nil(&s, &["q:b", "q:a"], "r2", &[SHARED]);
}

#[test]
fn bad_requests_are_refused_and_change_nothing() {
    let s = Server::start();
    all(&s, &["bad:held"], "holder", &[]);
    let w = |words: &[&str]| -> Vec<Vec<u8>> {
        std::iter::once(ACQUIREALL.name).chain(words.iter().copied()).map(|w| w.as_bytes().to_vec()).collect()
    };
    let too_many = (MAX_ACQUIRE_KEYS + 1).to_string();
    let mut over: Vec<String> = vec![too_many];
    over.extend((0..=MAX_ACQUIRE_KEYS).map(|i| format!("bad:{i}")));
    over.extend(["t".into(), "100".into()]);
    let over: Vec<&str> = over.iter().map(String::as_str).collect();
    let cases = vec![
        (w(&["0", "bad:a", "t", "100"]), Some(ReplyError::BadKeys)),
        (w(&["x", "bad:a", "t", "100"]), Some(ReplyError::BadKeys)),
        (w(&["-1", "bad:a", "t", "100"]), Some(ReplyError::BadKeys)),
        (w(&over), Some(ReplyError::BadKeys)),
        (w(&["3", "bad:a", "bad:b", "t", "100"]), Some(ReplyError::BadKeys)),
        (w(&["2", "bad:a", "bad:a", "t", "100"]), Some(ReplyError::BadKeys)),
        (w(&["1", "bad:a", "t", "100", "BLOCK", "10"]), Some(ReplyError::Syntax)),
        (w(&["1", "bad:a", "t", "100", "SHARED", "PERMITS", "2"]), Some(ReplyError::Syntax)),
        (w(&["1", "bad:a", "t", "100", "LABEL"]), Some(ReplyError::Syntax)),
        (w(&["2", "bad:a", "bad:held", "t", "0"]), Some(ReplyError::BadTtl)),
        (w(&["2", "bad:a", "bad:held", "", "100"]), Some(ReplyError::BadToken)),
        (w(&["1", "bad:a", "t", "100", "PERMITS", "0"]), Some(ReplyError::BadPermits)),
        (w(&["1", "bad:a", "t"]), None),
    ];
    let keys = ["bad:a", "bad:b", "bad:held", "bad:0"];
    assert_refused_unchanged(&s, cases, || state(&s, &keys), |_| {});
    // A key holding another type: WRONGTYPE, and the free key beside it stays free.
    let _: () = s.cmd(&["SET", "bad:string", "x"]).expect("SET");
    all_err(&s, &["bad:a", "bad:string"], "t", &[], ReplyError::WrongType);
    assert!(!exists(&s, "bad:a"));
}

#[test]
fn keys_are_found_by_the_server_and_checked_by_the_acl() {
    let s = Server::start();
    let keys: Vec<String> = s
        .cmd(&["COMMAND", "GETKEYS", ACQUIREALL.name, "3", "k:1", "k:2", "k:3", "t", "100", "LABEL", "l"])
        .expect("COMMAND GETKEYS");
    assert_eq!(keys, ["k:1", "k:2", "k:3"]);
    setuser(&s, "locker", "~locks:* +@all").expect("ACL SETUSER");
    let mut locker = connect_as(&s, "locker");
    noperm(&mut locker, &[ACQUIREALL.name, "2", "locks:a", "other:b", "t", "60000"]);
    assert!(!exists(&s, "locks:a"), "a refused set created its permitted key");
    let reply = run_as(&mut locker, &[ACQUIREALL.name, "2", "locks:a", "locks:b", "t", "60000"]);
    assert!(matches!(reply, Ok(Value::Array(ref f)) if f.len() == 2), "{reply:?}");
}

#[test]
fn inside_multi_and_scripts_it_is_the_same_one_step() {
    let s = Server::start();
    grant(&s, "m:busy", b"other", LONG_TTL);
    let replies: Vec<Value> = harness::redis::pipe()
        .atomic()
        .cmd(ACQUIREALL.name)
        .arg(&["2", "m:a", "m:b", "t", "60000"])
        .cmd(ACQUIREALL.name)
        .arg(&["2", "m:c", "m:busy", "t", "60000"])
        .query(&mut s.conn())
        .expect("MULTI");
    assert!(matches!(&replies[..], [Value::Array(f), Value::Nil] if f.len() == 2), "{replies:?}");
    assert!(!exists(&s, "m:c"));
    let script = "return redis.call('FENCEDLOCK.ACQUIREALL', #KEYS, KEYS[1], KEYS[2], ARGV[1], ARGV[2])";
    let reply: Value = s.cmd(&["EVAL", script, "2", "m:d", "m:e", "t", "60000"]).expect("EVAL");
    assert!(matches!(reply, Value::Array(ref f) if f.len() == 2), "{reply:?}");
}

#[test]
fn replicas_and_the_aof_after_kill9_keep_every_key_of_a_set() {
    let mut p = Server::builder().arg("appendonly", "yes").arg("appendfsync", "always").start();
    let r = p.start_replica();
    let keys = ["set:1", "set:2", "set:3"];
    let fences = all(&p, &keys, "t", &["LABEL", "job-7"]);
    all(&p, &["set:r1", "set:r2"], "reader", &[SHARED]);
    p.wait_caught_up(&r);
    let seen = |s: &Server| -> Vec<(u64, bool, Option<Vec<u8>>)> {
        keys.iter().map(|k| status_of(s, k)).map(|st| (st.fence, st.held, st.label)).collect()
    };
    let expected = seen(&p);
    assert_eq!(expected.iter().map(|e| e.0).collect::<Vec<_>>(), fences);
    assert_eq!(seen(&r), expected, "the replica holds the whole set");
    assert_eq!(r.semaphore_status("set:r2").map(|st| st.holders.len()), Some(1));
    drop(r);

    let top = p.high_water();
    p.kill9();
    p.restart();
    assert_eq!(seen(&p), expected, "the AOF replayed the whole set");
    assert_eq!(p.semaphore_status("set:r1").map(|st| st.holders.len()), Some(1));
    let next = all(&p, &["set:4", "set:5"], "t2", &[]);
    assert!(next[0] > top && epoch_of(next[0]) > epoch_of(top), "{next:?} after the restart, {top} before");
    let err = try_all(&p, &["set:1"], "intruder", &[]).map_err(|e| error_text(&e));
    assert_eq!(err, Ok(None), "the set's leases still hold after the restart");
}
