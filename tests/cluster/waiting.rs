//! Server-side waiting in Redis Cluster (issue #11): queues are per key on the node that
//! serves the key. A release hands over there as on a single server. When the key leaves the
//! node (`DEL`, `FLUSHALL`, or `MIGRATE` when its slot moves away), its waiters are told to ask
//! again (`TRYAGAIN`, [`ReplyError::WaitInterrupted`], nothing granted): this node may no longer
//! serve the key, so a waiter asking again is routed to the slot's owner and queues there.

use std::time::{Duration, Instant};

use fencedlock_protocol::command::RAISE;
use fencedlock_protocol::ReplyError;
use harness::{error_text, redis, Cluster};

use crate::{grant, release};

const LONG_TTL: u64 = 60_000;
/// Bound on a reply that must come.
const REPLY: Duration = Duration::from_secs(10);
/// Bound on a reply after the command that ended the wait (measured values are printed).
const PROMPT: Duration = Duration::from_millis(200);

fn cluster() -> Cluster {
    Cluster::builder().masters(3).start()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[test]
fn a_release_hands_over_and_a_deletion_tells_waiters_to_ask_again() {
    let cluster = cluster();
    let key = "{wait}:lock";
    let node = &cluster.nodes()[cluster.slot_owner(cluster.key_slot(key))];

    // Handoff at RELEASE, as on a single server.
    let held = grant(node, key, "holder", LONG_TTL);
    let mut w = node.queue_acquire(key, b"w", LONG_TTL, 0);
    let released = Instant::now();
    release(node, key, "holder");
    let reply = w.reply(REPLY);
    assert_eq!(reply.fence(), held + 1);
    let handoff = reply.at.saturating_duration_since(released);
    assert!(handoff < PROMPT, "handoff {handoff:?} after the release");

    // DEL and FLUSHALL interrupt the wait: nothing is granted, the waiter asks again.
    let mut last = held + 1;
    let mut holder = "w".to_string();
    for (n, how) in [&["DEL", key][..], &["FLUSHALL"][..]].into_iter().enumerate() {
        let token = format!("next-{n}");
        let mut w = node.queue_acquire(key, token.as_bytes(), LONG_TTL, 0);
        let sent = Instant::now();
        let _: redis::Value = node.cmd(how).unwrap_or_else(|e| panic!("{how:?}: {}", error_text(&e)));
        let reply = w.reply(REPLY);
        assert_eq!(reply.error_kind(), Some(ReplyError::WaitInterrupted), "{how:?}: {reply:?}");
        assert_eq!(reply.outcome.as_ref().err().and_then(|e| e.code()), Some("TRYAGAIN"), "{how:?}");
        let after = reply.at.saturating_duration_since(sent);
        assert!(after < PROMPT, "{how:?}: the waiter was told {after:?} after the deletion");
        assert_eq!(node.lock_status(key), None, "{how:?}: nothing was granted");
        assert_eq!(node.waiters(), 0);
        // Asking again: the key is free now, granted above every fence before.
        let fence = grant(node, key, &token, LONG_TTL);
        assert!(fence > last, "{how:?}: fence {fence} after {last}");
        (last, holder) = (fence, token);
        eprintln!("cluster {how:?}: waiter interrupted {:.2} ms after the command", ms(after));
    }
    release(node, key, &holder);
    eprintln!("cluster handoff after RELEASE: {:.2} ms", ms(handoff));
}

#[test]
fn a_waiter_whose_slot_migrates_is_told_to_ask_again_and_queues_on_the_new_owner() {
    let cluster = cluster();
    let key = "{mig-wait}:lock";
    let slot = cluster.key_slot(key);
    let source = cluster.slot_owner(slot);
    let target = cluster.masters().into_iter().find(|&m| m != source).expect("another master");
    let (src, dst) = (&cluster.nodes()[source], &cluster.nodes()[target]);

    // The source has issued far higher fences than the target.
    let held = grant(src, key, "holder", LONG_TTL);
    let lifted: Option<u64> = src
        .cmd(&[RAISE.name, key, "holder", &(held + 1_000_000).to_string()])
        .unwrap_or_else(|e| panic!("RAISE: {}", error_text(&e)));
    let held = lifted.expect("the holder raises");
    let source_max = src.high_water();
    assert!(dst.high_water() < held, "the target is below the source");

    let mut w = src.queue_acquire(key, b"waiter", LONG_TTL, 0);
    let migration = cluster.begin_slot_migration(slot, target);
    assert!(w.is_blocked(src), "still waiting while the slot is MIGRATING and the key is on the source");
    migration.move_keys();
    let moved = Instant::now();
    let reply = w.reply(REPLY);
    assert_eq!(reply.error_kind(), Some(ReplyError::WaitInterrupted), "{reply:?}");
    assert_eq!(reply.outcome.as_ref().err().and_then(|e| e.code()), Some("TRYAGAIN"));
    let late = reply.at.saturating_duration_since(moved);
    assert!(late < PROMPT, "the waiter was told {late:?} after MIGRATE returned");
    assert_eq!(src.waiters(), 0);
    migration.finish();

    // Asking again on the new owner: the migrated lease still runs, so it queues there, and is
    // granted at the release above every fence the old node issued.
    let st = dst.lock_status(key).expect("the lease moved with its key");
    assert_eq!((st.fence, st.held), (held, true), "nothing was granted to the interrupted waiter");
    let mut again = dst.queue_acquire(key, b"waiter", LONG_TTL, 0);
    assert_eq!(dst.waiters(), 1);
    release(dst, key, "holder");
    let fence = again.reply(REPLY).fence();
    assert!(
        fence > held && fence > source_max,
        "fence {fence} on the new owner, old node's max {source_max}"
    );
    let st = dst.lock_status(key).expect("held");
    assert_eq!((st.fence, st.held), (fence, true));
    eprintln!("cluster MIGRATE: waiter interrupted {:.2} ms after MIGRATE returned", ms(late));
}
