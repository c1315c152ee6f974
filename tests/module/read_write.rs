//! Fenced read-write locks (issue #36): `FENCEDLOCK.ACQUIRE … SHARED` against a real server of
//! the flavor in `FENCEDLOCK_FLAVOR`, through raw commands.
//!
//! Readers (`SHARED`) hold a key together, a writer (no option) only alone, and every grant
//! takes the next fence of the key's one sequence. Cases: the STATUS shapes of both modes; a
//! downgrade keeps the fence and lets the waiting readers in; an upgrade is refused and
//! changes nothing; bad shapes and the semaphore/reader mismatches; a waiting writer is not
//! starved by readers (a scripted stream, and two threads of overlapping readers); replicas,
//! the AOF after `kill -9`, a rewrite, and RDB reloads keep every reader.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use fencedlock_protocol::command::{PERMITS, SHARED, SHARED_PERMITS};
use fencedlock_protocol::{ReplyError, SemaphoreStatus};
use harness::redis::{self, RedisResult, Value};
use harness::{acquire_cmd, classify, epoch_of, error_text, BlockedAcquire, Server};

use crate::support::*;

/// Bound on a reply that must come (a hang fails the test instead of CI).
const REPLY: Duration = Duration::from_secs(10);

/// `ACQUIRE key token ttl_ms SHARED [BLOCK timeout_ms]`.
fn read_cmd(key: &str, token: &str, ttl_ms: u64, block_ms: Option<u64>) -> redis::Cmd {
    let mut cmd = acquire_cmd(key, token.as_bytes(), ttl_ms, block_ms);
    cmd.arg(SHARED);
    cmd
}

/// A read lease: `Ok(Some(fence))` granted, `Ok(None)` nil, or the error reply.
fn try_read(s: &Server, key: &str, token: &str, ttl_ms: u64) -> RedisResult<Option<u64>> {
    s.query(&read_cmd(key, token, ttl_ms, None))
}

/// A read lease that must be granted (or re-entered): its fence.
fn read(s: &Server, key: &str, token: &str) -> u64 {
    try_read(s, key, token, LONG_TTL)
        .unwrap_or_else(|e| panic!("ACQUIRE {key} {token} SHARED: {}", error_text(&e)))
        .unwrap_or_else(|| panic!("ACQUIRE {key} {token} SHARED was refused"))
}

/// A read lease that must be refused with nil.
fn read_nil(s: &Server, key: &str, token: &str) {
    let reply = try_read(s, key, token, LONG_TTL);
    assert!(matches!(reply, Ok(None)), "ACQUIRE {key} {token} SHARED must be nil: {reply:?}");
}

/// A write lease (the plain ACQUIRE) that must be refused with nil.
fn write_nil(s: &Server, key: &str, token: &str) {
    let reply = try_acquire(s, key, token.as_bytes(), LONG_TTL);
    assert!(matches!(reply, Ok(None)), "ACQUIRE {key} {token} must be nil: {reply:?}");
}

/// `STATUS` of a key held by readers: the holders' fences, oldest first; panics otherwise.
fn readers(s: &Server, key: &str) -> Vec<u64> {
    let st = s.semaphore_status(key).unwrap_or_else(|| panic!("STATUS {key} is nil"));
    assert!(st.is_shared(), "{key} is held by readers: {st:?}");
    st.holders.iter().map(|h| h.fence).collect()
}

/// Everything a refused command must leave alone (time left aside).
fn state(s: &Server, key: &str) -> (String, Option<SemaphoreStatus>, u64, u64) {
    let status = s.semaphore_status(key).map(|mut st| {
        st.holders.iter_mut().for_each(|h| h.remaining = Duration::ZERO);
        st
    });
    (s.digest(), status, s.high_water(), s.fencedlock_counter("fencedlock_grants"))
}

/// Queues `cmd` (a `BLOCK 0` acquire) on a connection of its own, once the server blocked it.
fn queue(s: &Server, cmd: &redis::Cmd) -> BlockedAcquire {
    let w = s.send_acquire_cmd(cmd);
    w.wait_blocked(s, REPLY);
    w
}

