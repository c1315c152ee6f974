//! `Locker::acquire` waits on the server (`FENCEDLOCK.ACQUIRE … BLOCK`): the handoff at the
//! release, renewals on the same locker while a waiter is blocked, cancellation, the pool of
//! waiting connections, and the fallback to polling against a module older than `BLOCK`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{acquire_stats, blocking, config, counter, held_elsewhere, v1_module, wait_until};
use fencedlock::{Error, LockConfig, Locker};
use fencedlock_protocol::command::{ACQUIRE, BLOCK};
use harness::{error_text, LockStatus, Server};

const WAITERS: &str = "fencedlock_waiters";
const BLOCKED: &str = "fencedlock_blocked_acquires";

/// A locker that waits up to `max_wait` and whose polling, if it polled, would be slow
/// (300 ms between attempts): a grant within a few ms of a release is the server's handoff.
fn slow_poller(server: &Server, max_wait: Duration) -> Locker {
    let config = LockConfig::builder()
        .ttl(Duration::from_secs(10))
        .node_timeout(Duration::from_millis(500))
        .backoff(Duration::from_millis(300), Duration::from_millis(300))
        .max_wait(max_wait)
        .build()
        .expect("config");
    Locker::open(&server.url(), config).expect("locker")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_waits_on_the_server_and_is_handed_the_lock_at_the_release() {
    let server = Server::start();
    let lease = held_elsewhere(&server, "handoff", config(10_000, 500)).await;
    let blocked_before = counter(&server, BLOCKED);
    let acquires_before = acquire_stats(&server).calls;

    let waiter = slow_poller(&server, Duration::from_secs(5));
    let waiting = tokio::spawn(async move {
        let lease = waiter.acquire("handoff").await;
        (lease, Instant::now())
    });
    wait_until("the waiter queued on the server", Duration::from_secs(3), || counter(&server, WAITERS) == 1)
        .await;
    assert_eq!(counter(&server, BLOCKED), blocked_before + 1, "the ACQUIRE blocked on the server");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!waiting.is_finished(), "no grant while the lease is held");

    let old_fence = lease.fence();
    let released = Instant::now();
    assert!(lease.release().await.expect("release"));
    let (granted, at) = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("the waiter is granted soon after the release")
        .expect("waiter task");
    let granted = granted.expect("a grant");
    let handoff = at.saturating_duration_since(released);
    // A poll would come 300 ms after the last one; the handoff answers the queued request.
    assert!(handoff < Duration::from_millis(60), "granted {handoff:?} after the release began");
    assert!(granted.fence() > old_fence, "{} > {old_fence}", granted.fence());
    assert_eq!(counter(&server, "fencedlock_handoffs"), 1);
    assert_eq!(acquire_stats(&server).calls - acquires_before, 1, "one ACQUIRE for the whole wait");
    // The wait (~0.4 s) is charged against the 10 s lease, measured from sending.
    assert!(granted.remaining() < Duration::from_millis(9_600), "{:?}", granted.remaining());
    assert!(granted.remaining() > Duration::from_secs(9), "{:?}", granted.remaining());
    let st = server.lock_status("handoff").expect("lock state");
    assert!(st.held && st.fence == granted.fence(), "{st:?}");
    assert!(granted.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_wait_is_re_anchored_so_the_lease_keeps_its_full_validity() {
    let server = Server::start();
    // A 1 s lease, and a wait of 0.6 s: measured from sending, only ~0.4 s would be left.
    let config = LockConfig::builder()
        .ttl(Duration::from_secs(1))
        .drift_constant(Duration::ZERO)
        .drift_factor(0.0)
        .max_wait(Duration::from_secs(5))
        .build()
        .unwrap();
    let holder = Locker::open(&server.url(), config.clone()).unwrap();
    let waiter = Locker::open(&server.url(), config).unwrap();
    let mut lease = holder.try_acquire("anchor").await.unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire("anchor").await });
    wait_until("the waiter queued", Duration::from_secs(3), || counter(&server, WAITERS) == 1).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    lease.renew().await.expect("still held");
    let renews = || {
        let info = server.info("commandstats");
        info.iter().find_map(|(k, v)| k.eq_ignore_ascii_case("cmdstat_fencedlock.renew").then(|| v.clone()))
    };
    let renews_before = renews();
    assert!(lease.release().await.unwrap());
    let granted = waiting.await.unwrap().expect("granted at the release");
    assert!(granted.remaining() > Duration::from_millis(900), "re-anchored: {:?}", granted.remaining());
    let renews_after = renews();
    assert_ne!(renews_before, renews_after, "the re-anchoring RENEW reached the server");
    assert!(granted.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_acquire_does_not_delay_renewals_on_the_same_locker() {
    let server = Server::start();
    let locker = Locker::open(&server.url(), config(10_000, 500)).expect("locker");
    let other = Locker::open(&server.url(), config(10_000, 500)).expect("locker");
    let busy = other.try_acquire("busy").await.expect("grant");
    let mut mine = locker.try_acquire("mine").await.expect("grant");

    let waiting = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.acquire("busy").await })
    };
    wait_until("the waiter queued", Duration::from_secs(3), || counter(&server, WAITERS) == 1).await;
    // Blocked for up to 5 s (max_wait). Sharing its connection, every renewal would wait
    // behind it and time out after 500 ms.
    let mut worst = Duration::ZERO;
    for _ in 0..20 {
        let started = Instant::now();
        mine.renew().await.expect("renew while another acquire waits");
        worst = worst.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let token = mine.token().clone();
    let started = Instant::now();
    assert!(locker.renew_token("mine", &token).await.expect("renew by token"));
    worst = worst.max(started.elapsed());
    assert!(worst < Duration::from_millis(100), "a renewal took {worst:?} while a waiter was blocked");
    assert!(!waiting.is_finished(), "still waiting");
    assert_eq!(counter(&server, WAITERS), 1);

    assert!(busy.release().await.unwrap());
    let granted =
        tokio::time::timeout(Duration::from_secs(3), waiting).await.unwrap().unwrap().expect("granted");
    assert!(granted.release().await.unwrap());
    assert!(mine.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_waiting_acquire_leaves_no_waiter_and_no_lease() {
    let server = Server::start();
    let lease = held_elsewhere(&server, "dropped", config(10_000, 200)).await;
    let waiter = Locker::open(&server.url(), config(10_000, 200)).expect("locker");
    let task = tokio::spawn(async move { waiter.acquire("dropped").await });
    wait_until("the waiter queued", Duration::from_secs(3), || counter(&server, WAITERS) == 1).await;

    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    wait_until("the waiter left the queue", Duration::from_secs(2), || counter(&server, WAITERS) == 0).await;
    assert_eq!(counter(&server, "fencedlock_wait_abandoned"), 1);

    let fence = lease.fence();
    assert!(lease.release().await.unwrap());
    // Past the claim's second release (one node timeout): nobody holds the key, and no
    // handoff happened (the fence is the holder's).
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        server.lock_status("dropped"),
        Some(LockStatus { fence, held: false, remaining: None, label: None })
    );
    assert_eq!(counter(&server, "fencedlock_handoffs"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_dropped_as_the_lock_is_handed_over_leave_nothing_held() {
    // The cancellation races the handoff: the server may grant a waiter just before it sees
    // its connection close. Whatever the order, the claim's releases end such a lease.
    let server = Server::start();
    let holder = Locker::open(&server.url(), config(10_000, 200)).expect("locker");
    let waiter = Locker::open(&server.url(), config(10_000, 200)).expect("locker");
    let keys: Vec<String> = (0..24).map(|i| format!("race:{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        let lease = holder.try_acquire(key).await.expect("grant");
        let queued = counter(&server, BLOCKED) + 1;
        let task = {
            let (waiter, key) = (waiter.clone(), key.clone());
            tokio::spawn(async move { waiter.acquire(&key).await })
        };
        wait_until("the waiter queued", Duration::from_secs(3), || counter(&server, BLOCKED) == queued).await;
        let release = tokio::spawn(async move { lease.release().await });
        // From before to well after the release's round trip.
        let abort_at = Instant::now() + Duration::from_micros(150 * (i as u64 % 8));
        while Instant::now() < abort_at {
            tokio::task::yield_now().await;
        }
        task.abort();
        let _ = task.await;
        assert!(release.await.unwrap().unwrap());
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let held: Vec<&String> = keys.iter().filter(|k| server.lock_held(k.as_str())).collect();
    assert!(held.is_empty(), "left held: {held:?}");
    assert_eq!(counter(&server, WAITERS), 0);
}

/// A locker (10 s leases) that waits on at most `max_blocking` connections of its own, up to
/// `max_wait`, and polls with a backoff of `backoff_ms` (least, most) when it polls.
fn pooled(server: &Server, max_blocking: usize, max_wait: Duration, backoff_ms: (u64, u64)) -> Locker {
    let config = LockConfig::builder()
        .ttl(Duration::from_secs(10))
        .max_wait(max_wait)
        .backoff(Duration::from_millis(backoff_ms.0), Duration::from_millis(backoff_ms.1))
        .max_blocking(max_blocking)
        .build()
        .unwrap();
    Locker::open(&server.url(), config).expect("locker")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_beyond_the_pool_limit_wait_in_the_client_in_arrival_order() {
    let server = Server::start();
    let lease = held_elsewhere(&server, "pool", config(10_000, 500)).await;
    let locker = pooled(&server, 2, Duration::from_secs(10), (5, 50));
    let acquires_before = acquire_stats(&server).calls;
    let blocked_before = counter(&server, BLOCKED);

    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5 {
        let (locker, order) = (locker.clone(), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            let lease = locker.acquire("pool").await.expect("granted in turn");
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(lease.release().await.unwrap());
        }));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    wait_until("two waiters queued", Duration::from_secs(3), || counter(&server, WAITERS) == 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(counter(&server, WAITERS), 2, "only max_blocking requests wait on the server");
    assert_eq!(counter(&server, BLOCKED) - blocked_before, 2, "the others wait for a connection");

    assert!(lease.release().await.unwrap());
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(5), t).await.expect("bounded").expect("task");
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4], "granted in arrival order");
    assert_eq!(acquire_stats(&server).calls - acquires_before, 5, "one ACQUIRE per waiter, no polling");
    assert!(counter(&server, WAITERS) == 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_blocking_zero_polls_with_backoff() {
    let server = Server::start();
    let lease = held_elsewhere(&server, "polled", config(10_000, 500)).await;
    let locker = pooled(&server, 0, Duration::from_secs(5), (20, 40));
    let before = acquire_stats(&server).calls;
    let waiting = tokio::spawn(async move { locker.acquire("polled").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(counter(&server, BLOCKED), 0, "nothing waited on the server");
    assert!(acquire_stats(&server).calls - before >= 5, "it polled");
    assert!(lease.release().await.unwrap());
    let granted =
        tokio::time::timeout(Duration::from_secs(3), waiting).await.unwrap().unwrap().expect("grant");
    assert_eq!(counter(&server, "fencedlock_handoffs"), 0);
    assert!(granted.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_wait_runs_out_on_the_server_with_contended() {
    let server = Server::start();
    let lease = held_elsewhere(&server, "patience", config(10_000, 500)).await;
    let waiter = slow_poller(&server, Duration::from_millis(300));
    let before = acquire_stats(&server).calls;
    let started = Instant::now();
    let err = waiter.acquire("patience").await.expect_err("held throughout");
    let waited = started.elapsed();
    assert!(matches!(err, Error::Contended { .. }), "{err:?}");
    assert!(waited >= Duration::from_millis(300), "gave up early: {waited:?}");
    assert!(waited < Duration::from_millis(900), "gave up late: {waited:?}");
    assert_eq!(acquire_stats(&server).calls - before, 1, "one ACQUIRE that timed out on the server");
    assert_eq!(counter(&server, "fencedlock_wait_timeouts"), 1);
    assert_eq!(counter(&server, WAITERS), 0);
    assert!(lease.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_a_module_older_than_block_acquire_polls() {
    // The module as released before `BLOCK` existed, built from the repository's history: its
    // ACQUIRE takes exactly three arguments, so the server refuses the BLOCK form itself.
    let server = Server::builder().without_module().arg("loadmodule", v1_module().to_string_lossy()).start();
    let probe: Result<Option<u64>, _> = server.cmd(&[ACQUIRE.name, "probe", "t", "1000", BLOCK, "10"]);
    let refusal = error_text(&probe.expect_err("the old module has no BLOCK"));
    assert!(refusal.contains("wrong number of arguments"), "{refusal}");
    let rejected_before = acquire_stats(&server).rejected;

    let holder = Locker::open(&server.url(), config(10_000, 500)).expect("locker");
    let lease = holder.try_acquire("old").await.expect("grant");
    let waiter = Locker::open(&server.url(), config(10_000, 500)).expect("locker");
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.acquire("old").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished());
    let stats = acquire_stats(&server);
    assert_eq!(stats.rejected - rejected_before, 1, "one BLOCK form refused, then polls: {stats:?}");
    assert!(stats.calls >= 4, "it polls: {stats:?}");
    assert!(lease.release().await.unwrap());
    let granted =
        tokio::time::timeout(Duration::from_secs(3), waiting).await.unwrap().unwrap().expect("grant");
    assert!(granted.release().await.unwrap());

    // Remembered for the node: the next acquisition polls at once.
    let lease = holder.try_acquire("old").await.expect("grant");
    let again = tokio::spawn(async move { waiter.acquire("old").await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(lease.release().await.unwrap());
    let granted = tokio::time::timeout(Duration::from_secs(3), again).await.unwrap().unwrap().expect("grant");
    assert!(granted.release().await.unwrap());
    assert_eq!(acquire_stats(&server).rejected - rejected_before, 1, "the BLOCK form was not sent again");
    blocking(move || drop(server)).await;
}
