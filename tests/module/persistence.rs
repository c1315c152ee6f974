//! Fences never repeat across reloads and restarts: DEBUG RELOAD, RDB, AOF (with and without
//! the RDB preamble, before and after BGREWRITEAOF), kill -9, and the restart grace.

use std::time::Duration;

use crate::support::*;
use harness::{epoch_of, error_text, floor_now, poll, LockStatus, Server};

/// Lock state a test writes before a reload and checks after it.
struct Scenario {
    /// Held with a long ttl by `held_token`.
    held_fence: u64,
    held_token: Vec<u8>,
    /// Released: fence kept, not held.
    released_fence: u64,
    /// Expired without release.
    expired_fence: u64,
    /// The highest fence ever issued; its key was deleted, so only the high-water mark
    /// remembers it.
    max_fence: u64,
}

const HELD: &str = "p:held";
const RELEASED: &str = "p:released";
const EXPIRED: &str = "p:expired";
const DELETED: &str = "p:deleted";
const EXPIRED_TTL: u64 = 30;

fn write_scenario(s: &Server) -> Scenario {
    let held_token = binary_token(9);
    let held_fence = grant(s, HELD, &held_token, LONG_TTL);
    let released_fence = grant(s, RELEASED, b"r", LONG_TTL);
    assert_eq!(release(s, RELEASED, b"r"), 1);
    let expired_fence = grant(s, EXPIRED, b"e", EXPIRED_TTL);
    wait_expired(s, EXPIRED);
    let max_fence = grant(s, DELETED, b"d", LONG_TTL);
    let deleted: i64 = s.cmd(&["DEL", DELETED]).unwrap();
    assert_eq!(deleted, 1);
    Scenario { held_fence, held_token, released_fence, expired_fence, max_fence }
}

/// After any reload: the locks are as they were, the held lease is still held (its remaining
/// time restarts on the loading server's clock, so it can only look longer), the binary token
/// still works, and every new fence is above everything issued before.
fn check_scenario(s: &Server, sc: &Scenario) {
    let held = status_of(s, HELD);
    assert_eq!((held.fence, held.held), (sc.held_fence, true), "{held:?}");
    assert!(held.remaining.is_some_and(|d| !d.is_zero() && d <= Duration::from_millis(LONG_TTL)), "{held:?}");
    assert_eq!(
        status_of(s, RELEASED),
        LockStatus { fence: sc.released_fence, held: false, remaining: None, label: None }
    );
    // An AOF replays the grant's effect record, whose remaining time restarts on the new
    // clock: an expired lease may look live again for at most its original ttl (longer,
    // never shorter, as the design says). RDB snapshots taken after expiry show it free.
    let expired = status_of(s, EXPIRED);
    assert_eq!(expired.fence, sc.expired_fence);
    assert!(
        !expired.held || expired.remaining.is_none_or(|d| d <= Duration::from_millis(EXPIRED_TTL)),
        "{expired:?}"
    );
    wait_expired(s, EXPIRED);
    assert_eq!(s.lock_status(DELETED), None);
    assert!(s.high_water() >= sc.max_fence, "high-water mark lost: {:?}", info(s));

    assert_eq!(acquire(s, HELD, b"intruder", LONG_TTL), None, "the lease survived");
    for key in [RELEASED, EXPIRED, DELETED, "p:fresh"] {
        let fence = grant(s, key, b"next", LONG_TTL);
        assert!(fence > sc.max_fence, "{key}: fence {fence} repeats (max before: {})", sc.max_fence);
    }
    assert_eq!(grant(s, HELD, &sc.held_token, LONG_TTL), sc.held_fence, "token survived as bytes");
    assert_eq!(release(s, HELD, &sc.held_token), 1);
}

