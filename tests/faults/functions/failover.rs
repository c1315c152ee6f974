//! Failover under the library: a replica promoted (`REPLICAOF NO ONE`) after its primary
//! granted, with grants it has (confirmed by `WAIT`) and one it never saw; two failovers in a
//! row, the second promoting a replica that missed the first new primary's grants; and an old
//! primary that comes back from its AOF as a primary before it is demoted.
//!
//! A promoted replica is another server process than the one named in the floors it
//! replicated, so its first grant per slot starts a new epoch at the wall clock: above every
//! fence its predecessor granted, seen or not, as long as the clocks agree (one machine here)
//! and a slot grants fewer than 1024 fences per ms. Leases are another matter: one the replica
//! never saw is lost, and only replica-confirmed grants (`confirm_replicas`) keep it out.

use std::time::Duration;

use fencedlock::Error;
use fencedlock_protocol::command::ACQUIRE;
use harness::{error_text, wait_replica_online, Server};

use super::*;

const TTL_MS: u64 = 30_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_keeps_confirmed_leases_and_outruns_a_grant_it_never_saw() {
    let mut primary = module_less(Server::builder());
    let replica = primary.start_replica();
    let confirming = Locker::open(
        &primary.url(),
        config(HELD_TTL)
            .confirm_replicas(1)
            .confirm_timeout(Duration::from_millis(500))
            .build()
            .expect("valid config"),
    )
    .expect("locker");
    let plain = locker(&primary, HELD_TTL);
    let mut resource = FencedResource::default();

    let confirmed = confirming.try_acquire("fo:confirmed").await.expect("the replica confirms the grant");
    for _ in 0..20 {
        let lease = plain.try_acquire("fo:k").await.expect("granted");
        assert!(resource.write(lease.fence()));
        assert!(lease.release().await.expect("release"));
    }
    primary.wait_caught_up(&replica);

    // A replica-confirmed grant is not handed out while the replica does not answer (frozen:
    // WAIT gets no acknowledgement); the client releases it.
    replica.pause();
    let unconfirmed = confirming.try_acquire("fo:unconfirmed").await;
    assert!(matches!(unconfirmed, Err(Error::NotConfirmed { .. })), "{unconfirmed:?}");
    replica.resume();
    primary.wait_caught_up(&replica);

    // The replica is promoted while the old primary still answers (as in a partition): a
    // grant the old primary acknowledges now never reaches the new one. (Freezing the replica
    // would not lose it: the kernel still receives the stream and the replica applies it once
    // thawed.) Its holder writes with it.
    let promoted_at = wall_ms();
    replica.promote();
    let lost = plain.try_acquire("fo:k").await.expect("granted by the old primary, never replicated");
    assert!(resource.write(lost.fence()));
    primary.kill9();

    // The confirmed lease is on the new primary: same fence, still held, renewable by token.
    assert_eq!(held_fence(&replica, "fo:confirmed"), Some((confirmed.fence(), true)));
    let promoted = locker(&replica, HELD_TTL);
    let renewed = promoted.renew_token("fo:confirmed", confirmed.token()).await.expect("renew");
    assert!(renewed, "the confirmed holder still holds it on the new primary");
    // The unconfirmed one is not: the new primary never saw it and grants the key again...
    assert_eq!(held_fence(&replica, "fo:k").map(|(_, held)| held), Some(false), "the lost lease is gone");
    let next = answered("a grant on the new primary", || promoted.try_acquire("fo:k")).await.expect("free");
    // ...with a fence above the lost one, from the promotion's wall-clock epoch, so the
    // resource refuses the lost holder once the new one wrote.
    assert!(next.fence() > lost.fence(), "{} after the lost {}", next.fence(), lost.fence());
    assert!(next.fence() > epoch_at(promoted_at), "an epoch taken at the promotion");
    assert!(resource.write(next.fence()));
    assert!(!resource.write(lost.fence()), "the lost holder's write is refused");
    assert_eq!(floor_field(&replica, "fo:k", "run"), Some(run_id(&replica)));
    drop(lost.detach());
}

/// `n` grants on `key` (each released at once): the fences.
fn grants(server: &Server, key: &str, who: &str, n: usize) -> Vec<u64> {
    (0..n)
        .map(|i| {
            let token = format!("{who}-{i}");
            let fence = grant(server, key, &token, TTL_MS);
            assert!(release(server, key, &token));
            fence
        })
        .collect()
}

