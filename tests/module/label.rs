//! A lease's public label (issue #14): `FENCEDLOCK.ACQUIRE … LABEL label`, shown by `STATUS` as
//! a fourth element while the labelled lease runs.
//!
//! The label belongs to the lease: a grant sets it (or none), a re-entry with `LABEL` replaces it
//! and without keeps it, `RENEW` and `RAISE` keep it, release, expiry, handoff and reclaim end
//! it (a handoff grant carries the waiter's own label; a reclaim deletes the key whole). Bad labels and misused options are
//! refused and change nothing. Replicas, AOF replay and rewrite, RDB restarts, `DEBUG RELOAD`,
//! `DUMP`/`RESTORE` and `COPY` keep it; an RDB written by the v1 module (encoding 1, no labels)
//! still loads. The token never appears next to it: `security_acl` checks that.

use std::time::Duration;

use fencedlock_protocol::command::{ACQUIRE, LABEL, STATUS};
use fencedlock_protocol::limits::MAX_LABEL_LEN;
use fencedlock_protocol::ReplyError;
use harness::redis::{self, Value};
use harness::{acquire_cmd, error_text, module_path, v1_module, Server};

use crate::support::*;

/// How long replicas get to acknowledge a write.
const ACK: Duration = Duration::from_secs(10);

/// A label with bytes that lossy UTF-8 handling or a line-based protocol would corrupt.
fn binary_label() -> Vec<u8> {
    b"leader \x00\xff\r\nnode-7".to_vec()
}

/// The raw `STATUS` reply, to check its shape (not only its decoding).
fn raw_status(s: &Server, key: &str) -> Value {
    s.cmd(&[STATUS.name, key]).unwrap_or_else(|e| panic!("STATUS {key}: {}", error_text(&e)))
}

fn label_of(s: &Server, key: &str) -> Option<Vec<u8>> {
    status_of(s, key).label
}

#[test]
fn status_shows_the_label_only_while_its_lease_runs() {
    let s = Server::start();
    let key = "label:life";
    let fence = grant_labelled(&s, key, b"holder", LONG_TTL, b"node-a");
    match raw_status(&s, key) {
        Value::Array(items) => {
            assert_eq!(items.len(), 4, "{items:?}");
            assert_eq!(items[..2], [Value::Int(fence as i64), Value::Int(1)]);
            assert!(matches!(items[2], Value::Int(ms) if ms > 0), "{items:?}");
            assert_eq!(items[3], Value::BulkString(b"node-a".to_vec()), "the label as a bulk string");
        }
        other => panic!("STATUS replied {other:?}"),
    }
    // Re-entry without LABEL keeps it, with LABEL replaces it; RENEW and RAISE keep it.
    assert_eq!(grant(&s, key, b"holder", LONG_TTL), fence);
    assert_eq!(label_of(&s, key).as_deref(), Some(&b"node-a"[..]));
    assert_eq!(grant_labelled(&s, key, b"holder", LONG_TTL, &binary_label()), fence);
    assert_eq!(label_of(&s, key), Some(binary_label()), "binary bytes survive");
    assert_eq!(renew(&s, key, b"holder", LONG_TTL), 1);
    let raised = raise(&s, key, b"holder", fence + 10).expect("the holder raises");
    assert_eq!(label_of(&s, key), Some(binary_label()));
    // Another token cannot take it or relabel it.
    assert_eq!(try_acquire_labelled(&s, key, b"other", LONG_TTL, b"usurper").unwrap(), None);
    assert_eq!(label_of(&s, key), Some(binary_label()));
    // The longest label is accepted whole.
    let longest = vec![b'L'; MAX_LABEL_LEN];
    assert_eq!(grant_labelled(&s, key, b"holder", LONG_TTL, &longest), raised);
    assert_eq!(label_of(&s, key), Some(longest));

    // The release ends it: STATUS is three integers again.
    assert_eq!(release(&s, key, b"holder"), 1);
    assert_eq!(
        raw_status(&s, key),
        Value::Array(vec![Value::Int(raised as i64), Value::Int(0), Value::Int(-1)])
    );
    // A grant without LABEL has none, even by the token that had one.
    let next = grant(&s, key, b"holder", LONG_TTL);
    assert_eq!(label_of(&s, key), None);
    assert_eq!(release(&s, key, b"holder"), 1);

    // Expiry ends it too; a takeover without LABEL has none.
    grant_labelled(&s, key, b"short", 150, b"short-lived");
    assert_eq!(label_of(&s, key).as_deref(), Some(&b"short-lived"[..]));
    wait_expired(&s, key);
    assert_eq!(status_of(&s, key).label, None, "an expired lease shows no label");
    assert!(grant(&s, key, b"taker", LONG_TTL) > next);
    assert_eq!(label_of(&s, key), None);
}

