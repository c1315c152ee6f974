//! The `fencedlock` client against one real server: lease lifecycle, contention, expiry,
//! drop behaviour, timeouts, bad input and restarts.

use std::time::{Duration, Instant};

use crate::support::{blocking, config, restarted_in_grace, steal};
use fencedlock::{Error, LockConfig, Locker, LossCause, ReplyError, Token, TokenFormat};
use harness::{epoch_of, wait_released, LockStatus, Server, EPOCH_GAP};

fn locker(server: &Server, ttl_ms: u64) -> Locker {
    Locker::open(&server.url(), config(ttl_ms, 500)).expect("locker")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_acquire_renew_release() {
    let server = Server::start();
    let locker = locker(&server, 2_000);

    let mut lease = locker.try_acquire("job").await.expect("first grant");
    assert!(lease.fence() > 0);
    assert_eq!(lease.key(), "job");
    assert_eq!(lease.token().as_bytes().len(), 16);
    assert!(lease.remaining() <= Duration::from_millis(2_000) - locker.config().drift());
    assert!(lease.remaining() > Duration::from_millis(1_000));
    lease.ensure_valid().expect("fresh lease is valid");
    assert_eq!(lease.report().yes(), 1);

    let st = server.lock_status("job").expect("lock state exists");
    assert_eq!(st.fence, lease.fence());
    assert!(st.held);
    assert!(
        st.remaining.is_some_and(|d| d > Duration::from_millis(1_000) && d <= Duration::from_millis(2_000)),
        "{st:?}"
    );

    // A second client is refused while the lease runs.
    let other = locker.clone();
    match other.try_acquire("job").await {
        Err(Error::Contended { key }) => assert_eq!(key, "job"),
        other => panic!("expected Contended, got {other:?}"),
    }

    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = lease.valid_until();
    lease.renew().await.expect("renew while held");
    assert!(lease.valid_until() > before, "renew moves the deadline forward");
    let st = server.lock_status("job").expect("lock state exists");
    assert!(
        st.remaining.is_some_and(|d| d > Duration::from_millis(1_700)),
        "server restarted the lease: {st:?}"
    );

    let first_fence = lease.fence();
    assert!(lease.release().await.expect("release"), "we held it");
    assert_eq!(
        server.lock_status("job"),
        Some(LockStatus { fence: first_fence, held: false, remaining: None, label: None })
    );

    let next = locker.try_acquire("job").await.expect("grant after release");
    assert!(next.fence() > first_fence, "{} > {first_fence}", next.fence());
    assert!(next.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_waits_for_the_holder_and_gives_up_after_max_wait() {
    let server = Server::start();
    let holder = locker(&server, 10_000);
    let lease = holder.try_acquire("queue").await.unwrap();

    // Gives up: max wait 300 ms, the holder keeps the lease.
    let impatient = Locker::open(
        &server.url(),
        LockConfig::builder()
            .ttl(Duration::from_secs(1))
            .max_wait(Duration::from_millis(300))
            .backoff(Duration::from_millis(10), Duration::from_millis(40))
            .build()
            .unwrap(),
    )
    .unwrap();
    let started = Instant::now();
    let err = impatient.acquire("queue").await.unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(err, Error::Contended { .. }), "{err:?}");
    assert!(waited >= Duration::from_millis(300), "gave up early: {waited:?}");
    assert!(waited < Duration::from_secs(3), "gave up late: {waited:?}");

    // Waits: the holder releases after 200 ms, the waiter then gets a higher fence.
    let waiter = locker(&server, 1_000);
    let waiting = tokio::spawn(async move { waiter.acquire("queue").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "waiter must not be granted while the lease is held");
    let old_fence = lease.fence();
    assert!(lease.release().await.unwrap());
    let granted = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("waiter granted soon after release")
        .unwrap()
        .expect("grant");
    assert!(granted.fence() > old_fence);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_lease_is_lost_locally_and_on_the_server() {
    let server = Server::start();
    let locker = locker(&server, 150);
    let mut lease = locker.try_acquire("short").await.unwrap();
    assert!(lease.remaining() <= Duration::from_millis(150));
    tokio::time::sleep(Duration::from_millis(250)).await;

    assert!(!lease.is_valid());
    assert_eq!(lease.remaining(), Duration::ZERO);
    match lease.ensure_valid() {
        Err(Error::LeaseLost { cause: LossCause::Expired, key }) => assert_eq!(key, "short"),
        other => panic!("expected LeaseLost(Expired), got {other:?}"),
    }
    match lease.renew().await {
        Err(Error::LeaseLost { cause: LossCause::Expired, .. }) => {}
        other => panic!("renewing an expired lease must fail, got {other:?}"),
    }
    // Someone else takes over; our late release changes nothing.
    let next = locker.try_acquire("short").await.expect("expired lease can be taken");
    assert!(next.fence() > lease.fence());
    assert!(!lease.release().await.unwrap(), "release after expiry reports false");
    assert!(server.lock_held("short"), "the new holder keeps its lease");
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_is_refused_after_the_key_was_taken_over() {
    let server = Server::start();
    let locker = locker(&server, 5_000);
    let mut lease = locker.try_acquire("stolen").await.unwrap();
    let thief_fence = steal(&server, "stolen");
    assert!(thief_fence > lease.fence(), "fences survive DEL");
    match lease.renew().await {
        Err(Error::LeaseLost { cause: LossCause::Refused, .. }) => {}
        other => panic!("expected LeaseLost(Refused), got {other:?}"),
    }
    assert!(lease.ensure_valid().is_err(), "a refused renewal ends local validity too");
    assert!(!lease.release().await.unwrap());
    assert!(server.lock_held("stolen"), "our release must not free the thief's lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_token_extends_a_lease_known_only_by_its_token() {
    let server = Server::start();
    let locker = locker(&server, 2_000);
    let token = locker.try_acquire("handed").await.unwrap().detach();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = server.lock_status("handed").expect("lock state");
    let left_before = before.remaining.expect("300 ms into a 2 s lease, it is held");
    assert!(left_before <= Duration::from_millis(1_700), "{before:?}");
    assert!(locker.renew_token("handed", &token).await.unwrap());
    let after = server.lock_status("handed").expect("lock state");
    assert!(
        after.held && after.remaining.is_some_and(|left| left > left_before + Duration::from_millis(200)),
        "renewed to a full ttl: {before:?} -> {after:?}"
    );
    assert_eq!(after.fence, before.fence, "renewing keeps the fence");

    // Another token is a definite "not yours", and changes nothing.
    let wrong = Token::from_bytes(b"not-the-token".to_vec()).unwrap();
    assert!(!locker.renew_token("handed", &wrong).await.unwrap());
    assert!(server.lock_held("handed"));

    // An unanswered renewal is an error, not a "no".
    server.pause();
    let unknown = locker.renew_token("handed", &token).await;
    server.resume();
    match unknown {
        Err(Error::Timeout { operation: "RENEW", .. }) => {}
        other => panic!("expected a RENEW timeout, got {other:?}"),
    }

    // Taken over: `false`, where `Lease::renew` says LeaseLost; the thief keeps its lease.
    steal(&server, "handed");
    assert!(!locker.renew_token("handed", &token).await.unwrap());
    assert!(server.lock_held("handed"));
    assert!(!locker.release_token("handed", &token).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_lease_releases_it_in_the_background() {
    let server = Server::start();
    let locker = locker(&server, 30_000);
    let lease = locker.try_acquire("dropped").await.unwrap();
    assert!(server.lock_held("dropped"));
    drop(lease);
    wait_released(&[&server], "dropped", Duration::from_secs(3)).await;

    // Detaching keeps the lease; the token can release it later (e.g. from another process).
    let lease = locker.try_acquire("detached").await.unwrap();
    let token = lease.detach();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(server.lock_held("detached"), "detach must not release");
    let wrong = Token::from_bytes(b"not-the-token".to_vec()).unwrap();
    assert!(!locker.release_token("detached", &wrong).await.unwrap());
    assert!(server.lock_held("detached"));
    assert!(locker.release_token("detached", &token).await.unwrap());
    assert!(!server.lock_held("detached"));
}

#[test]
fn dropping_a_lease_outside_a_runtime_neither_panics_nor_blocks() {
    let server = Server::start();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let lease = runtime.block_on(async { locker(&server, 800).try_acquire("orphan").await.unwrap() });
    drop(runtime);
    let started = Instant::now();
    drop(lease);
    assert!(started.elapsed() < Duration::from_millis(100));
    // Nobody could release it, so the ttl ends it.
    assert!(server.lock_held("orphan"));
    harness::poll("the orphaned lease to expire", Duration::from_secs(3), || !server.lock_held("orphan"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_times_out_within_the_node_timeout() {
    let server = Server::start();
    let locker = Locker::open(&server.url(), config(5_000, 200)).unwrap();
    // Connect first so the timeout hits a request, then once more on a fresh connection.
    locker.try_acquire("warm").await.unwrap().release().await.unwrap();
    server.pause();
    let started = Instant::now();
    let err = locker.try_acquire("frozen").await.unwrap_err();
    let took = started.elapsed();
    server.resume();
    match &err {
        Error::Timeout { operation, after, .. } => {
            assert_eq!(*operation, "ACQUIRE");
            assert_eq!(*after, Duration::from_millis(200));
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(err.is_retryable());
    assert!(took < Duration::from_secs(2), "took {took:?}");
    // The server processes the queued ACQUIRE and then our RELEASE: nothing is left behind.
    wait_released(&[&server], "frozen", Duration::from_secs(3)).await;
    let lease = locker.try_acquire("frozen").await.expect("usable after resume");
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_typed_and_not_retried() {
    let server = Server::start();
    let _: () = server.cmd(&["SET", "plain", "v"]).unwrap();
    let locker = locker(&server, 1_000);
    let started = Instant::now();
    match locker.acquire("plain").await {
        Err(err @ Error::Server { .. }) => {
            assert!(!err.is_retryable());
            assert!(err.to_string().contains("WRONGTYPE"), "{err}");
        }
        other => panic!("expected a WRONGTYPE server error, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(1), "WRONGTYPE must not be retried");

    // A ttl above the server's max-ttl is a server error, not contention.
    let _: () = server.cmd(&["CONFIG", "SET", "fencedlock.max-ttl-ms", "1000"]).unwrap();
    let long = Locker::open(&server.url(), config(5_000, 500)).unwrap();
    match long.acquire("long").await {
        Err(err @ Error::Server { .. }) => assert!(err.to_string().contains("ttl"), "{err}"),
        other => panic!("expected a ttl error, got {other:?}"),
    }
    assert_eq!(server.lock_status("long"), None, "a refused command changes nothing");

    // The limit is the server's: raised above the default day, a two-day lease is granted.
    let _: () = server.cmd(&["CONFIG", "SET", "fencedlock.max-ttl-ms", "172800000"]).unwrap();
    let two_days =
        LockConfig::builder().ttl(Duration::from_secs(2 * 86_400)).build().expect("no client cap at a day");
    let lease = Locker::open(&server.url(), two_days).unwrap().try_acquire("long").await.expect("granted");
    assert!(server.lock_status("long").is_some_and(|s| s.remaining > Some(Duration::from_secs(86_400))));
    assert!(lease.release().await.unwrap());
    let _: () = server.cmd(&["CONFIG", "SET", "fencedlock.max-ttl-ms", "1000"]).unwrap();
    match long.acquire("long").await {
        Err(err) => assert_eq!(err.reply_error(), Some(ReplyError::TtlTooLarge), "{err}"),
        other => panic!("expected the server's ttl refusal, got {other:?}"),
    }

    // A server that is not listening: I/O error, retryable.
    let nowhere = Locker::open("redis://127.0.0.1:1", config(1_000, 200)).unwrap();
    let err = nowhere.try_acquire("x").await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_locker_reconnects_after_a_server_restart() {
    let mut server = Server::builder().arg("appendonly", "yes").arg("appendfsync", "always").start();
    let locker = locker(&server, 2_000);
    let before = locker.try_acquire("restart").await.unwrap();
    let before_fence = before.fence();
    assert!(before.release().await.unwrap());

    let mut server = blocking(move || {
        server.kill9();
        server.restart();
        server
    })
    .await;
    // The first request may hit the dead connection; acquire() retries through it.
    let after = locker.acquire("restart").await.expect("grant after restart");
    assert!(
        epoch_of(after.fence()) > epoch_of(before_fence),
        "restart epoch jump: {} after {before_fence}",
        after.fence()
    );
    after.release().await.unwrap();
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hex_tokens_can_be_used_from_redis_cli() {
    let server = Server::start();
    let config =
        LockConfig::builder().ttl(Duration::from_secs(30)).token_format(TokenFormat::Hex).build().unwrap();
    let locker = Locker::open(&server.url(), config).unwrap();
    let lease = locker.try_acquire("hex").await.unwrap();
    let text = String::from_utf8(lease.token().as_bytes().to_vec()).expect("hex token is text");
    assert_eq!(text.len(), 32);
    let token = lease.detach();
    let released: i64 = server.cmd(&["FENCEDLOCK.RELEASE", "hex", &text]).unwrap();
    assert_eq!(released, 1);
    assert!(!locker.release_token("hex", &token).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_keys_and_many_concurrent_holders_of_different_keys() {
    let server = Server::start();
    let locker = locker(&server, 5_000);
    let mut tasks = Vec::new();
    for i in 0..50 {
        let locker = locker.clone();
        tasks.push(tokio::spawn(async move {
            let key = format!("k:{i}:\u{e9}");
            let lease = locker.try_acquire(&key).await.expect("distinct keys never contend");
            let fence = lease.fence();
            assert!(lease.release().await.unwrap());
            fence
        }));
    }
    let mut fences = Vec::new();
    for t in tasks {
        fences.push(t.await.unwrap());
    }
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 50, "the server high-water mark makes fences unique across keys");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reacquiring_with_the_holders_token_is_idempotent() {
    let server = Server::start();
    let locker = locker(&server, 1_000);
    // A process persisted its token, crashed, and comes back before the ttl ran out.
    let first = locker.try_acquire("resume").await.unwrap();
    let fence = first.fence();
    let token = first.detach();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let again = locker
        .try_acquire_with_token("resume", &token)
        .await
        .expect("the holder's own token is granted again");
    assert_eq!(again.fence(), fence, "same lease, same fence");
    let st = server.lock_status("resume").expect("lock state");
    assert!(
        st.remaining.is_some_and(|d| d > Duration::from_millis(900)),
        "the lease restarted for a full ttl: {st:?}"
    );
    // Anyone else is still refused.
    let other = Token::from_bytes(b"someone-else".to_vec()).unwrap();
    assert!(matches!(locker.try_acquire_with_token("resume", &other).await, Err(Error::Contended { .. })));
    assert!(again.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_waits_out_the_restart_grace() {
    let server = restarted_in_grace("800").await;
    let locker = locker(&server, 1_000);
    match locker.try_acquire("grace").await {
        Err(err @ Error::Server { .. }) => {
            assert!(err.is_retryable(), "TRYAGAIN is transient: {err}");
            assert!(err.to_string().contains("TRYAGAIN") || err.to_string().contains("TryAgain"), "{err}");
        }
        other => panic!("expected TRYAGAIN during the restart grace, got {other:?}"),
    }
    let lease = locker.acquire("grace").await.expect("granted once the grace is over");
    assert!(lease.fence() > EPOCH_GAP);
    lease.release().await.unwrap();
}

/// An empty, blank or control-character key is refused before any request (issue 30): a
/// crontab's unset `$JOB` would otherwise make every such job share one lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_blank_and_control_keys_are_refused_before_any_request() {
    let server = Server::start();
    let locker = locker(&server, 2_000);
    let commands = || -> u64 {
        let stats: String = server.cmd(&["INFO", "commandstats"]).expect("INFO");
        stats.lines().filter(|l| l.to_lowercase().starts_with("cmdstat_fencedlock")).count() as u64
    };
    let token = Token::generate(TokenFormat::Hex);
    for key in ["", " \t ", "job\n", "\u{1b}[31mjob"] {
        let refused = [
            locker.try_acquire(key).await.map(drop),
            locker.acquire(key).await.map(drop),
            locker.release_token(key, &token).await.map(drop),
            locker.renew_token(key, &token).await.map(drop),
            locker.node().status(key).await.map(drop),
        ];
        for result in refused {
            assert!(matches!(result, Err(Error::InvalidKey { .. })), "{key:?}: {result:?}");
        }
    }
    assert_eq!(commands(), 0, "no fencedlock command reached the server");
    assert_eq!(server.dbsize(), 0, "nothing written");
}