#[test]
fn readers_share_a_writer_holds_alone_and_fences_rise_across_modes() {
    let s = Server::start();
    let key = "rw:modes";
    let r1 = read(&s, key, "r1");
    let r2 = read(&s, key, "r2");
    assert!(r2 > r1);
    assert_eq!(read(&s, key, "r1"), r1, "a reader's re-entry keeps its fence");
    // The raw shape: a semaphore of SHARED_PERMITS, every reader listed, never a token.
    let Value::Array(items) = s.cmd::<Value>(&[fencedlock_protocol::command::STATUS.name, key]).unwrap()
    else {
        panic!("STATUS is an array")
    };
    assert_eq!(items[..3], [Value::Int(r2 as i64), Value::Int(2), Value::Int(i64::from(SHARED_PERMITS))]);
    write_nil(&s, key, "w");
    assert_eq!(release(&s, key, b"r1"), 1);
    write_nil(&s, key, "w");
    assert_eq!(release(&s, key, b"r2"), 1);
    let st = s.semaphore_status(key).expect("an idle key keeps its fence");
    assert!(st.is_shared() && st.holders.is_empty() && st.fence == r2, "{st:?}");
    // The writer's fence is above every reader's; readers then wait for it.
    let w = grant(&s, key, b"w", LONG_TTL);
    assert!(w > r2);
    assert!(status_of(&s, key).held, "a write lease shows as a mutex");
    read_nil(&s, key, "r3");
    assert_eq!(raise(&s, key, b"w", w), Some(w), "a write lease is a mutex: RAISE works");
    assert_eq!(release(&s, key, b"w"), 1);
    let r3 = read(&s, key, "r3");
    assert!(r3 > w);
    assert_eq!(raise(&s, key, b"r3", r3 + 100), None, "no RAISE on read leases");
    assert_eq!(renew(&s, key, b"r3", 5_000), 1);
    assert!(s.semaphore_status(key).unwrap().holders[0].remaining <= Duration::from_secs(5));
}

#[test]
fn a_downgrade_keeps_the_fence_and_lets_the_waiting_readers_in() {
    let s = Server::start();
    let key = "rw:down";
    let w = grant_labelled(&s, key, b"w", LONG_TTL, b"writer");
    let mut waiting: Vec<BlockedAcquire> =
        ["r1", "r2"].iter().map(|t| queue(&s, &read_cmd(key, t, LONG_TTL, Some(0)))).collect();
    let mut writer2 = queue(&s, &acquire_cmd(key, b"w2", LONG_TTL, Some(0)));
    assert_eq!(s.waiters(), 3);
    // The writer downgrades: its fence, a read lease; the readers queued behind come in.
    assert_eq!(read(&s, key, "w"), w);
    let fences: Vec<u64> = waiting.iter_mut().map(|r| r.reply(REPLY).fence()).collect();
    assert_eq!(fences, [w + 1, w + 2]);
    assert_eq!(readers(&s, key), [w, w + 1, w + 2]);
    let st = s.semaphore_status(key).unwrap();
    assert_eq!(st.holders[0].label.as_deref(), Some(&b"writer"[..]), "the label stays without LABEL");
    // The second writer still waits for all three.
    assert!(writer2.is_blocked(&s));
    for t in ["w", "r1", "r2"] {
        assert_eq!(release(&s, key, t.as_bytes()), 1);
    }
    assert_eq!(writer2.reply(REPLY).fence(), w + 3);
}

#[test]
fn an_upgrade_is_refused_and_changes_nothing() {
    let s = Server::start();
    let key = "rw:up";
    read(&s, key, "r");
    for others in [false, true] {
        if others {
            read(&s, key, "other");
        }
        let before = state(&s, key);
        let err = try_acquire(&s, key, b"r", LONG_TTL).expect_err("an upgrade is refused");
        assert_eq!(classify(&err), Some(ReplyError::UpgradeRefused), "{}", error_text(&err));
        assert_eq!(error_text(&err), ReplyError::UpgradeRefused.message(0));
        assert_eq!(state(&s, key), before, "others reading: {others}");
    }
}

