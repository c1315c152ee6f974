//! Each command declares what it really does with its key (issue 21), so ACL read and write
//! key selectors (`%R~`, `%W~`) judge it by that, not by Redis's default "reads and writes":
//!
//! - `COMMAND GETKEYSANDFLAGS` shows each command's access; `STATUS` only reads (`RO access`).
//! - A `%R~*` user can watch a lock with `STATUS` and is refused every command that changes
//!   it (NOPERM), which then changes nothing.
//! - A `~locks:*` user is refused every command on any other key; with `%R~*` added it may
//!   watch other keys, still not change them.
//! - A `%W~*` user is refused what replies the key's data (`STATUS`, `ACQUIRE`, `RAISE`)
//!   and may run what only writes and answers 1 or 0 (`RENEW`, `RELEASE`, `CAD`).
//!
//! `security_acl` covers users scoped by key pattern and command, and token secrecy.

use fencedlock_protocol::command::{
    self, ACQUIRE, ACQUIREALL, APPLY, APPLYSEM, CAD, RAISE, RELEASE, RENEW, STATUS,
};
use harness::redis::{Connection, Value};
use harness::{decode_status, error_text, LockStatus, Server};

use crate::security_acl::{connect_as, exists, noperm, run, setuser};

/// A ttl no lease in these tests outlives by accident.
const TTL: &str = "60000";

/// A call of each command on `key`, with arguments of the right count. The internal records
/// carry placeholder values: only their key and its access matter here.
fn calls(key: &str) -> [Vec<&str>; 9] {
    [
        vec![ACQUIRE.name, key, "holder", TTL],
        vec![ACQUIREALL.name, "1", key, "holder", TTL],
        vec![RENEW.name, key, "holder", TTL],
        vec![RELEASE.name, key, "holder"],
        vec![RAISE.name, key, "holder", "5"],
        vec![CAD.name, key, "holder"],
        vec![STATUS.name, key],
        vec![APPLY.name, key, "1", "1"],
        vec![APPLYSEM.name, key, "1", "1", "2", "holders"],
    ]
}

/// The key and its access flags (lower-case, sorted) that `COMMAND GETKEYSANDFLAGS` reports.
fn key_flags(s: &Server, call: &[&str]) -> (String, Vec<String>) {
    let mut args = vec!["COMMAND", "GETKEYSANDFLAGS"];
    args.extend_from_slice(call);
    let reply: Value = s.cmd(&args).unwrap_or_else(|e| panic!("{call:?}: {}", error_text(&e)));
    let Value::Array(keys) = reply else { panic!("{call:?}: not an array: {reply:?}") };
    let [Value::Array(key_and_flags)] = keys.as_slice() else { panic!("{call:?}: not one key: {keys:?}") };
    let [key, Value::Array(flags)] = key_and_flags.as_slice() else {
        panic!("{call:?}: not [key, flags]: {key_and_flags:?}")
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).to_ascii_lowercase(),
        Value::SimpleString(s) => s.to_ascii_lowercase(),
        other => panic!("{call:?}: not a string: {other:?}"),
    };
    let mut flags: Vec<String> = flags.iter().map(text).collect();
    flags.sort();
    (text(key), flags)
}

/// `STATUS` as seen by `conn`.
fn status_as(conn: &mut Connection, key: &str) -> Option<LockStatus> {
    let reply = run(conn, &[STATUS.name, key]).unwrap_or_else(|e| panic!("STATUS {key}: {}", error_text(&e)));
    decode_status(&reply)
}

/// What must not change when a refused command ran: the fence, the holder and its label, and a
/// lease no longer than it was granted for (a RENEW that got through would lengthen it).
fn assert_unchanged(s: &Server, key: &str, before: &LockStatus, why: &str) {
    let after = s.lock_status(key).unwrap_or_else(|| panic!("{why}: {key} is gone"));
    assert_eq!((after.fence, after.held, &after.label), (before.fence, before.held, &before.label), "{why}");
    assert!(after.remaining <= before.remaining, "{why}: the lease was lengthened: {after:?}");
}