#[test]
fn two_failovers_in_a_row_never_repeat_a_fence_on_a_replica_that_missed_the_first() {
    let key = "twice:k";
    let mut a = module_less(Server::builder());
    let mut b = a.start_replica();
    let c = a.start_replica();
    let mut fences = grants(&a, key, "a", 10);
    a.wait_caught_up(&b);
    a.wait_caught_up(&c);
    let a_last = *fences.last().expect("grants");

    // First failover: B takes over; C still follows the dead A, so it never sees B's grants.
    a.kill9();
    b.promote();
    let on_b = grants(&b, key, "b", 10);
    assert!(on_b[0] > a_last, "B's epoch is above A's fences");
    fences.extend(&on_b);
    let b_last = *on_b.last().expect("grants");

    // Second failover: C, which has only A's data, takes over from B.
    b.kill9();
    assert_eq!(floor_fence(&c, key), Some(a_last), "C missed B's whole epoch");
    c.promote();
    let on_c = grants(&c, key, "c", 10);
    assert!(on_c[0] > b_last, "C's first fence {} is not above B's last {b_last}", on_c[0]);
    fences.extend(&on_c);
    assert!(fences.windows(2).all(|w| w[1] > w[0]), "fences rise through both failovers: {fences:?}");
}

/// A primary with an fsync-always AOF and `extra` settings, and its replica, which is
/// promoted after the primary granted and was killed; then the old primary is restarted
/// from its AOF as a primary (not demoted). (old, new, the grant before the crash).
fn returned_primary(extra: &[(&str, &str)]) -> (Server, Server, u64) {
    let mut old = module_less(with_aof(Server::builder(), "always"));
    let new = old.start_replica();
    // Set once the library is loaded (without a replica, min-replicas-to-write refuses even
    // FUNCTION LOAD), and kept for the restart.
    for (name, value) in extra {
        old.config_set(name, value);
        old.set_restart_arg(name, value);
    }
    let before = grant(&old, "ret:k", "before", TTL_MS);
    assert!(release(&old, "ret:k", "before"));
    old.wait_caught_up(&new);
    old.kill9();
    new.promote();
    (old, new, before)
}

#[test]
fn a_returning_old_primary_grants_beside_the_new_one_and_its_fences_outrun_the_new_primarys() {
    // Not held, as with the module without its settings (see `returning_primary.rs`): while
    // two primaries answer, both grant the same key, and the fences of the one that started
    // its epoch later (the returning one) are higher. The library has no restart grace; the
    // server's min-replicas-to-write closes the window (next test).
    let (mut old, new, before) = returned_primary(&[]);
    let mut resource = FencedResource::default();
    assert!(resource.write(before));
    let on_new = grant(&new, "ret:k", "new-holder", TTL_MS);
    assert!(on_new > before);
    assert!(resource.write(on_new), "the new primary's holder writes");

    old.restart();
    assert_eq!(old.info_field("replication", "role").as_deref(), Some("master"), "it returns as a primary");
    let on_old = try_grant(&old, "ret:k", "old-side", TTL_MS)
        .expect("the returning primary grants the key the new primary's holder holds");
    // Its epoch started later, so its fence is above: the resource takes the old side's write
    // and refuses the rightful holder on the new primary.
    assert!(on_old > on_new, "{on_old} vs {on_new}");
    assert!(resource.write(on_old));
    assert!(!resource.write(on_new), "the new primary's holder is refused");

    // Demoted (what Sentinel does), the old primary's grants vanish. The new primary goes on
    // in its own epoch, below the fence the resource took from the old one: a grant made
    // after another was acknowledged has a lower fence, and the resource refuses it.
    let _: () = old
        .cmd(&["REPLICAOF", "127.0.0.1", &new.port().to_string()])
        .unwrap_or_else(|e| panic!("REPLICAOF: {}", error_text(&e)));
    wait_replica_online(&new, &old);
    assert!(release(&new, "ret:k", "new-holder"));
    let after = grant(&new, "ret:k", "after", TTL_MS);
    assert!(after > on_new && after < on_old, "{after}: between {on_new} and the old side's {on_old}");
    assert!(!resource.write(after), "the new primary's next holder is refused too");
    // No fence was answered twice, though.
    let mut all = vec![before, on_new, on_old, after];
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 4);
}

#[test]
fn min_replicas_to_write_makes_a_returning_primary_refuse_the_librarys_grants() {
    // The new primary is started without the setting (the harness's replica builder does not
    // copy it), so with no replica of its own it still grants.
    let (mut old, new, _) =
        returned_primary(&[("min-replicas-to-write", "1"), ("min-replicas-max-lag", "10")]);
    old.restart();
    let name = functions::function(&ACQUIRE).expect("served");
    let refused: redis::RedisResult<Option<u64>> =
        old.cmd(&["FCALL", name, "2", "ret:k", &floor("ret:k"), "old-side", "30000"]);
    let err = refused.expect_err("a primary without its replicas refuses the library's writes");
    assert_eq!(err.code(), Some("NOREPLICAS"), "{}", error_text(&err));
    assert!(status(&old, "ret:k").is_some(), "reads still work");
    assert!(try_grant(&new, "ret:k", "new-holder", TTL_MS).is_some(), "the new primary grants");
}
