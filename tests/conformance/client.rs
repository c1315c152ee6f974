//! The client on a managed server (no module, the default user restricted): the tests of
//! `tests/client/{single,keepalive,waiting,semaphore,election}.rs` that apply to the Functions
//! engine, each on the engine the client detected by itself. The library is not preloaded:
//! the client loads it, as on a managed service where `FUNCTION LOAD` is allowed.

use std::time::{Duration, Instant};

use fencedlock::{Election, Engine, Error, Leader, LockConfig, Locker, Semaphore};
use futures::StreamExt;
use harness::Server;

fn managed() -> Server {
    Server::builder().managed().start()
}

fn config(ttl_ms: u64, max_wait_ms: u64) -> LockConfig {
    LockConfig::builder()
        .ttl(Duration::from_millis(ttl_ms))
        .node_timeout(Duration::from_millis(500))
        .backoff(Duration::from_millis(5), Duration::from_millis(50))
        .max_wait(Duration::from_millis(max_wait_ms))
        .build()
        .expect("valid test config")
}

fn locker(server: &Server, ttl_ms: u64, max_wait_ms: u64) -> Locker {
    Locker::open(&server.url(), config(ttl_ms, max_wait_ms)).expect("locker")
}

/// Whether an unexpired lease holds `key`, read by the library's STATUS on the harness's
/// connection (not through the client under test).
fn held(server: &Server, key: &str) -> bool {
    let reply: Option<Vec<harness::redis::Value>> =
        server.cmd(&["FCALL_RO", "fencedlock_status", "1", key]).expect("FCALL_RO fencedlock_status");
    matches!(reply.as_deref(), Some([_, harness::redis::Value::Int(1), ..]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_renew_release_and_keep_alive_on_the_library() {
    let server = managed();
    let locker = locker(&server, 2_000, 1_000);
    let mut lease = locker.try_acquire("mc:k").await.expect("granted");
    assert_eq!(locker.engine(), Some(Engine::Functions), "no module on a managed server");
    assert!(held(&server, "mc:k"));
    let first = lease.fence();
    assert!(matches!(locker.try_acquire("mc:k").await, Err(Error::Contended { .. })));
    lease.renew().await.expect("renewed");
    assert_eq!(lease.fence(), first, "renewal keeps the fence");
    assert!(lease.release().await.expect("released"), "held at release");
    assert!(!held(&server, "mc:k"));

    // Kept alive past several ttls, then released; the next fence is higher.
    let short = self::locker(&server, 450, 1_000);
    let kept = short.try_acquire("mc:k").await.expect("granted").keep_alive();
    assert!(kept.fence() > first);
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1_500) {
        kept.ensure_valid().expect("kept alive");
        assert!(held(&server, "mc:k"), "held at {:?}", started.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let kept_fence = kept.fence();
    assert!(kept.release().await.expect("released"));
    let after = locker.try_acquire("mc:k").await.expect("granted");
    assert!(after.fence() > kept_fence);
    after.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_waits_for_a_release_and_gives_up_at_max_wait() {
    let server = managed();
    let holder = locker(&server, 10_000, 1_000);
    let lease = holder.try_acquire("mc:wait").await.expect("granted");
    let fence = lease.fence();

    let patient = locker(&server, 10_000, 5_000);
    let waiting = tokio::spawn(async move {
        let started = Instant::now();
        (patient.acquire("mc:wait").await, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "granted while held");
    lease.release().await.expect("released");
    let (granted, waited) = waiting.await.expect("task");
    let granted = granted.expect("granted after the release");
    assert!(granted.fence() > fence);
    assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(3), "waited {waited:?}");

    let impatient = locker(&server, 10_000, 300);
    let started = Instant::now();
    let err = impatient.acquire("mc:wait").await.expect_err("held throughout");
    let gave_up = started.elapsed();
    assert!(matches!(err, Error::Contended { .. }), "{err:?}");
    assert!(gave_up >= Duration::from_millis(300) && gave_up < Duration::from_millis(1_500), "{gave_up:?}");
    granted.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_admit_their_permits_and_wait_for_one() {
    let server = managed();
    let semaphore = Semaphore::new(locker(&server, 5_000, 3_000), "mc:sem", 2).expect("semaphore");
    let a = semaphore.try_acquire().await.expect("first permit");
    let b = semaphore.try_acquire().await.expect("second permit");
    assert!(b.fence() > a.fence());
    assert!(semaphore.try_acquire().await.is_err(), "a third holder is refused");
    let status = semaphore.status().await.expect("status").expect("state");
    assert_eq!((status.holders.len(), status.permits), (2, 2), "{status:?}");

    let third = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move { semaphore.acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!third.is_finished(), "a third permit while two are held");
    let a_fence = a.fence();
    assert!(a.release().await.expect("released"));
    let c = third.await.expect("task").expect("the freed permit");
    assert!(c.fence() > b.fence() && c.fence() > a_fence);
    b.release().await.expect("released");
    c.release().await.expect("released");
}

/// The stream's next item, within 5 s.
async fn next(
    changes: &mut (impl futures::Stream<Item = Result<Option<Leader>, Error>> + Unpin),
) -> Option<Leader> {
    let item =
        tokio::time::timeout(Duration::from_secs(5), changes.next()).await.expect("a change within 5 s");
    item.expect("the stream does not end").expect("STATUS answered")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_campaign_observe_resign_and_fail_over_by_expiry() {
    let server = managed();
    let election = |ttl_ms| {
        Election::new(locker(&server, ttl_ms, 5_000), "mc:elect")
            .with_poll_interval(Duration::from_millis(20))
    };
    let (a, b) = (election(1_000), election(1_000));
    let mut changes = Box::pin(election(1_000).observe());
    assert_eq!(next(&mut changes).await, None, "nobody leads at first");

    let leader_a = a.campaign("a").await.expect("a elected");
    let epoch_a = leader_a.epoch();
    let seen = next(&mut changes).await.expect("a leads");
    assert_eq!((seen.label.as_deref(), seen.epoch), (Some(&b"a"[..]), epoch_a));
    assert!(leader_a.resign().await.expect("a resigns"));
    assert_eq!(next(&mut changes).await, None, "nobody leads after a resigned");

    // A leader that dies: its lease is left to expire, and the waiting candidate takes over.
    let dead = locker(&server, 700, 1_000);
    let dead_lease = dead.try_acquire("mc:elect").await.expect("granted");
    let dead_epoch = dead_lease.fence();
    let _abandoned = dead_lease.detach();
    let died = Instant::now();
    let leader_b = b.campaign("b").await.expect("b elected after the expiry");
    let took = died.elapsed();
    assert!(leader_b.epoch() > dead_epoch && dead_epoch > epoch_a);
    assert!(took >= Duration::from_millis(600) && took < Duration::from_secs(3), "failover after {took:?}");
    let seen = b.leader().await.expect("leader").expect("b leads");
    assert_eq!((seen.label.as_deref(), seen.epoch), (Some(&b"b"[..]), leader_b.epoch()));
    assert!(leader_b.resign().await.expect("b resigns"));
}
