//! Reclaim of idle lock keys (`fencedlock.reclaim-after-ms`, issue #10) on real servers: the
//! config, when a key goes (not before its lease ended plus the retention, soon after), that a
//! held lease is never reclaimed, the `INFO` counters, fences after a reclaim, `DEL` or
//! `FLUSHALL`, replicas (only a primary deletes; `DEL` is replicated; a promoted replica takes
//! over), keys that came from `RESTORE` / `COPY`, and reclaim after an AOF restart.
//!
//! Timing checks use the client's monotonic clock, which is the server's too (same machine):
//! a key whose lease ended when the server ran a command that was *sent* at `t` cannot be gone
//! in a reply that arrives before `t + retention`; so "not before" needs no sleeps that a slow
//! machine could break.

use std::time::{Duration, Instant};

use fencedlock_protocol::command::STATUS;
use fencedlock_protocol::config::RECLAIM_AFTER_MS;
use fencedlock_protocol::limits::{DEFAULT_RECLAIM_AFTER_MS, MAX_MAX_TTL_MS};

use crate::support::*;
use harness::{epoch_of, error_text, poll, redis, Server, EPOCH_GAP};

const RECLAIM: &str = RECLAIM_AFTER_MS.full_name;
/// The sweep runs every 100 ms; a due key is gone a few sweeps later. Every wait for a reclaim
/// is bounded by this (plus the retention).
const GONE_WITHIN: Duration = Duration::from_secs(5);
/// How often a test looks at a key while waiting for it to go.
const LOOK_EVERY: Duration = Duration::from_millis(10);
/// Slack for rounding between the server's microseconds and the client's clock.
const SLACK: Duration = Duration::from_millis(1);

fn reclaimed(s: &Server) -> u64 {
    s.fencedlock_counter("fencedlock_reclaimed")
}

fn tracked(s: &Server) -> u64 {
    s.fencedlock_counter("fencedlock_reclaim_tracked")
}

fn index_bytes(s: &Server) -> u64 {
    s.fencedlock_counter("fencedlock_reclaim_index_bytes")
}

/// A server whose retention is `ms` from its config file.
fn server_with_retention(ms: u64) -> Server {
    Server::builder().arg(RECLAIM, ms.to_string()).start()
}

/// The ttl of the leases [`idle_key`] takes and releases at once. Short, so that where the
/// release arrives as an `APPLY` record (a replica, an AOF replay) the key is idle soon even if
/// that receiver counts from the lease's deadline; the tests named `*_counts_idle_time_from_*`
/// check the long-ttl case on its own.
const IDLE_TTL: u64 = 200;

/// Grants `key` and releases it at once: an idle lock key. Returns its fence.
fn idle_key(s: &Server, key: &str) -> u64 {
    let fence = grant(s, key, b"idle", IDLE_TTL);
    assert_eq!(release(s, key, b"idle"), 1, "{key}");
    fence
}

/// Waits (bounded) until none of `keys` exists.
fn wait_gone(s: &Server, keys: &[String], limit: Duration) {
    poll(&format!("{} keys to be reclaimed on {}", keys.len(), s.addr()), limit, || {
        keys.iter().all(|k| s.lock_status(k).is_none())
    });
}

/// Looks at `key` every few ms until `STATUS` is nil; returns when that nil reply arrived on
/// the client's monotonic clock. Panics if the key is still there at `deadline`.
fn gone_at(s: &Server, key: &str, deadline: Instant) -> Instant {
    loop {
        let present = s.lock_status(key).is_some();
        let seen = Instant::now();
        if !present {
            return seen;
        }
        assert!(seen < deadline, "{key} was not reclaimed in time: {:?}", s.lock_status(key));
        std::thread::sleep(LOOK_EVERY);
    }
}

/// `RELEASE key token` sent now: returns when it was sent (before the server saw it).
fn release_at(s: &Server, key: &str, token: &[u8]) -> Instant {
    let sent = Instant::now();
    assert_eq!(release(s, key, token), 1, "{key}");
    sent
}