#[test]
fn options_come_in_any_order_and_bad_ones_change_nothing() {
    let s = Server::start();
    for (key, options) in [
        ("label:order:1", ["BLOCK", "10", "LABEL", "one"]),
        ("label:order:2", ["label", "two", "block", "0"]),
    ] {
        let reply: Value = s
            .cmd(&[&[ACQUIRE.name, key, "t", "5000"][..], &options].concat())
            .unwrap_or_else(|e| panic!("{options:?}: {}", error_text(&e)));
        assert!(matches!(reply, Value::Int(f) if f > 0), "{options:?}: {reply:?}");
        assert_eq!(
            label_of(&s, key).as_deref(),
            Some(options[1 + options.iter().position(|o| o.eq_ignore_ascii_case(LABEL)).unwrap()].as_bytes())
        );
    }

    let (held, free) = ("label:bad:held", "label:bad:free");
    grant_labelled(&s, held, b"holder", LONG_TTL, b"kept");
    let keys = [held, free];
    let too_long = "x".repeat(MAX_LABEL_LEN + 1);
    let mut cases: Vec<(Vec<Vec<u8>>, Option<ReplyError>)> = Vec::new();
    for key in keys {
        for token in ["holder", "newcomer"] {
            let base = args![ACQUIRE.name, key, token, LONG_TTL];
            let with = |extra: &[&str]| with_words(&base, extra);
            cases.push((with(&[LABEL, ""]), Some(ReplyError::BadLabel)));
            cases.push((with(&[LABEL, &too_long]), Some(ReplyError::BadLabel)));
            cases.push((with(&["BLOCK", "10", LABEL, ""]), Some(ReplyError::BadLabel)));
            cases.push((with(&[LABEL, "a", LABEL, "b"]), Some(ReplyError::Syntax)));
            cases.push((with(&[LABEL, "a", "label", "a"]), Some(ReplyError::Syntax)));
            cases.push((with(&["LABELS", "a"]), Some(ReplyError::Syntax)));
            cases.push((with(&[LABEL, "a", "NX", "1"]), Some(ReplyError::Syntax)));
            cases.push((with(&["BLOCK", "x", LABEL, "a"]), Some(ReplyError::BadTimeout)));
            cases.push((with(&[LABEL, "a", "BLOCK", "1", "LABEL", "b"]), Some(ReplyError::Syntax)));
            // An option without its value: the module's syntax error; more words than all the
            // options take: Redis's own arity error.
            cases.push((with(&[LABEL]), Some(ReplyError::Syntax)));
            cases.push((with(&[LABEL, "a", "BLOCK"]), Some(ReplyError::Syntax)));
            cases.push((with(&[LABEL, "a", "BLOCK", "1", "PERMITS", "1", "LABEL", "b"]), None));
        }
        cases.push((args![ACQUIRE.name, key, "t", "0", LABEL, "ok"], Some(ReplyError::BadTtl)));
        cases.push((args![ACQUIRE.name, key, "", LONG_TTL, LABEL, "ok"], Some(ReplyError::BadToken)));
    }
    assert_refused_unchanged(&s, cases, || fingerprint(&s, &keys), |_| {});
    assert_eq!(label_of(&s, held).as_deref(), Some(&b"kept"[..]));
}

#[test]
fn a_handoff_grants_the_waiter_its_own_label() {
    let s = Server::start();
    let key = "label:handoff";
    grant_labelled(&s, key, b"holder", LONG_TTL, b"old-leader");
    let mut labelled =
        s.send_acquire_cmd(acquire_cmd(key, b"next", LONG_TTL, Some(0)).arg(LABEL).arg("new-leader"));
    labelled.wait_blocked(&s, Duration::from_secs(10));
    let mut plain = s.queue_acquire(key, b"last", LONG_TTL, 0);

    assert_eq!(release(&s, key, b"holder"), 1);
    let fence = labelled.reply(Duration::from_secs(10)).fence();
    assert_eq!(status_of(&s, key).fence, fence);
    assert_eq!(
        label_of(&s, key).as_deref(),
        Some(&b"new-leader"[..]),
        "the waiter's label, not the holder's"
    );

    assert_eq!(release(&s, key, b"next"), 1);
    assert!(plain.reply(Duration::from_secs(10)).fence() > fence);
    assert_eq!(label_of(&s, key), None, "an unlabelled waiter's lease has none");
}

/// Labelled, relabelled and unlabelled leases, and a released one.
const KEYS: [&str; 4] = ["label:p:held", "label:p:relabelled", "label:p:plain", "label:p:released"];

fn write_labels(s: &Server) {
    grant_labelled(s, KEYS[0], b"a", LONG_TTL, &binary_label());
    grant_labelled(s, KEYS[1], b"b", LONG_TTL, b"first");
    grant_labelled(s, KEYS[1], b"b", LONG_TTL, b"second");
    grant(s, KEYS[2], b"c", LONG_TTL);
    grant_labelled(s, KEYS[3], b"d", LONG_TTL, b"gone");
    assert_eq!(release(s, KEYS[3], b"d"), 1);
}