#[test]
fn bad_shapes_and_mismatched_kinds_are_refused_and_change_nothing() {
    let s = Server::start();
    let key = "rw:bad";
    read(&s, key, "r");
    let before = state(&s, key);
    for extra in [&[SHARED, SHARED][..], &[SHARED, PERMITS, "2"], &[PERMITS, "1", SHARED], &[SHARED, "5"]] {
        let mut cmd = acquire_cmd(key, b"x", LONG_TTL, None);
        for word in extra {
            cmd.arg(*word);
        }
        let err = s.query::<Option<u64>>(&cmd).expect_err("a syntax error");
        assert_eq!(classify(&err), Some(ReplyError::Syntax), "{extra:?}: {}", error_text(&err));
    }
    // A semaphore's ACQUIRE on a key held by readers, and a reader's on a semaphore.
    let mut sem = acquire_cmd(key, b"x", LONG_TTL, None);
    sem.arg(PERMITS).arg(3);
    let err = s.query::<Option<u64>>(&sem).expect_err("held SHARED");
    assert_eq!(error_text(&err), ReplyError::PermitsMismatch.message(u64::from(SHARED_PERMITS)));
    assert_eq!(state(&s, key), before);
    let mut sem = acquire_cmd("rw:sem", b"s", LONG_TTL, None);
    sem.arg(PERMITS).arg(3);
    let _: Option<u64> = s.query(&sem).unwrap();
    let err = try_read(&s, "rw:sem", "x", LONG_TTL).expect_err("held with PERMITS 3");
    assert_eq!(error_text(&err), ReplyError::PermitsMismatch.message(3));
}

#[test]
fn a_waiting_writer_is_not_passed_by_later_readers() {
    let s = Server::start();
    let key = "rw:fair";
    let r0 = read(&s, key, "r0");
    let mut writer = queue(&s, &acquire_cmd(key, b"w", LONG_TTL, Some(0)));
    // Readers arriving after the writer: refused at once, or queued behind it.
    for i in 0..20 {
        read_nil(&s, key, &format!("late{i}"));
    }
    let mut behind = queue(&s, &read_cmd(key, "queued", LONG_TTL, Some(0)));
    assert_eq!(read(&s, key, "r0"), r0, "a reader already in may re-enter");
    assert_eq!(release(&s, key, b"r0"), 1);
    let w = writer.reply(REPLY).fence();
    assert!(w > r0);
    assert!(behind.is_blocked(&s), "the reader behind the writer waits for it");
    assert_eq!(release(&s, key, b"w"), 1);
    assert_eq!(behind.reply(REPLY).fence(), w + 1);
}

