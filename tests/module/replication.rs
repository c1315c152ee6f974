//! Replication carries effects, not decisions: a replica's locks, digests and high-water mark
//! match its primary's, its leases never look shorter, and a promoted replica issues fences
//! above everything the old primary issued, even grants it never received.

use std::time::Duration;

use crate::support::*;
use harness::{epoch_of, error_text, floor_now, poll, LockStatus, Server};

const ACK: Duration = Duration::from_secs(5);

/// Compare every key's lock state and digest on primary and replica. The replica is read
/// first: its deadlines are at least the primary's, so its remaining time read earlier is at
/// least the primary's read later (1 ms slack for rounding).
fn assert_same_locks(primary: &Server, replica: &Server, keys: &[&str]) {
    for key in keys {
        let r = replica.lock_status(key);
        let p = primary.lock_status(key);
        match (&p, &r) {
            (None, None) => {}
            (Some(p), Some(r)) => {
                assert_eq!(
                    (r.fence, r.held, &r.label),
                    (p.fence, p.held, &p.label),
                    "{key}: replica {r:?} primary {p:?}"
                );
                if p.held {
                    let left = |st: &LockStatus| st.remaining.expect("a held lease has a remaining time");
                    assert!(
                        left(r) + Duration::from_millis(1) >= left(p),
                        "{key}: the replica's lease is shorter: {r:?} < {p:?}"
                    );
                }
                assert_eq!(replica.digest_value(key), primary.digest_value(key), "{key}: digest");
            }
            _ => panic!("{key}: primary {p:?}, replica {r:?}"),
        }
    }
    assert_eq!(primary.digest(), replica.digest(), "dataset digests differ");
    assert_eq!(replica.high_water(), primary.high_water(), "high-water marks differ");
}

#[test]
fn full_sync_and_stream_keep_the_replica_identical() {
    let p = Server::start();
    // Before the replica exists: carried by the full sync (RDB + aux data).
    let held = grant(&p, "r:held", &binary_token(1), LONG_TTL);
    grant(&p, "r:released", b"t", LONG_TTL);
    assert_eq!(release(&p, "r:released", b"t"), 1);
    let gone = grant(&p, "r:deleted", b"t", LONG_TTL);
    let _: i64 = p.cmd(&["DEL", "r:deleted"]).unwrap();
    assert!(gone > held);

    let r = p.start_replica();
    p.wait_for_replicas(1, ACK);
    assert_same_locks(&p, &r, &["r:held", "r:released", "r:deleted"]);

    // After: carried by the command stream, as effect records.
    // Long enough that B is refused even if the machine stalls; expiry is polled.
    let a = grant(&p, "r:timeline", b"worker-a", 500);
    assert_eq!(acquire(&p, "r:timeline", b"worker-b", LONG_TTL), None);
    wait_expired(&p, "r:timeline");
    let b = grant(&p, "r:timeline", b"worker-b", LONG_TTL);
    assert!(b > a);
    assert_eq!(renew(&p, "r:timeline", b"worker-a", LONG_TTL), 0);
    assert_eq!(release(&p, "r:timeline", b"worker-a"), 0);

    grant(&p, "r:renewed", b"t", 1_000);
    assert_eq!(renew(&p, "r:renewed", b"t", LONG_TTL), 1);
    grant(&p, "r:shortened", b"t", LONG_TTL);
    assert_eq!(grant(&p, "r:shortened", b"t", 2_000), status_of(&p, "r:shortened").fence);
    grant(&p, "r:raised", b"t", LONG_TTL);
    let raised = raise(&p, "r:raised", b"t", b + 1_000).expect("holder raises");
    let _: () = p.cmd(&["SET", "r:cad", "me"]).unwrap();
    assert_eq!(cad(&p, "r:cad", b"me"), 1);
    assert_eq!(release(&p, "r:held", &binary_token(1)), 1);
    let _: i64 = p.cmd(&["DEL", "r:released"]).unwrap();
    p.wait_for_replicas(1, ACK);

    let keys =
        ["r:held", "r:released", "r:deleted", "r:timeline", "r:renewed", "r:shortened", "r:raised", "r:cad"];
    assert_same_locks(&p, &r, &keys);
    assert_eq!(r.high_water(), raised);
    let renewed = status_of(&r, "r:renewed");
    assert!(
        renewed.held && renewed.remaining.is_some_and(|d| d > Duration::from_millis(1_000)),
        "the renewal reached the replica: {renewed:?}"
    );
    let shortened = status_of(&r, "r:shortened");
    assert!(
        shortened.held && shortened.remaining.is_some_and(|d| d <= Duration::from_millis(2_000)),
        "the restarted lease reached the replica: {shortened:?}"
    );
    let exists: i64 = r.cmd(&["EXISTS", "r:cad"]).unwrap();
    assert_eq!(exists, 0);

    // The replica's lease on r:timeline belongs to worker-b: seen from its promoted future,
    // worker-a still cannot take it.
    r.promote();
    assert_eq!(acquire(&r, "r:timeline", b"worker-a", LONG_TTL), None);
    assert_eq!(grant(&r, "r:timeline", b"worker-b", LONG_TTL), b, "idempotent on the new primary");
}