#[test]
fn retention_config_has_its_default_applies_at_once_and_refuses_bad_values() {
    let s = Server::start();
    assert_eq!(s.config_get(RECLAIM), DEFAULT_RECLAIM_AFTER_MS.to_string());
    assert_eq!(DEFAULT_RECLAIM_AFTER_MS, 600_000, "the documented default: ten minutes");
    let fence = idle_key(&s, "cfg:idle");

    // Refused values change nothing: neither the config nor what the sweep does.
    let too_big = (MAX_MAX_TTL_MS + 1).to_string();
    for bad in ["-1", "abc", "1.5", "", "10ms", too_big.as_str(), "99999999999999999999999"] {
        let err = s.try_config_set(RECLAIM, bad).expect_err(bad);
        assert!(error_text(&err).starts_with("ERR"), "CONFIG SET {RECLAIM} {bad:?}: {}", error_text(&err));
        assert_eq!(s.config_get(RECLAIM), "600000", "after the refused {bad:?}");
    }
    std::thread::sleep(Duration::from_millis(400)); // four sweeps
    assert_eq!(status_of(&s, "cfg:idle").fence, fence, "a refused value deleted nothing");
    assert_eq!(reclaimed(&s), 0);

    // The bounds themselves are accepted.
    s.config_set(RECLAIM, &MAX_MAX_TTL_MS.to_string());
    assert_eq!(s.config_get(RECLAIM), MAX_MAX_TTL_MS.to_string());
    // 0 applies at once, also to a key that was already idle.
    s.config_set(RECLAIM, "0");
    assert_eq!(s.config_get(RECLAIM), "0");
    wait_gone(&s, &["cfg:idle".to_string()], GONE_WITHIN);
    assert_eq!(reclaimed(&s), 1);

    // And back: a released key stays again.
    s.config_set(RECLAIM, "600000");
    assert_eq!(s.config_get(RECLAIM), "600000");
    let again = idle_key(&s, "cfg:idle");
    assert!(again > fence, "{again} after {fence}");
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(status_of(&s, "cfg:idle").fence, again);
    assert_eq!(reclaimed(&s), 1);

    // From the config file too.
    let from_file = server_with_retention(1234);
    assert_eq!(from_file.config_get(RECLAIM), "1234");
}

#[test]
fn released_keys_are_reclaimed_and_their_next_fences_are_higher() {
    let s = server_with_retention(0);
    let keys: Vec<String> = (0..50).map(|i| format!("rel:{i}")).collect();
    let fences: Vec<u64> = keys.iter().map(|k| idle_key(&s, k)).collect();
    let max = *fences.iter().max().expect("fences");
    let grants = s.fencedlock_counter("fencedlock_grants");

    wait_gone(&s, &keys, GONE_WITHIN);
    assert_eq!(s.dbsize(), 0, "every released key was deleted");
    assert_eq!(reclaimed(&s), 50);
    poll("the reclaim index to empty", GONE_WITHIN, || tracked(&s) == 0);
    assert_eq!(index_bytes(&s), 0, "an empty index holds no memory");
    assert_eq!(s.high_water(), max, "reclaiming moves no fence");
    assert_eq!(s.fencedlock_counter("fencedlock_grants"), grants, "reclaiming grants nothing");

    // The old holder's RENEW and RELEASE find nothing, and create nothing.
    assert_eq!(renew(&s, "rel:0", b"idle", LONG_TTL), 0);
    assert_eq!(release(&s, "rel:1", b"idle"), 0);
    assert!(!s.exists("rel:0") && !s.exists("rel:1"));

    // The next grant of each key is above every fence that key (or any key) had.
    let mut last = max;
    for (key, old) in keys.iter().zip(&fences) {
        let fence = grant(&s, key, b"next", LONG_TTL);
        assert!(fence > *old && fence > last, "{key}: {fence} after {old} (mark was {last})");
        last = fence;
    }
}

