//! Replica-confirmed grants (`LockConfigBuilder::confirm_replicas`) against a real primary
//! with two replicas: a grant is handed out only once `WAIT` counted enough replicas, one not
//! confirmed in time is released, the wait runs on a connection of its own (renewals of other
//! leases on the same locker are not held back), and a dropped acquisition leaves nothing.

use std::time::{Duration, Instant};

use crate::support::{config, counter, wait_until};
use fencedlock::{Error, LockConfig, Locker, Node, Redlock};
use harness::Server;

/// A primary and two replicas, both online.
fn replicated() -> (Server, Server, Server) {
    let primary = Server::start();
    let r1 = primary.start_replica();
    let r2 = primary.start_replica();
    (primary, r1, r2)
}

/// A locker on `primary` confirming each grant on `replicas` replicas within `timeout`.
fn confirming(primary: &Server, replicas: usize, timeout: Duration, max_wait: Duration) -> Locker {
    let config = LockConfig::builder()
        .ttl(Duration::from_secs(10))
        .node_timeout(Duration::from_millis(250))
        .backoff(Duration::from_millis(5), Duration::from_millis(20))
        .max_wait(max_wait)
        .confirm_replicas(replicas)
        .confirm_timeout(timeout)
        .build()
        .expect("config");
    Locker::open(&primary.url(), config).expect("locker")
}