#[test]
fn a_replica_refuses_writes_and_answers_reads() {
    let p = Server::start();
    let r = p.start_replica();
    let fence = grant(&p, "ro:lock", b"t", LONG_TTL);
    p.wait_for_replicas(1, ACK);
    for args in [
        args!["FENCEDLOCK.ACQUIRE", "ro:lock", "t", "1000"],
        args!["FENCEDLOCK.ACQUIRE", "ro:new", "t", "1000"],
        args!["FENCEDLOCK.RENEW", "ro:lock", "t", "1000"],
        args!["FENCEDLOCK.RELEASE", "ro:lock", "t"],
        args!["FENCEDLOCK.CAD", "ro:lock", "t"],
    ] {
        let err = expect_err(&r, &args);
        assert!(err.starts_with("READONLY"), "{err}");
    }
    assert_eq!(status_of(&r, "ro:lock").fence, fence);
    assert_eq!(r.lock_status("ro:new"), None);
}

#[test]
fn promotion_jumps_to_a_new_epoch() {
    let p = Server::start();
    let r = p.start_replica();
    let mut max = 0;
    for i in 0..20 {
        max = grant(&p, &format!("promo:{i}"), b"t", LONG_TTL);
    }
    p.wait_for_replicas(1, ACK);
    let epoch = r.fencedlock_counter("fencedlock_epoch");
    let clock_floor = floor_now();
    r.promote();
    assert!(r.fencedlock_counter("fencedlock_epoch") > epoch);
    // The new epoch starts at the wall clock of the promotion (same machine, same clock).
    for key in ["promo:0", "promo:new"] {
        let _ = release(&r, key, b"t");
        let fence = grant(&r, key, b"u", LONG_TTL);
        assert!(fence > max && epoch_of(fence) > epoch_of(max), "{key}: {fence} vs old max {max}");
        assert!(fence > clock_floor, "{key}: {fence} is below the clock at the promotion");
    }
    assert_eq!(acquire(&r, "promo:19", b"u", LONG_TTL), None, "leases survive the promotion");
}

#[test]
fn a_promoted_replica_is_above_grants_it_never_received() {
    let mut p = Server::start();
    let r = p.start_replica();
    let kept = grant(&p, "lost:kept", b"t", LONG_TTL);
    p.wait_for_replicas(1, ACK);

    // Cut the link and keep it cut: the primary now wants a password the replica lacks.
    // (Our connection to the primary stays authenticated.)
    let _: () = p.cmd(&["CONFIG", "SET", "requirepass", "cut-the-link"]).unwrap();
    let _: i64 = p.cmd(&["CLIENT", "KILL", "TYPE", "replica"]).unwrap();
    poll("the replica link to go down", Duration::from_secs(10), || {
        r.info_field("replication", "master_link_status").as_deref() == Some("down")
    });

    // Grants the replica will never see, then the primary dies.
    let mut lost_max = kept;
    for i in 0..50 {
        lost_max = grant(&p, &format!("lost:{i}"), b"t", LONG_TTL);
    }
    p.kill9();

    assert_eq!(r.lock_status("lost:49"), None, "the test must really lose grants");
    assert!(r.high_water() < lost_max);
    r.promote();
    for key in ["lost:49", "lost:0", "lost:new"] {
        let fence = grant(&r, key, b"new-owner", LONG_TTL);
        assert!(
            fence > lost_max,
            "{key}: fence {fence} repeats one the dead primary issued (max {lost_max})"
        );
    }
    let st = status_of(&r, "lost:kept");
    assert_eq!((st.fence, st.held), (kept, true), "replicated leases survive");
    let err = try_acquire(&r, "lost:kept", b"intruder", LONG_TTL).map_err(|e| error_text(&e));
    assert_eq!(err, Ok(None));
}

#[test]
fn a_replica_of_a_restarted_primary_follows_its_new_epoch() {
    let mut p = Server::builder().arg("appendonly", "yes").start();
    let before = grant(&p, "re:k", b"t", LONG_TTL);
    p.stop();
    p.restart();
    let r = p.start_replica();
    let after = grant(&p, "re:other", b"t", LONG_TTL);
    assert!(epoch_of(after) > epoch_of(before));
    p.wait_for_replicas(1, ACK);
    assert_same_locks(&p, &r, &["re:k", "re:other"]);
    assert_eq!(r.fencedlock_counter("fencedlock_epoch"), p.fencedlock_counter("fencedlock_epoch"));
}