/// Two threads take read leases hand over hand, so the key is never free of readers. A writer
/// that queues gets the key once the readers in it leave, well within its `BLOCK`; without the
/// queue's arrival order it would wait until the readers stop.
#[test]
fn overlapping_readers_do_not_starve_a_writer() {
    const READING: Duration = Duration::from_secs(3);
    let s = Server::start();
    let key = "rw:stream";
    let stop = AtomicBool::new(false);
    let (granted_reads, refused_reads, highest_read) =
        (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let started = Instant::now();
    let waited = thread::scope(|scope| {
        for t in 0..2 {
            let (s, stop) = (&s, &stop);
            let (granted_reads, refused_reads, highest_read) =
                (&granted_reads, &refused_reads, &highest_read);
            scope.spawn(move || {
                let mut conn = s.conn();
                let release = |conn: &mut redis::Connection, token: &str| {
                    let _: i64 = redis::cmd(fencedlock_protocol::command::RELEASE.name)
                        .arg(key)
                        .arg(token)
                        .query(conn)
                        .expect("release");
                };
                // Hand over hand: the next read lease is taken before the last one is released.
                let mut held: Option<String> = None;
                for i in 0.. {
                    if stop.load(Ordering::SeqCst) || started.elapsed() > READING {
                        break;
                    }
                    let token = format!("t{t}-{i}");
                    let got: Option<u64> = read_cmd(key, &token, 2_000, None).query(&mut conn).expect("read");
                    if let Some(fence) = got {
                        granted_reads.fetch_add(1, Ordering::SeqCst);
                        highest_read.fetch_max(fence, Ordering::SeqCst);
                    } else {
                        refused_reads.fetch_add(1, Ordering::SeqCst);
                    }
                    if let Some(last) = held.take() {
                        release(&mut conn, &last);
                    }
                    held = got.map(|_| token);
                    thread::sleep(Duration::from_millis(5));
                }
                if let Some(last) = held {
                    release(&mut conn, &last);
                }
            });
        }
        // Let the readers overlap, then the writer queues.
        thread::sleep(Duration::from_millis(300));
        assert!(granted_reads.load(Ordering::SeqCst) > 0, "the readers got in");
        let asked = Instant::now();
        let reply = s.send_acquire_cmd(&acquire_cmd(key, b"writer", LONG_TTL, Some(2_000))).reply(REPLY);
        let waited = asked.elapsed();
        stop.store(true, Ordering::SeqCst);
        let fence = reply.fence();
        assert!(fence > highest_read.load(Ordering::SeqCst), "readers got no fence after the writer's");
        waited
    });
    assert!(waited < Duration::from_millis(1_500), "the writer waited {waited:?}");
    eprintln!(
        "writer among overlapping readers: in after {waited:?}; {} reads granted, {} refused",
        granted_reads.load(Ordering::SeqCst),
        refused_reads.load(Ordering::SeqCst)
    );
}

/// Readers on one key, a writer on another, a key that was read and is idle.
const KEPT: [&str; 3] = ["rw:p:readers", "rw:p:writer", "rw:p:idle"];

fn write_keys(s: &Server) -> Vec<Option<SemaphoreStatus>> {
    let _: Option<u64> = s.query(read_cmd(KEPT[0], "a", LONG_TTL, None).arg("LABEL").arg("la")).unwrap();
    read(s, KEPT[0], "b");
    read(s, KEPT[0], "c");
    grant(s, KEPT[1], b"w", LONG_TTL);
    read(s, KEPT[2], "gone");
    assert_eq!(release(s, KEPT[2], b"gone"), 1);
    masked(s)
}

fn masked(s: &Server) -> Vec<Option<SemaphoreStatus>> {
    KEPT.iter()
        .map(|k| {
            s.semaphore_status(k).map(|mut st| {
                st.holders.iter_mut().for_each(|h| h.remaining = Duration::ZERO);
                st
            })
        })
        .collect()
}

/// The statuses are `expected`; on a primary (`writable`) the readers are still theirs, a
/// writer still waits for them, and readers still wait for the writer.
fn check_keys(s: &Server, expected: &[Option<SemaphoreStatus>], what: &str, writable: bool) {
    assert_eq!(masked(s), expected, "{what}");
    assert_eq!(readers(s, KEPT[0]).len(), 3, "{what}");
    if !writable {
        return;
    }
    write_nil(s, KEPT[0], "intruder");
    read_nil(s, KEPT[1], "intruder");
    for token in ["a", "b", "c"] {
        assert_eq!(renew(s, KEPT[0], token.as_bytes(), LONG_TTL), 1, "{what}: {token} still reads");
    }
}

#[test]
fn replicas_aof_after_kill9_and_rdb_reloads_keep_every_reader() {
    let mut p = Server::builder()
        .arg("appendonly", "yes")
        .arg("appendfsync", "always")
        .arg("aof-use-rdb-preamble", "no")
        .start();
    let r = p.start_replica();
    let expected = write_keys(&p);
    p.wait_caught_up(&r);
    check_keys(&r, &expected, "replica", false);
    for key in KEPT {
        assert_eq!(r.digest_value(key), p.digest_value(key), "{key}");
    }
    drop(r);

    let top = p.high_water();
    p.kill9();
    p.restart();
    check_keys(&p, &expected, "AOF replay after kill -9", true);
    let next = read(&p, "rw:p:after", "new");
    assert!(next > top && epoch_of(next) > epoch_of(top), "{next} after the restart, {top} before");

    // A rewrite without the RDB preamble writes each key as a record; then the RDB.
    p.rewrite_aof();
    p.stop();
    p.restart();
    check_keys(&p, &expected, "AOF rewrite, then restart", true);
    let _: () = p.cmd(&["DEBUG", "RELOAD"]).unwrap();
    check_keys(&p, &expected, "DEBUG RELOAD", true);
}