fn assert_not_confirmed(result: Result<fencedlock::Lease, Error>, wanted: usize, confirmed: usize) {
    match result {
        Err(err @ Error::NotConfirmed { .. }) => {
            assert!(
                matches!(&err, Error::NotConfirmed { wanted: w, confirmed: c, .. } if *w == wanted && *c == confirmed),
                "{err:?}"
            );
            assert!(err.is_unavailable() && err.is_retryable(), "{err:?}");
        }
        other => panic!("expected NotConfirmed ({confirmed} of {wanted}), got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_is_handed_out_once_the_replicas_have_it() {
    let (primary, r1, r2) = replicated();
    let locker = confirming(&primary, 2, Duration::from_secs(1), Duration::ZERO);
    let lease = locker.try_acquire("confirmed").await.expect("confirmed by both replicas");
    // WAIT returned only after both replicas applied the grant: they hold it already.
    for replica in [&r1, &r2] {
        let status = replica.lock_status("confirmed").expect("the replica has the key");
        assert!(status.held, "held on {}", replica.addr());
        assert_eq!(status.fence, lease.fence());
    }

    // A lagging replica delays the grant until it acknowledges, within the confirm timeout.
    r2.pause();
    let pause = Duration::from_millis(300);
    let waiting_locker = confirming(&primary, 2, Duration::from_secs(3), Duration::ZERO);
    let started = Instant::now();
    let pending = tokio::spawn(async move {
        let result = waiting_locker.try_acquire("lagging").await;
        (result, started.elapsed())
    });
    tokio::time::sleep(pause).await;
    r2.resume();
    let (result, took) = pending.await.expect("task");
    let lease = result.expect("confirmed once the replica caught up");
    eprintln!("granted {took:?} after the request, the replica paused for {pause:?}");
    assert!(took >= pause, "granted after {took:?}, before the paused replica could acknowledge");
    assert!(took < Duration::from_secs(2), "granted after {took:?}");
    assert!(r2.lock_held("lagging"));
    assert!(lease.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_a_stopped_replica_cannot_confirm_is_released_not_handed_out() {
    let (primary, _r1, r2) = replicated();
    r2.pause();
    let timeout = Duration::from_millis(400);
    let locker = confirming(&primary, 2, timeout, Duration::ZERO);
    let started = Instant::now();
    let result = locker.try_acquire("unconfirmed").await;
    let took = started.elapsed();
    assert_not_confirmed(result, 2, 1);
    assert!(took >= timeout && took < timeout + Duration::from_millis(500), "answered after {took:?}");
    let status = primary.lock_status("unconfirmed").expect("the grant consumed a fence");
    assert!(!status.held, "released on the primary: {status:?}");

    // `acquire` retries within its maximum wait, and ends with the same verdict.
    let waiting = confirming(&primary, 2, Duration::from_millis(200), Duration::from_millis(700));
    let started = Instant::now();
    assert_not_confirmed(waiting.acquire("unconfirmed").await, 2, 1);
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    assert!(!primary.lock_held("unconfirmed"));

    // One replica is enough when one is asked for.
    let one = confirming(&primary, 1, timeout, Duration::ZERO);
    let started = Instant::now();
    let lease = one.try_acquire("unconfirmed").await.expect("one replica confirms");
    assert!(started.elapsed() < timeout, "confirmed without waiting out the timeout");
    assert!(lease.fence() > status.fence);
    assert!(primary.lock_held("unconfirmed"));
    assert!(lease.release().await.expect("release"));
    r2.resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_handed_over_at_a_release_is_confirmed_too() {
    // The grant of a waiter is written while another client releases; the waiter's WAIT must
    // still cover it (a WAIT that did not would return at once, with both replicas counted).
    let (primary, _r1, r2) = replicated();
    let holder = Locker::open(&primary.url(), config(10_000, 250)).expect("locker");
    let held = holder.try_acquire("handover").await.expect("grant");
    let waiter = confirming(&primary, 2, Duration::from_millis(300), Duration::from_secs(1));
    let waiting = tokio::spawn(async move {
        let result = waiter.acquire("handover").await;
        (result, Instant::now())
    });
    wait_until("the waiter queued", Duration::from_secs(3), || counter(&primary, "fencedlock_waiters") == 1)
        .await;
    r2.pause();
    let released = Instant::now();
    assert!(held.release().await.expect("release"));
    let (result, ended) = waiting.await.expect("task");
    assert_eq!(counter(&primary, "fencedlock_handoffs"), 1, "the waiter was handed the lease");
    assert_not_confirmed(result, 2, 1);
    assert!(ended.duration_since(released) >= Duration::from_millis(300));
    assert!(!primary.lock_held("handover"));
    r2.resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_confirmation_does_not_hold_back_renewals_on_the_same_locker() {
    let (primary, _r1, r2) = replicated();
    let timeout = Duration::from_secs(2);
    let locker = confirming(&primary, 2, timeout, Duration::ZERO);
    let mut lease = locker.try_acquire("kept").await.expect("confirmed");
    r2.pause();
    let stuck_locker = locker.clone();
    let stuck = tokio::spawn(async move { stuck_locker.try_acquire("stuck").await });
    wait_until("the stuck grant on the primary", Duration::from_secs(2), || primary.lock_held("stuck")).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!stuck.is_finished(), "its confirmation is still waiting");

    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        let started = Instant::now();
        lease.renew().await.expect("renewal");
        assert!(locker.renew_token("kept", lease.token()).await.expect("renew by token"));
        slowest = slowest.max(started.elapsed());
    }
    eprintln!("slowest pair of renewals while a confirmation waited: {slowest:?}");
    assert!(slowest < Duration::from_millis(100), "renewals took {slowest:?} behind a {timeout:?} WAIT");
    assert!(!stuck.is_finished(), "the confirmation was still waiting during the renewals");
    assert_not_confirmed(stuck.await.expect("task"), 2, 1);
    r2.resume();
    assert!(lease.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_acquisition_mid_confirmation_leaves_no_lease() {
    let (primary, _r1, r2) = replicated();
    r2.pause();
    // A wait for a busy key too: the grant at the handoff, then the WAIT, are dropped.
    for (key, busy) in [("dropped", false), ("dropped-after-waiting", true)] {
        let holder = Locker::open(&primary.url(), config(10_000, 250)).expect("locker");
        let held = if busy { Some(holder.try_acquire(key).await.expect("grant")) } else { None };
        let locker = confirming(&primary, 2, Duration::from_secs(5), Duration::from_secs(8));
        let pending = tokio::spawn(async move { locker.acquire(key).await });
        if let Some(held) = held {
            let fence = held.fence();
            wait_until("the waiter queued", Duration::from_secs(3), || {
                counter(&primary, "fencedlock_waiters") == 1
            })
            .await;
            assert!(held.release().await.expect("release"));
            wait_until("the handoff", Duration::from_secs(2), || {
                primary.lock_status(key).is_some_and(|s| s.held && s.fence > fence)
            })
            .await;
        } else {
            wait_until("the grant", Duration::from_secs(2), || primary.lock_held(key)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!pending.is_finished(), "{key}: still waiting for the confirmation");
        pending.abort();
        let _ = pending.await;
        let dropped = Instant::now();
        wait_until("the dropped grant released", Duration::from_secs(2), || !primary.lock_held(key)).await;
        eprintln!("{key}: released {:?} after the drop", dropped.elapsed());
    }
    r2.resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmation_is_refused_where_wait_cannot_confirm_the_grant() {
    // Redlock and a cluster connection: refused when the lock is built, before anything
    // connects (these URLs have no server behind them).
    let config = LockConfig::builder().confirm_replicas(1).build().expect("config");
    let urls = ["redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:3"];
    let redlock = Redlock::open(&urls, config.clone());
    assert!(matches!(redlock, Err(Error::Config(_))), "{redlock:?}");
    let cluster = Locker::new(Node::cluster(&["redis://127.0.0.1:1"]).expect("node"), config.clone());
    assert!(matches!(cluster, Err(Error::Config(_))), "{cluster:?}");
    let cluster = Locker::open_cluster(&["redis://127.0.0.1:1"], config);
    assert!(matches!(cluster, Err(Error::Config(_))), "{cluster:?}");
    // A primary without replicas cannot confirm: nothing is handed out.
    let alone = Server::start();
    let locker = confirming(&alone, 1, Duration::from_millis(100), Duration::ZERO);
    assert_not_confirmed(locker.try_acquire("k").await, 1, 0);
    assert!(!alone.lock_held("k"));
}