#[test]
fn key_specs_declare_what_each_command_does_with_its_key() {
    let s = Server::start();
    // RO/RW/OW/RM: what happens to the key; access: its data is replied or copied; update /
    // delete: its data changes (Redis allows one of insert, update, delete per key spec).
    let expected = [
        (ACQUIRE, "rw access update"),    // grants or re-enters, replies the fence
        (ACQUIREALL, "rw access update"), // the same on each of its keys
        (RENEW, "rw update"),             // lengthens the caller's lease, replies 1 or 0
        (RELEASE, "rw update"),           // ends the lease; the key and its fence stay
        (RAISE, "rw access update"),      // raises the fence, replies it
        (CAD, "rm delete"),               // as Valkey's DELIFEQ: deletes the key, replies 1 or 0
        (STATUS, "ro access"),            // replies the key's state, changes nothing
        (APPLY, "ow update"),             // replaces the key's value with the primary's record
        (APPLYSEM, "ow update"),          // the same, for a semaphore key
    ];
    assert_eq!(expected.map(|(c, _)| c.name), command::ALL.map(|c| c.name), "every command is checked");
    for (call, (cmd, flags)) in calls("lock:k").iter().zip(expected) {
        let mut want: Vec<String> = flags.split(' ').map(String::from).collect();
        want.sort();
        assert_eq!(key_flags(&s, call), ("lock:k".to_string(), want), "{} on {}", cmd.name, s.flavor());
    }
}

#[test]
fn key_specs_let_a_read_only_user_watch_a_lock_and_change_nothing() {
    let s = Server::start();
    setuser(&s, "reader", "%R~* +@all").expect("ACL SETUSER reader");
    let _: Option<u64> = s.cmd(&[ACQUIRE.name, "lock:r", "holder", TTL, "LABEL", "host-a"]).expect("grant");
    let _: () = s.cmd(&["SET", "plain:r", "holder"]).expect("SET");
    let before = s.lock_status("lock:r").expect("lock:r is a lock");
    let mut reader = connect_as(&s, "reader");

    let seen = status_as(&mut reader, "lock:r").expect("the reader sees the lock");
    assert_eq!((seen.fence, seen.held, &seen.label), (before.fence, true, &before.label));
    assert_eq!(status_as(&mut reader, "lock:none"), None, "a missing key is nil for the reader too");

    for call in [
        &[ACQUIRE.name, "lock:r", "intruder", TTL][..],
        &[ACQUIRE.name, "lock:new", "intruder", TTL],
        &[RENEW.name, "lock:r", "holder", "3600000"],
        &[RAISE.name, "lock:r", "holder", "999999"],
        &[RELEASE.name, "lock:r", "holder"],
        &[CAD.name, "plain:r", "holder"],
    ] {
        noperm(&mut reader, call);
    }
    assert_unchanged(&s, "lock:r", &before, "after the reader's refused commands");
    assert!(!exists(&s, "lock:new"), "a refused ACQUIRE created its key");
    assert_eq!(s.cmd::<String>(&["GET", "plain:r"]).expect("GET"), "holder", "a refused CAD deleted");
}