/// After a primary's start-up load the fences start a new epoch, at the wall clock: no
/// earlier than the test's own clock read before the load (same machine, same clock).
fn assert_epoch_jump(s: &Server, max_before: u64, before: Before) {
    let epoch = s.fencedlock_counter("fencedlock_epoch");
    assert!(epoch > before.epoch, "epoch {epoch} did not move past {}", before.epoch);
    let fence = grant(s, &format!("p:after-jump:{epoch}"), b"j", LONG_TTL);
    assert!(
        epoch_of(fence) > epoch_of(max_before),
        "fence {fence} is in the epoch of {max_before}: no new epoch"
    );
    assert!(fence > before.floor, "fence {fence} is below the clock before the restart");
}

/// The server's epoch and the floor of an epoch taken now, read just before a restart.
#[derive(Clone, Copy)]
struct Before {
    epoch: u64,
    floor: u64,
}

fn before_restart(s: &Server) -> Before {
    Before { epoch: s.fencedlock_counter("fencedlock_epoch"), floor: floor_now() }
}

#[test]
fn debug_reload_keeps_locks_and_the_high_water_mark() {
    let s = Server::start();
    let sc = write_scenario(&s);
    let digest = s.digest_value(HELD);
    let _: () = s.cmd(&["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(s.digest_value(HELD), digest);
    check_scenario(&s, &sc);
}

#[test]
fn an_empty_dataset_still_carries_the_high_water_mark() {
    let s = Server::start();
    let f = grant(&s, "empty:a", b"t", LONG_TTL);
    let _: () = s.cmd(&["FLUSHALL"]).unwrap();
    let _: () = s.cmd(&["DEBUG", "RELOAD"]).unwrap();
    let dbsize: i64 = s.cmd(&["DBSIZE"]).unwrap();
    assert_eq!(dbsize, 0);
    assert!(grant(&s, "empty:a", b"t", LONG_TTL) > f);
}

#[test]
fn restart_from_rdb() {
    let mut s = Server::start();
    let sc = write_scenario(&s);
    let epoch = before_restart(&s);
    s.save();
    s.kill9();
    s.restart();
    check_scenario(&s, &sc);
    assert_epoch_jump(&s, sc.max_fence, epoch);
}

#[test]
fn every_restart_is_a_new_epoch() {
    let mut s = Server::start();
    let mut last = grant(&s, "epochs:k", b"t", LONG_TTL);
    for round in 0..3 {
        let epoch = before_restart(&s);
        s.save();
        s.kill9();
        s.restart();
        assert_epoch_jump(&s, last, epoch);
        assert_eq!(release(&s, "epochs:k", b"t"), 1, "round {round}");
        last = grant(&s, "epochs:k", b"t", LONG_TTL);
    }
}

fn aof_server(preamble: bool) -> Server {
    Server::builder()
        .arg("appendonly", "yes")
        .arg("appendfsync", "always")
        .arg("aof-use-rdb-preamble", if preamble { "yes" } else { "no" })
        .start()
}

/// Half the scenario before the rewrite (it lands in the rewritten base), half after (it
/// lands in the incremental AOF as effect records), then a graceful restart.
fn aof_rewrite_then_restart(preamble: bool) {
    let mut s = aof_server(preamble);
    let before = grant(&s, "aof:before-rewrite", b"b", LONG_TTL);
    let deleted_before = grant(&s, "aof:deleted-before-rewrite", b"b", LONG_TTL);
    let _: i64 = s.cmd(&["DEL", "aof:deleted-before-rewrite"]).unwrap();
    s.rewrite_aof();
    let sc = write_scenario(&s);
    assert!(sc.max_fence > deleted_before && deleted_before > before);
    let epoch = before_restart(&s);
    s.stop();
    s.restart();
    assert_eq!(status_of(&s, "aof:before-rewrite").fence, before);
    check_scenario(&s, &sc);
    assert_epoch_jump(&s, sc.max_fence, epoch);

    // And a rewrite taken after everything, with the max-fence key already deleted, must
    // carry the high-water mark on its own.
    let top = grant(&s, "aof:top", b"t", LONG_TTL);
    let _: i64 = s.cmd(&["DEL", "aof:top"]).unwrap();
    s.rewrite_aof();
    s.stop();
    s.restart();
    assert!(grant(&s, "aof:top", b"t", LONG_TTL) > top);
    assert!(grant(&s, "aof:other", b"t", LONG_TTL) > top);
}

#[test]
fn restart_from_aof_after_rewrite_with_rdb_preamble() {
    aof_rewrite_then_restart(true);
}

#[test]
fn restart_from_aof_after_rewrite_without_rdb_preamble() {
    aof_rewrite_then_restart(false);
}

#[test]
fn kill9_with_appendfsync_always_loses_no_fence() {
    let mut s = aof_server(true);
    let sc = write_scenario(&s);
    let epoch = before_restart(&s);
    s.kill9();
    s.restart();
    check_scenario(&s, &sc);
    assert_epoch_jump(&s, sc.max_fence, epoch);
}

#[test]
fn restart_grace_refuses_new_grants_then_lifts() {
    let mut s = Server::start();
    let f = grant(&s, "grace:held", b"holder", LONG_TTL);
    let max = grant(&s, "grace:other", b"x", LONG_TTL);
    assert_eq!(release(&s, "grace:other", b"x"), 1, "free, so only the grace can refuse it");
    s.save();
    s.kill9();
    // Long enough to cover start-up and the checks below on a loaded CI machine.
    s.set_restart_arg("fencedlock.restart-grace-ms", "3000");
    s.restart();

    let keys = ["grace:held", "grace:other", "grace:new"];
    let before = fingerprint(&s, &keys);
    for (key, token) in [("grace:new", "secret-grace-token"), ("grace:other", "secret-grace-token")] {
        let err = try_acquire(&s, key, token.as_bytes(), LONG_TTL)
            .map(|fence| panic!("ACQUIRE {key} during the grace was answered {fence:?}"))
            .unwrap_err();
        let text = error_text(&err);
        assert!(text.starts_with("TRYAGAIN"), "{text}");
        assert!(!text.contains(token), "token leaked: {text}");
    }
    assert_eq!(fingerprint(&s, &keys), before, "a refused grant changed state");
    assert_eq!(status_of(&s, "grace:held").fence, f, "reads work during the grace");

    // Bounded wait for the grace to end; then grants resume above everything before.
    let mut granted = None;
    poll("the restart grace to end", Duration::from_secs(10), || {
        granted = try_acquire(&s, "grace:new", b"late", LONG_TTL).ok().flatten();
        granted.is_some()
    });
    assert!(granted.expect("polled until granted") > max);
    assert_eq!(acquire(&s, "grace:held", b"intruder", LONG_TTL), None, "the held lease survived");
}

/// On a server with no replica, no replication backlog and no AOF, where Redis propagates
/// nothing, every lock change still counts toward the `save` points, so a server that only
/// serves locks snapshots them: the module's effect record (`RedisModule_Replicate`) is what
/// counts a change, so it is sent even then (`module/src/ffi/replication.rs`, issue #44).
#[test]
fn lock_changes_alone_trigger_the_save_points() {
    let s = Server::builder().arg("save", "1 3").start();
    let changes = || -> u64 {
        let v = s.info_field("persistence", "rdb_changes_since_last_save").expect("INFO persistence");
        v.parse().expect("a count")
    };
    s.save();
    let last_save = s.info_field("persistence", "rdb_last_save_time");
    assert_eq!(changes(), 0);
    let fence = grant(&s, "save:a", b"t", LONG_TTL);
    assert_eq!(changes(), 1, "ACQUIRE");
    assert_eq!(renew(&s, "save:a", b"t", LONG_TTL), 1);
    assert_eq!(changes(), 2, "RENEW");
    assert_eq!(release(&s, "save:a", b"t"), 1);
    assert_eq!(changes(), 3, "RELEASE");
    // Three changes: the `save 1 3` point snapshots them within a few seconds.
    poll("a save point's snapshot", Duration::from_secs(10), || {
        changes() == 0 && s.info_field("persistence", "rdb_last_save_time") != last_save
    });
    let mut s = s;
    s.kill9();
    s.restart();
    assert_eq!(status_of(&s, "save:a"), LockStatus { fence, held: false, remaining: None, label: None });
}