/// The labels as written; on a primary (`writable`) also that each lease is still its token's.
fn check_labels(s: &Server, what: &str, writable: bool) {
    let labels: Vec<_> = KEYS.iter().map(|k| label_of(s, k)).collect();
    assert_eq!(labels, [Some(binary_label()), Some(b"second".to_vec()), None, None], "{what}");
    let held: Vec<_> = KEYS.iter().map(|k| status_of(s, k).held).collect();
    assert_eq!(held, [true, true, true, false], "{what}");
    if !writable {
        return;
    }
    for (key, token) in [(KEYS[0], b"a"), (KEYS[1], b"b"), (KEYS[2], b"c")] {
        assert_eq!(try_acquire(s, key, b"intruder", LONG_TTL).unwrap(), None, "{what}: {key} still held");
        assert_eq!(renew(s, key, token, LONG_TTL), 1, "{what}: {key}'s token survived next to its label");
    }
}

#[test]
fn replicas_aof_replay_and_rewrite_and_reloads_keep_the_label() {
    let mut p = Server::builder()
        .arg("appendonly", "yes")
        .arg("appendfsync", "always")
        .arg("aof-use-rdb-preamble", "no")
        .start();
    grant_labelled(&p, "label:p:before-replica", b"x", LONG_TTL, b"synced");
    let r = p.start_replica();
    write_labels(&p);
    p.wait_for_replicas(1, ACK);
    check_labels(&r, "replica (full sync, then APPLY records)", false);
    assert_eq!(label_of(&r, "label:p:before-replica").as_deref(), Some(&b"synced"[..]), "full sync");
    for key in KEYS {
        assert_eq!(r.digest_value(key), p.digest_value(key), "{key}: the digest covers the label");
    }
    drop(r);

    let digest = p.digest_value(KEYS[0]);
    let _: () = p.cmd(&["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(p.digest_value(KEYS[0]), digest);
    check_labels(&p, "DEBUG RELOAD", true);

    // The AOF's APPLY records carry the label; a crash replays them.
    p.kill9();
    p.restart();
    check_labels(&p, "AOF replay after kill -9", true);

    // A rewrite without the RDB preamble writes each key as an APPLY record.
    p.rewrite_aof();
    p.stop();
    p.restart();
    check_labels(&p, "AOF rewrite, then restart", true);
}

#[test]
fn an_rdb_restart_keeps_the_label() {
    let mut s = Server::start();
    write_labels(&s);
    s.save();
    s.kill9();
    s.restart();
    check_labels(&s, "RDB restart", true);
}

#[test]
fn dump_restore_copy_and_memory_usage_carry_the_label() {
    let s = Server::start();
    let key = "label:v";
    let fence = grant_labelled(&s, key, b"holder", LONG_TTL, &binary_label());
    let dump: Vec<u8> = s.cmd(&["DUMP", key]).unwrap();
    let _: () = s.query(redis::cmd("RESTORE").arg("label:v:restored").arg(0).arg(dump)).unwrap();
    let _: i64 = s.cmd(&["COPY", key, "label:v:copy"]).unwrap();
    for copy in ["label:v:restored", "label:v:copy"] {
        let st = status_of(&s, copy);
        assert_eq!((st.fence, st.held, st.label), (fence, true, Some(binary_label())), "{copy}");
        assert_eq!(renew(&s, copy, b"holder", LONG_TTL), 1, "{copy}: the token came along");
    }

    // MEMORY USAGE counts the label's bytes.
    grant(&s, "label:v:plain", b"holder", LONG_TTL);
    grant_labelled(&s, "label:v:long", b"holder", LONG_TTL, &[b'm'; MAX_LABEL_LEN]);
    let usage = |k: &str| -> i64 { s.cmd(&["MEMORY", "USAGE", k]).unwrap() };
    let extra = usage("label:v:long") - usage("label:v:plain");
    assert!(extra >= MAX_LABEL_LEN as i64, "a {MAX_LABEL_LEN}-byte label adds only {extra} bytes");
}

#[test]
fn an_rdb_written_by_the_v1_module_loads_without_labels() {
    // The module as released before labels (RDB encoding 1), built from the repository's history.
    let mut s = Server::builder().without_module().arg("loadmodule", v1_module().to_string_lossy()).start();
    let held = grant(&s, "v1:held", b"holder", LONG_TTL);
    let released = grant(&s, "v1:released", b"r", LONG_TTL);
    assert_eq!(release(&s, "v1:released", b"r"), 1);
    s.save();
    s.kill9();
    s.set_restart_arg("loadmodule", &module_path().to_string_lossy());
    s.restart();

    let st = status_of(&s, "v1:held");
    assert_eq!((st.fence, st.held, st.label), (held, true, None));
    let st = status_of(&s, "v1:released");
    assert_eq!((st.fence, st.held, st.label), (released, false, None));
    // The loaded lease is a lease like any other: its holder labels it, and it persists.
    assert_eq!(grant_labelled(&s, "v1:held", b"holder", LONG_TTL, b"upgraded"), held);
    let _: () = s.cmd(&["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(label_of(&s, "v1:held").as_deref(), Some(&b"upgraded"[..]));
}
