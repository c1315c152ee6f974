//! Redlock and fenced Redlock across five (or three) real masters with some of them stopped
//! (SIGSTOP), killed, or slower than the lease.

mod client_support;

use std::time::{Duration, Instant};

use client_support::{config, held, nodes, servers, status, wait_released};
use fencedlock::{Error, Fencing, LockConfig, Redlock, Vote};
use harness::Server;

fn redlock(servers: &[Server], config: LockConfig) -> Redlock {
    Redlock::new(nodes(servers), config).expect("redlock")
}

fn all(servers: &[Server]) -> Vec<&Server> {
    servers.iter().collect()
}

/// Opens every node's connection, so that requests to a node stopped afterwards are queued
/// in its socket (and run, in order, when it resumes) instead of stalling in the handshake.
async fn warm_up(redlock: &Redlock) {
    let lease = redlock.try_acquire("warm-up").await.expect("all nodes up");
    assert!(lease.release().await.unwrap());
}

fn timed_out(v: &Vote) -> bool {
    matches!(v, Vote::TimedOut)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_masters_grant_raise_and_release() {
    let servers = servers(5);
    let redlock = redlock(&servers, config(5_000, 300));
    assert_eq!(redlock.quorum(), 3);
    assert_eq!(redlock.fencing(), Fencing::Raise);

    let lease = redlock.try_acquire("r").await.expect("grant");
    let report = lease.report();
    assert_eq!(report.yes(), 5, "{report}");
    assert_eq!(report.raised(), 5, "{report}");
    assert_eq!(Some(lease.fence()), report.max_fence());
    for s in &servers {
        let (fence, is_held, _) = status(s, "r").unwrap();
        assert!(is_held);
        assert_eq!(fence, lease.fence(), "every node was raised to the lease's fence");
    }
    assert!(lease.remaining() > Duration::from_secs(4));

    let rival = redlock.clone();
    match rival.try_acquire("r").await {
        Err(Error::QuorumNotReached(report)) => {
            assert!(report.majority_refused(), "{report}");
            assert_eq!(report.yes(), 0);
        }
        other => panic!("expected QuorumNotReached, got {other:?}"),
    }
    let fence = lease.fence();
    assert!(lease.release().await.unwrap());
    for s in &servers {
        assert!(!held(s, "r"));
    }
    let next = redlock.try_acquire("r").await.unwrap();
    assert!(next.fence() > fence);
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stopped_masters_still_grant_within_the_node_timeout() {
    let servers = servers(5);
    let node_timeout = Duration::from_millis(300);
    let redlock = redlock(&servers, config(5_000, 300));
    warm_up(&redlock).await;
    servers[1].pause();
    servers[3].pause();
    let started = Instant::now();
    let result = redlock.try_acquire("stall").await;
    let took = started.elapsed();
    let lease = match result {
        Ok(lease) => lease,
        Err(e) => {
            servers[1].resume();
            servers[3].resume();
            panic!("expected a grant from 3 of 5, got {e}");
        }
    };
    let report = lease.report().clone();
    assert_eq!(report.yes(), 3, "{report}");
    assert!(timed_out(&report.votes[1].vote) && timed_out(&report.votes[3].vote), "{report}");
    assert_eq!(report.raised(), 3, "{report}");
    assert!(took >= node_timeout, "waited for the stalled nodes up to the timeout: {took:?}");
    assert!(took < node_timeout + Duration::from_secs(2), "bounded by the node timeout: {took:?}");
    // The time spent waiting is charged against the validity.
    assert!(lease.remaining() <= Duration::from_millis(5_000) - node_timeout);
    assert!(lease.release().await.unwrap(), "3 of 5 confirmed the release");
    servers[1].resume();
    servers[3].resume();
    // The stopped nodes run the queued ACQUIRE and then the queued RELEASE.
    wait_released(&all(&servers), "stall", Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_killed_masters_still_grant_and_renew() {
    let mut servers = servers(5);
    let redlock = redlock(&servers, config(5_000, 300));
    servers[0].kill9();
    servers[4].kill9();
    let mut lease = redlock.try_acquire("dead2").await.expect("grant from 3 of 5");
    let report = lease.report();
    assert!(matches!(report.votes[0].vote, Vote::Failed { .. }), "{report}");
    assert!(matches!(report.votes[4].vote, Vote::Failed { .. }), "{report}");
    assert_eq!(report.yes(), 3);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = lease.valid_until();
    lease.renew().await.expect("quorum renew with 3 of 5");
    assert!(lease.valid_until() > before);
    assert!(lease.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_killed_masters_grant_nothing_and_leave_nothing() {
    let mut servers = servers(5);
    let redlock = Redlock::new(
        nodes(&servers),
        LockConfig::builder()
            .ttl(Duration::from_secs(10))
            .node_timeout(Duration::from_millis(300))
            .max_wait(Duration::from_millis(400))
            .backoff(Duration::from_millis(10), Duration::from_millis(50))
            .build()
            .unwrap(),
    )
    .unwrap();
    for i in [0, 2, 4] {
        servers[i].kill9();
    }
    match redlock.try_acquire("dead3").await {
        Err(Error::QuorumNotReached(report)) => {
            assert_eq!(report.yes(), 2, "{report}");
            assert!(!report.majority_refused(), "unreachable is not a refusal");
        }
        other => panic!("expected QuorumNotReached, got {other:?}"),
    }
    let started = Instant::now();
    let err = redlock.acquire("dead3").await.unwrap_err();
    assert!(matches!(err, Error::QuorumNotReached(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(3), "acquire gives up after max wait");
    for i in [1, 3] {
        let (_, is_held, _) = status(&servers[i], "dead3").expect("the live nodes saw the key");
        assert!(!is_held, "no leftovers on {}", servers[i].addr());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_stopped_masters_grant_nothing_and_leave_nothing() {
    let servers = servers(5);
    let redlock = redlock(&servers, config(10_000, 250));
    warm_up(&redlock).await;
    for i in [0, 1, 2] {
        servers[i].pause();
    }
    let result = redlock.try_acquire("stalled3").await;
    // The live nodes were released before try_acquire returned.
    let live_held: Vec<bool> = [3, 4].iter().map(|&i| held(&servers[i], "stalled3")).collect();
    for i in [0, 1, 2] {
        servers[i].resume();
    }
    match result {
        Err(Error::QuorumNotReached(report)) => assert_eq!(report.yes(), 2, "{report}"),
        other => panic!("expected QuorumNotReached, got {other:?}"),
    }
    assert_eq!(live_held, vec![false, false]);
    wait_released(&all(&servers), "stalled3", Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_slower_than_the_ttl_gets_no_lease() {
    let servers = servers(5);
    // The two stopped nodes make the round last the 400 ms node timeout, longer than the
    // 150 ms lease: the three grants are worthless by the time the round is decided.
    let redlock = redlock(&servers, config(150, 400));
    warm_up(&redlock).await;
    servers[0].pause();
    servers[1].pause();
    let result = redlock.try_acquire("slow").await;
    let live_held: Vec<bool> = (2..5).map(|i| held(&servers[i], "slow")).collect();
    servers[0].resume();
    servers[1].resume();
    match result {
        Err(Error::QuorumNotReached(report)) => {
            assert_eq!(report.yes(), 3, "the live majority did grant: {report}");
            assert!(report.validity.is_none(), "{report}");
            assert!(report.elapsed >= Duration::from_millis(150));
            assert!(report.to_string().contains("validity exhausted"), "{report}");
        }
        other => panic!("expected no grant, got {other:?}"),
    }
    assert_eq!(live_held, vec![false, false, false], "released everywhere");
    wait_released(&all(&servers), "slow", Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_acquire_mid_flight_leaves_no_lease_anywhere() {
    let servers = servers(5);
    let redlock = redlock(&servers, config(10_000, 2_000));
    warm_up(&redlock).await;
    servers[0].pause();
    servers[1].pause();

    // Abort a spawned acquire while it waits for the stopped nodes.
    let task = {
        let redlock = redlock.clone();
        tokio::spawn(async move { redlock.acquire("cancel").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let granted_meanwhile: Vec<bool> = (2..5).map(|i| held(&servers[i], "cancel")).collect();
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(granted_meanwhile, vec![true, true, true], "the round was in flight");
    let live: Vec<&Server> = servers[2..].iter().collect();
    wait_released(&live, "cancel", Duration::from_secs(2)).await;

    // Drop the future through a timeout as well.
    let dropped = tokio::time::timeout(Duration::from_millis(300), redlock.acquire("cancel2")).await;
    assert!(dropped.is_err(), "the round cannot finish while two nodes are stopped");
    wait_released(&live, "cancel2", Duration::from_secs(2)).await;

    servers[0].resume();
    servers[1].resume();
    wait_released(&all(&servers), "cancel", Duration::from_secs(3)).await;
    wait_released(&all(&servers), "cancel2", Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_renew_survives_a_minority_and_not_a_majority() {
    let servers = servers(5);
    let redlock = redlock(&servers, config(5_000, 300));
    let mut lease = redlock.try_acquire("renew").await.unwrap();
    for i in [0, 1] {
        let _: i64 = servers[i].cmd(&["DEL", "renew"]).unwrap();
    }
    lease.renew().await.expect("3 of 5 still hold it");
    let _: i64 = servers[2].cmd(&["DEL", "renew"]).unwrap();
    match lease.renew().await {
        Err(Error::LeaseLost { .. }) => {}
        other => panic!("expected LeaseLost with 3 of 5 gone, got {other:?}"),
    }
    assert!(lease.ensure_valid().is_err());
    assert!(!lease.release().await.unwrap(), "only 2 of 5 still held it");
    for s in &servers {
        assert!(!held(s, "renew"));
    }
}

/// Grants G1 from {A, B} (C stopped) after A issued ten fences for the key, then G2 from
/// {B, C} (A stopped). Returns both leases' fences.
async fn two_grants_from_different_majorities(fencing: Fencing) -> (u64, u64) {
    let servers = servers(3);
    let (a, _b, c) = (&servers[0], &servers[1], &servers[2]);
    for i in 0..10 {
        let token = format!("pump{i}");
        let fence: Option<u64> = a.cmd(&["FENCEDLOCK.ACQUIRE", "acct", &token, "60000"]).unwrap();
        assert!(fence.is_some());
        let _: i64 = a.cmd(&["FENCEDLOCK.RELEASE", "acct", &token]).unwrap();
    }
    let redlock = Redlock::with_fencing(nodes(&servers), config(5_000, 200), fencing).unwrap();

    c.pause();
    let g1 = redlock.try_acquire("acct").await;
    c.resume();
    let g1 = g1.expect("G1 from A and B");
    let f1 = g1.fence();
    assert!(g1.release().await.unwrap());
    wait_released(&all(&servers), "acct", Duration::from_secs(3)).await;

    a.pause();
    let g2 = redlock.try_acquire("acct").await;
    let g2 = match g2 {
        Ok(g2) => g2,
        Err(e) => {
            a.resume();
            panic!("G2 from B and C: {e}");
        }
    };
    let f2 = g2.fence();
    let released = g2.release().await;
    a.resume();
    assert!(released.unwrap());
    (f1, f2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_quorum_max_fences_go_backwards_across_majorities() {
    let (f1, f2) = two_grants_from_different_majorities(Fencing::QuorumMax).await;
    assert!(f2 <= f1, "the anomaly: a later grant carries fence {f2} after {f1}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_redlock_fences_increase_across_majorities() {
    let (f1, f2) = two_grants_from_different_majorities(Fencing::Raise).await;
    assert!(f1 >= 11, "G1 carries A's fence: {f1}");
    assert!(f2 > f1, "the raise step makes G2's fence {f2} exceed G1's {f1}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_round_with_the_same_token_gets_the_same_fence() {
    let servers = servers(5);
    let redlock = redlock(&servers, config(5_000, 300));
    let first = redlock.try_acquire("retry").await.unwrap();
    let fence = first.fence();
    let token = first.detach();
    // As if the replies of the first round were lost and the round ran again.
    let again = redlock.try_acquire_with_token("retry", &token).await.expect("idempotent");
    assert_eq!(again.fence(), fence);
    assert_eq!(again.report().yes(), 5);
    for s in &servers {
        assert_eq!(status(s, "retry").unwrap().0, fence, "no node issued a new fence");
    }
    assert!(again.release().await.unwrap());
}