#[test]
fn a_key_goes_retention_after_its_release_or_its_deadline_and_not_before() {
    const RETENTION: Duration = Duration::from_millis(1_000);
    const TTL: Duration = Duration::from_millis(600);
    let s = server_with_retention(RETENTION.as_millis() as u64);

    // Released: idle from the release.
    grant(&s, "when:released", b"r", LONG_TTL);
    // Expired without a release: idle from its deadline.
    let acquire_sent = Instant::now();
    let expiring = grant(&s, "when:expired", b"e", TTL.as_millis() as u64);
    let release_sent = release_at(&s, "when:released", b"r");
    // Held with a long ttl: stays.
    let held = grant(&s, "when:held", b"h", LONG_TTL);

    let limit = Instant::now() + TTL + RETENTION + GONE_WITHIN;
    let released_gone = gone_at(&s, "when:released", limit);
    let expired_gone = gone_at(&s, "when:expired", limit);
    let after_release = released_gone - release_sent;
    let after_acquire = expired_gone - acquire_sent;
    eprintln!("released key gone {after_release:?} after its RELEASE was sent; expired key gone {after_acquire:?} after its ACQUIRE (ttl {TTL:?}, retention {RETENTION:?})");
    assert!(
        after_release + SLACK >= RETENTION,
        "reclaimed {after_release:?} after its release, before the retention"
    );
    assert!(
        after_acquire + SLACK >= TTL + RETENTION,
        "an expired key went {after_acquire:?} after its grant, before deadline + retention"
    );
    assert_eq!(status_of(&s, "when:held").fence, held);
    assert!(s.lock_held("when:held"));
    assert_eq!(reclaimed(&s), 2);
    assert!(grant(&s, "when:expired", b"again", LONG_TTL) > expiring.max(held));
}