#[test]
fn key_specs_keep_a_key_pattern_user_off_other_keys() {
    let s = Server::start();
    setuser(&s, "locker", "~locks:* +@all").expect("ACL SETUSER locker");
    // A lock user that may also watch every other lock: reads anywhere, writes only its own.
    setuser(&s, "watcher", "~locks:* %R~* +@all").expect("ACL SETUSER watcher");
    let _: Option<u64> = s.cmd(&[ACQUIRE.name, "other:k", "holder", TTL]).expect("grant");
    let before = s.lock_status("other:k").expect("other:k is a lock");

    let mut locker = connect_as(&s, "locker");
    for call in calls("other:k").iter().chain(&calls("other:new")) {
        noperm(&mut locker, call);
    }
    let mut watcher = connect_as(&s, "watcher");
    for call in calls("other:k").iter().chain(&calls("other:new")).filter(|c| c[0] != STATUS.name) {
        noperm(&mut watcher, call);
    }
    let seen = status_as(&mut watcher, "other:k").expect("the watcher sees other:k");
    assert_eq!((seen.fence, seen.held), (before.fence, true));
    assert_unchanged(&s, "other:k", &before, "after the refused commands on other:k");
    assert!(!exists(&s, "other:new"), "a refused command created other:new");

    // Their own keys still work, every command.
    for conn in [&mut locker, &mut watcher] {
        let fence = match run(conn, &[ACQUIRE.name, "locks:a", "mine", TTL]) {
            Ok(Value::Int(f)) if f > 0 => f,
            other => panic!("could not lock locks:a: {other:?}"),
        };
        assert_eq!(run(conn, &[RENEW.name, "locks:a", "mine", TTL]).ok(), Some(Value::Int(1)));
        assert_eq!(run(conn, &[RAISE.name, "locks:a", "mine", "1"]).ok(), Some(Value::Int(fence)));
        assert_eq!(status_as(conn, "locks:a").map(|st| (st.fence, st.held)), Some((fence as u64, true)));
        assert_eq!(run(conn, &[RELEASE.name, "locks:a", "mine"]).ok(), Some(Value::Int(1)));
    }
}

#[test]
fn key_specs_let_a_write_only_user_change_a_lock_but_not_read_it() {
    let s = Server::start();
    setuser(&s, "writer", "%W~* +@all").expect("ACL SETUSER writer");
    let fence: u64 =
        s.cmd::<Option<u64>>(&[ACQUIRE.name, "lock:w", "holder", TTL]).expect("grant").expect("fence");
    let _: () = s.cmd(&["SET", "plain:w", "holder"]).expect("SET");
    let mut writer = connect_as(&s, "writer");

    // What replies the key's data needs read access: the state, the fence.
    noperm(&mut writer, &[STATUS.name, "lock:w"]);
    noperm(&mut writer, &[ACQUIRE.name, "lock:w", "holder", TTL]);
    noperm(&mut writer, &[ACQUIRE.name, "lock:new", "holder", TTL]);
    noperm(&mut writer, &[RAISE.name, "lock:w", "holder", "999999"]);
    assert!(!exists(&s, "lock:new"), "a refused ACQUIRE created its key");
    assert_eq!(s.lock_status("lock:w").map(|st| st.fence), Some(fence), "a refused RAISE raised");

    // What only writes and answers 1 or 0 needs write access alone (as Valkey's DELIFEQ).
    assert_eq!(run(&mut writer, &[RENEW.name, "lock:w", "holder", TTL]).ok(), Some(Value::Int(1)));
    assert_eq!(run(&mut writer, &[RENEW.name, "lock:w", "guess", TTL]).ok(), Some(Value::Int(0)));
    assert_eq!(run(&mut writer, &[RELEASE.name, "lock:w", "holder"]).ok(), Some(Value::Int(1)));
    assert_eq!(run(&mut writer, &[CAD.name, "plain:w", "holder"]).ok(), Some(Value::Int(1)));
    let after = s.lock_status("lock:w").expect("a released key keeps its fence");
    assert_eq!((after.fence, after.held), (fence, false));
    assert!(!exists(&s, "plain:w"), "CAD deleted the string key");
    // The internal records get past the ACL (they only write) and are refused by the module.
    let err = run(&mut writer, &[APPLY.name, "lock:w", "99999", "99999", "intruder", "60000"]).unwrap_err();
    assert!(!error_text(&err).starts_with("NOPERM"), "{}", error_text(&err));
    assert_eq!(s.lock_status("lock:w").map(|st| (st.fence, st.held)), Some((fence, false)));
}