#[test]
fn a_held_lease_is_never_reclaimed_even_with_retention_zero() {
    let s = server_with_retention(0);
    // Held with a long ttl from the start.
    let long = grant(&s, "held:long", &binary_token(3), LONG_TTL);
    // Released, then taken again: its index entry still says "idle since the release" (the
    // index is lazy about new grants), so it falls due at once and must be requeued.
    let first = idle_key(&s, "held:regranted");
    let regranted = grant(&s, "held:regranted", b"second", LONG_TTL);
    assert!(regranted > first);
    // A short lease kept alive by renewals: its entry falls due at its first deadline.
    let renewed = grant(&s, "held:renewed", b"keeper", 1_000);

    let start = Instant::now();
    let mut renewals = 0;
    while start.elapsed() < Duration::from_millis(2_500) {
        assert_eq!(
            renew(&s, "held:renewed", b"keeper", 1_000),
            1,
            "the renewed lease was lost after {:?}",
            start.elapsed()
        );
        renewals += 1;
        for (key, fence) in [("held:long", long), ("held:regranted", regranted), ("held:renewed", renewed)] {
            let st = s.lock_status(key).unwrap_or_else(|| panic!("{key} was reclaimed while held"));
            assert_eq!((st.fence, st.held), (fence, true), "{key}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(renewals >= 10, "{renewals} renewals");
    assert_eq!(reclaimed(&s), 0, "nothing was idle");
    assert_eq!(tracked(&s), 3);

    // Once released, they go.
    assert_eq!(release(&s, "held:long", &binary_token(3)), 1);
    assert_eq!(release(&s, "held:regranted", b"second"), 1);
    assert_eq!(release(&s, "held:renewed", b"keeper"), 1);
    wait_gone(&s, &["held:long".into(), "held:regranted".into(), "held:renewed".into()], GONE_WITHIN);
    assert_eq!(reclaimed(&s), 3);
}

#[test]
fn info_counts_reclaimed_keys_tracked_keys_and_stale_entries() {
    let s = Server::start();
    let (r0, t0) = (reclaimed(&s), tracked(&s));
    assert_eq!((r0, t0, index_bytes(&s)), (0, 0, 0), "a fresh server tracks nothing");

    let idle: Vec<String> = (0..10).map(|i| format!("cnt:idle:{i}")).collect();
    for k in &idle {
        idle_key(&s, k);
    }
    let held: Vec<String> = (0..3).map(|i| format!("cnt:held:{i}")).collect();
    for k in &held {
        grant(&s, k, b"h", LONG_TTL);
    }
    // A held key is filed once (at its deadline); a released one twice (at the deadline it was
    // granted with, and at its release) until the older entry falls due and is skipped as stale.
    assert_eq!(tracked(&s), 23, "held keys filed once, released keys twice");
    let bytes = index_bytes(&s);
    let names: u64 = idle.iter().chain(&held).map(|k| k.len() as u64).sum();
    let idle_names: u64 = idle.iter().map(|k| k.len() as u64).sum();
    assert!(
        bytes >= names + idle_names && bytes <= names + idle_names + 23 * 64,
        "index bytes {bytes} for 23 entries ({} bytes of names)",
        names + idle_names
    );
    // Renewals and re-entries do not add entries.
    assert_eq!(renew(&s, "cnt:held:0", b"h", LONG_TTL), 1);
    assert!(grant(&s, "cnt:held:1", b"h", LONG_TTL) > 0);
    assert_eq!(tracked(&s), 23);

    // Keys deleted by other means leave their entries until they fall due.
    let deleted: i64 = s.cmd(&["DEL", idle[0].as_str(), &idle[1], &idle[2], &idle[3]]).unwrap();
    assert_eq!(deleted, 4);
    assert_eq!(tracked(&s), 23, "stale entries stay until due");
    assert_eq!(reclaimed(&s), 0);

    // Due now: the six idle keys left are reclaimed; the entries of the deleted ones are
    // forgotten, not counted as reclaims.
    s.config_set(RECLAIM, "0");
    poll("idle keys to be reclaimed", GONE_WITHIN, || tracked(&s) == 3);
    assert_eq!(reclaimed(&s), 6);
    assert_eq!(s.dbsize(), 3);
    let held_bytes = index_bytes(&s);
    assert!(held_bytes > 0 && held_bytes < bytes, "{held_bytes} for 3 held keys, {bytes} for 13");

    for k in &held {
        assert_eq!(release(&s, k, b"h"), 1);
    }
    poll("the held keys to be reclaimed once released", GONE_WITHIN, || reclaimed(&s) == 9);
    assert_eq!(s.dbsize(), 0);
    // Their grants' entries, at the long deadlines, wait to fall due and be skipped.
    assert_eq!(tracked(&s), 3);
}

#[test]
fn del_flushall_and_recreated_keys_keep_fences_rising_and_are_judged_on_their_current_state() {
    // Retention 10 min while the versions below are written, so nothing goes before it drops.
    let s = Server::start();
    // Each version ends with a release, which leaves an index entry at the release time; DEL
    // and FLUSHALL leave those entries behind.
    let f1 = idle_key(&s, "re:k");
    let _: i64 = s.cmd(&["DEL", "re:k"]).unwrap();
    let f2 = idle_key(&s, "re:k");
    assert!(f2 > f1, "{f2} after DEL of {f1}");
    let _: () = s.cmd(&["FLUSHALL"]).unwrap();
    let f3 = grant(&s, "re:k", b"c", LONG_TTL);
    assert!(f3 > f2, "{f3} after FLUSHALL of {f2}");
    // The entries of the deleted versions are due at once; the key now held must stay.
    s.config_set(RECLAIM, "0");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(s.lock_status("re:k").map(|st| (st.fence, st.held)), Some((f3, true)), "held by c");
    assert_eq!(reclaimed(&s), 0);
    assert_eq!(release(&s, "re:k", b"c"), 1);
    wait_gone(&s, &["re:k".into()], GONE_WITHIN);
    let f4 = grant(&s, "re:k", b"d", LONG_TTL);
    assert!(f4 > f3);

    // A stale entry of an earlier version falls due before the key's own retention ends: the
    // key is judged on when *it* was last released.
    const RETENTION: Duration = Duration::from_millis(2_000);
    s.config_set(RECLAIM, &RETENTION.as_millis().to_string());
    grant(&s, "re:stale", b"a", LONG_TTL);
    release_at(&s, "re:stale", b"a");
    let _: i64 = s.cmd(&["DEL", "re:stale"]).unwrap();
    std::thread::sleep(Duration::from_millis(1_200));
    let again = grant(&s, "re:stale", b"b", LONG_TTL);
    let second_release = release_at(&s, "re:stale", b"b");
    let gone = gone_at(&s, "re:stale", Instant::now() + RETENTION + GONE_WITHIN);
    let after = gone - second_release;
    assert!(
        after + SLACK >= RETENTION,
        "reclaimed {after:?} after its last release, by an earlier version's entry"
    );
    assert!(grant(&s, "re:stale", b"c", LONG_TTL) > again);
}

#[test]
fn restored_and_copied_lock_keys_are_reclaimed_too() {
    let s = Server::start();
    let fence = grant(&s, "src:lock", b"t", LONG_TTL);
    let payload: Vec<u8> = s.cmd(&["DUMP", "src:lock"]).unwrap();
    assert_eq!(release(&s, "src:lock", b"t"), 1);
    let idle_payload: Vec<u8> = s.cmd(&["DUMP", "src:lock"]).unwrap();

    let _: () = s.query(redis::cmd("RESTORE").arg("dst:held").arg(0).arg(&payload)).unwrap();
    let _: () = s.query(redis::cmd("RESTORE").arg("dst:idle").arg(0).arg(&idle_payload)).unwrap();
    let copied: i64 = s.cmd(&["COPY", "dst:held", "dst:copy"]).unwrap();
    assert_eq!(copied, 1);
    // src:lock twice (grant and release), each restored or copied key once.
    assert_eq!(tracked(&s), 5, "restored and copied keys are tracked");

    s.config_set(RECLAIM, "0");
    wait_gone(&s, &["src:lock".into(), "dst:idle".into()], GONE_WITHIN);
    std::thread::sleep(Duration::from_millis(300));
    for key in ["dst:held", "dst:copy"] {
        assert_eq!(status_of(&s, key).fence, fence, "{key} is held: kept");
    }
    assert_eq!(release(&s, "dst:copy", b"t"), 1);
    assert_eq!(release(&s, "dst:held", b"t"), 1);
    wait_gone(&s, &["dst:held".into(), "dst:copy".into()], GONE_WITHIN);
    assert_eq!(reclaimed(&s), 4);
    assert!(grant(&s, "dst:copy", b"next", LONG_TTL) > fence);
}

#[test]
fn renamed_and_moved_lock_keys_are_reclaimed_after_their_next_use() {
    // Nothing is reclaimed until the retention is lowered: every key below is renamed or moved
    // while its index entries still name its old place. RENAME and MOVE give the module no
    // callback with the new name, so a moved key is filed again by the next command that opens
    // it (here STATUS, or the RELEASE under the new name).
    let s = Server::start();
    // Idle, then renamed / moved to another database.
    let idle = idle_key(&s, "ren:idle");
    let _: () = s.cmd(&["RENAME", "ren:idle", "ren:idle2"]).unwrap();
    idle_key(&s, "mv:idle");
    let moved: i64 = s.cmd(&["MOVE", "mv:idle", "1"]).unwrap();
    assert_eq!(moved, 1);
    // Held, renamed, then expired without a release.
    grant(&s, "ren:expiring", b"t", 300);
    let _: () = s.cmd(&["RENAME", "ren:expiring", "ren:expiring2"]).unwrap();
    // Held, renamed, then released under its new name: the release files it.
    grant(&s, "ren:released", b"t", LONG_TTL);
    let _: () = s.cmd(&["RENAME", "ren:released", "ren:released2"]).unwrap();
    assert_eq!(release(&s, "ren:released2", b"t"), 1);
    std::thread::sleep(Duration::from_millis(300));

    let mut db1 = s.conn();
    let _: () = redis::cmd("SELECT").arg(1).query(&mut db1).unwrap();
    let remaining = |s: &Server, db1: &mut redis::Connection| {
        let mut left: Vec<&str> =
            ["ren:idle2", "ren:expiring2", "ren:released2"].into_iter().filter(|k| s.exists(k)).collect();
        let moved_left: i64 = redis::cmd("EXISTS").arg("mv:idle").query(db1).unwrap();
        if moved_left == 1 {
            left.push("mv:idle (db 1)");
        }
        left
    };

    s.config_set(RECLAIM, "0");
    poll("the key released under its new name to go", GONE_WITHIN, || !s.exists("ren:released2"));
    // Untouched since the move: not filed under the new name yet (the documented gap).
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(remaining(&s, &mut db1), ["ren:idle2", "ren:expiring2", "mv:idle (db 1)"]);
    assert_eq!(reclaimed(&s), 1);

    // Their next use files them, and they go.
    assert!(s.lock_status("ren:idle2").is_some());
    assert!(s.lock_status("ren:expiring2").is_some());
    let status: redis::Value = redis::cmd(STATUS.name).arg("mv:idle").query(&mut db1).unwrap();
    assert!(harness::decode_status(&status).is_some());
    let deadline = Instant::now() + GONE_WITHIN;
    let left = loop {
        let left = remaining(&s, &mut db1);
        if left.is_empty() || Instant::now() >= deadline {
            break left;
        }
        std::thread::sleep(LOOK_EVERY);
    };
    assert!(left.is_empty(), "renamed / moved lock keys not reclaimed after their next use: {left:?}");
    assert_eq!(reclaimed(&s), 4);
    assert!(grant(&s, "ren:idle2", b"next", LONG_TTL) > idle);
}

#[test]
fn a_replica_follows_the_primarys_reclaims_and_never_reclaims_on_its_own() {
    let p = Server::start();
    // The replica would reclaim at once if it decided on its own.
    let r = p.replica_builder().arg(RECLAIM, "0").start();
    harness::wait_replica_online(&p, &r);

    let idle: Vec<String> = (0..20).map(|i| format!("rep:idle:{i}")).collect();
    for k in &idle {
        idle_key(&p, k);
    }
    let held: Vec<(String, u64)> =
        (0..3).map(|i| format!("rep:held:{i}")).map(|k| (k.clone(), grant(&p, &k, b"h", LONG_TTL))).collect();
    p.wait_caught_up(&r);
    assert_eq!(r.dbsize(), 23);
    // Each applied grant files a key; each applied release files it again.
    assert_eq!(tracked(&r), 43, "the replica tracks what it applies");
    // The idle keys' entries fall due on the replica (retention 0): it must still keep them.
    std::thread::sleep(Duration::from_millis(IDLE_TTL + 500));
    assert_eq!(r.dbsize(), 23, "a replica never deletes on its own");
    assert_eq!(reclaimed(&r), 0);

    // The primary reclaims; its DELs reach the replica.
    p.config_set(RECLAIM, "0");
    wait_gone(&p, &idle, GONE_WITHIN);
    assert_eq!(reclaimed(&p), 20);
    p.wait_caught_up(&r);
    assert_eq!(r.dbsize(), 3, "the replica applied the reclaims");
    for (k, fence) in &held {
        let st = status_of(&r, k);
        assert_eq!((st.fence, st.held), (*fence, true), "{k} on the replica");
    }
    assert_eq!(reclaimed(&r), 0, "the replica deleted nothing itself");
    poll("the replica to forget the reclaimed keys", GONE_WITHIN, || tracked(&r) == 3);
    assert_eq!(p.digest(), r.digest());
}

#[test]
fn a_promoted_replica_reclaims_what_its_primary_left() {
    let mut p = Server::start();
    let r = p.replica_builder().arg(RECLAIM, "300").start();
    harness::wait_replica_online(&p, &r);

    let idle: Vec<String> = (0..20).map(|i| format!("pro:idle:{i}")).collect();
    let mut max = 0;
    for k in &idle {
        max = max.max(idle_key(&p, k));
    }
    let long = grant(&p, "pro:held", b"h", LONG_TTL);
    let short = grant(&p, "pro:expiring", b"e", 800);
    p.wait_caught_up(&r);
    // Every idle entry is due on the replica by now: it still waits for its primary.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(r.dbsize(), 22, "not reclaimed by a replica");
    assert_eq!(reclaimed(&r), 0);

    p.kill9();
    r.promote();
    let mut gone = idle.clone();
    gone.push("pro:expiring".into());
    wait_gone(&r, &gone, Duration::from_millis(800 + 300) + GONE_WITHIN);
    assert_eq!(reclaimed(&r), 21, "the promoted replica reclaimed them itself");
    let st = status_of(&r, "pro:held");
    assert_eq!((st.fence, st.held), (long, true));
    // And fences go on above everything the old primary issued, in a new epoch.
    let top = max.max(long).max(short);
    for k in gone.iter().take(5) {
        let fence = grant(&r, k, b"next", LONG_TTL);
        assert!(fence > top && epoch_of(fence) > epoch_of(top), "{k}: {fence} after {top}");
    }
}

/// Where a release arrives as an `APPLY` record, the receiver must count the key's idle time
/// from that release too, not from the deadline of the lease it ended (here a minute later).
#[test]
fn a_promoted_replica_counts_idle_time_from_the_release_it_applied() {
    let p = Server::start();
    let r = p.replica_builder().arg(RECLAIM, "300").start();
    harness::wait_replica_online(&p, &r);
    let fence = grant(&p, "applied:replica", b"t", LONG_TTL);
    assert_eq!(release(&p, "applied:replica", b"t"), 1);
    p.wait_caught_up(&r);
    r.promote();
    let promoted = Instant::now();
    let gone = gone_at(&r, "applied:replica", promoted + GONE_WITHIN);
    eprintln!("released key reclaimed {:?} after the promotion", gone - promoted);
    assert!(grant(&r, "applied:replica", b"next", LONG_TTL) > fence);
}

/// The same for an AOF replay: the release is replayed as an `APPLY` record.
#[test]
fn an_aof_replay_counts_idle_time_from_the_replayed_release() {
    let mut s = Server::builder().arg("appendonly", "yes").start();
    let fence = grant(&s, "applied:aof", b"t", LONG_TTL);
    assert_eq!(release(&s, "applied:aof", b"t"), 1);
    s.set_restart_arg(RECLAIM, "300");
    s.restart();
    let loaded = Instant::now();
    let gone = gone_at(&s, "applied:aof", loaded + GONE_WITHIN);
    eprintln!("released key reclaimed {:?} after the restart", gone - loaded);
    assert!(grant(&s, "applied:aof", b"next", LONG_TTL) > fence);
}

#[test]
fn reclaim_works_on_keys_loaded_from_the_aof_and_reclaimed_keys_stay_gone() {
    // `replayed`: the keys come back as FENCEDLOCK.APPLY records; `rewritten`: from the RDB
    // preamble of a rewritten AOF.
    for rewrite in [false, true] {
        let variant = if rewrite { "rewritten" } else { "replayed" };
        let mut s = Server::builder().arg("appendonly", "yes").start();

        // Reclaimed before the restart: the AOF holds their DELs.
        let early: Vec<String> = (0..10).map(|i| format!("aof:early:{i}")).collect();
        let mut max = 0;
        for k in &early {
            max = max.max(idle_key(&s, k));
        }
        s.config_set(RECLAIM, "0");
        wait_gone(&s, &early, GONE_WITHIN);
        s.config_set(RECLAIM, "600000");

        let idle: Vec<String> = (0..20).map(|i| format!("aof:idle:{i}")).collect();
        for k in &idle {
            max = max.max(idle_key(&s, k));
        }
        let held: Vec<(String, u64)> = (0..3)
            .map(|i| format!("aof:held:{i}"))
            .map(|k| (k.clone(), grant(&s, &k, b"h", LONG_TTL)))
            .collect();
        max = max.max(held.iter().map(|(_, f)| *f).max().unwrap_or(0));
        if rewrite {
            s.rewrite_aof();
        }
        s.restart();

        assert_eq!(s.dbsize(), 23, "{variant}: the reclaimed keys stayed gone");
        for k in &early {
            assert_eq!(s.lock_status(k), None, "{variant}: {k}");
        }
        for (k, fence) in &held {
            let st = status_of(&s, k);
            assert_eq!((st.fence, st.held), (*fence, true), "{variant}: {k}");
        }
        let loaded = tracked(&s);
        assert!(loaded >= 23, "{variant}: every loaded lock key is tracked ({loaded})");
        if rewrite {
            assert_eq!(loaded, 23, "{variant}: a rewritten AOF has no deleted keys to leave entries behind");
        }
        assert_eq!(reclaimed(&s), 0);

        // The loaded idle keys are reclaimed; held ones stay.
        s.config_set(RECLAIM, "0");
        wait_gone(&s, &idle, GONE_WITHIN);
        poll("only the held keys to stay tracked", GONE_WITHIN, || tracked(&s) == 3);
        assert_eq!(reclaimed(&s), 20, "{variant}: stale entries are forgotten, not counted");
        assert_eq!(s.dbsize(), 3);
        for k in early.iter().chain(&idle).take(8) {
            let fence = grant(&s, k, b"next", LONG_TTL);
            assert!(fence > max && epoch_of(fence) > epoch_of(max), "{variant}: {k}: {fence} after {max}");
            assert_eq!(release(&s, k, b"next"), 1);
        }
        wait_gone(&s, &early, GONE_WITHIN);

        // Reclaims after the load are in the AOF too.
        s.restart();
        assert_eq!(s.dbsize(), 3, "{variant}: after a second restart");
        for (k, fence) in &held {
            assert_eq!(status_of(&s, k).fence, *fence, "{variant}: {k}");
        }
    }
}

#[test]
fn there_are_no_floor_keys_outside_cluster_mode() {
    let s = Server::start();
    for i in 0..200 {
        let key = format!("nofloor:{i}");
        grant(&s, &key, b"t", LONG_TTL);
        if i % 2 == 0 {
            assert_eq!(release(&s, &key, b"t"), 1);
        }
    }
    let f = grant(&s, "nofloor:raised", b"t", LONG_TTL);
    assert_eq!(raise(&s, "nofloor:raised", b"t", f + EPOCH_GAP), Some(f + EPOCH_GAP));
    assert_eq!(s.floor_keys(), Vec::<String>::new());
    assert_eq!(s.dbsize(), 201, "only the lock keys themselves");
}
