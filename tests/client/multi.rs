//! Several keys at once (`Locker::acquire_all`): all or none, no partial hold on a refusal, no
//! deadlock between callers naming the same keys in opposite orders, and every lease valid on
//! return after a long wait; on both engines and over Redlock. On one server whose module has
//! `ACQUIREALL`, or whose library has `fencedlock_acquireall` (keys of one slot), the set is one
//! command; elsewhere (a module older than it, keys of several slots on the library) key by key.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fencedlock::{Error, LockConfig, Locker, Redlock};
use fencedlock_protocol::command::{ACQUIRE, ACQUIREALL};
use harness::Server;

use crate::support::{calls, config, held_elsewhere, v1_module, wait_until};

/// Both engines: the module, and the Functions library on a server without it.
fn servers() -> [(&'static str, Server); 2] {
    [("module", Server::start()), ("functions", Server::builder().without_module().start())]
}

fn waiting(ttl_ms: u64, max_wait_ms: u64) -> LockConfig {
    LockConfig::builder()
        .ttl(Duration::from_millis(ttl_ms))
        .node_timeout(Duration::from_millis(500))
        .max_wait(Duration::from_millis(max_wait_ms))
        .build()
        .expect("valid config")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_or_none() {
    for (engine, server) in servers() {
        let locker = Locker::open(&server.url(), config(5_000, 500)).expect("locker");
        let all = locker.try_acquire_all(&["m:b", "m:a", "m:c"]).await.expect("all granted");
        let keys: Vec<&str> = all.iter().map(|l| l.key()).collect();
        assert_eq!(keys, ["m:b", "m:a", "m:c"], "{engine}: in the order named");
        let fences: Vec<u64> = all.iter().map(|l| l.fence()).collect();
        assert!(fences.iter().all(|&f| f > 0), "{engine}: {fences:?}");
        assert!(matches!(locker.try_acquire("m:c").await, Err(Error::Contended { .. })), "{engine}");

        // One key busy: nothing of the set is kept.
        let other = Locker::open(&server.url(), config(5_000, 500)).expect("locker");
        let refused = other.try_acquire_all(&["m:z", "m:c", "m:y"]).await;
        assert!(
            matches!(refused, Err(Error::Contended { ref key }) if key == "m:c"),
            "{engine}: {refused:?}"
        );
        for key in ["m:y", "m:z"] {
            let free = other.try_acquire(key).await.unwrap_or_else(|e| panic!("{engine}: {key} kept: {e}"));
            free.release().await.expect("released");
        }
        assert!(all.release().await.expect("released"), "{engine}");
        assert!(matches!(locker.try_acquire_all(&[]).await, Err(Error::Config(_))));
        assert!(matches!(locker.try_acquire_all(&["a", "a"]).await, Err(Error::Config(_))));
    }
}

/// Two callers take {x, y} and {y, x} over and over, waiting on the server: both always get
/// through (no deadlock), and never hold the pair at the same time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_never_deadlock() {
    for (engine, server) in servers() {
        let inside = Arc::new(AtomicUsize::new(0));
        let contenders: Vec<_> = [["d:x", "d:y"], ["d:y", "d:x"]]
            .into_iter()
            .map(|keys| {
                let locker = Locker::open(&server.url(), waiting(5_000, 5_000)).expect("locker");
                let inside = Arc::clone(&inside);
                tokio::spawn(async move {
                    for _ in 0..20 {
                        let all = locker.acquire_all(&keys).await.expect("granted within the wait");
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "both hold the pair");
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        assert!(all.release().await.expect("released"));
                    }
                })
            })
            .collect();
        let done = tokio::time::timeout(Duration::from_secs(30), futures::future::join_all(contenders)).await;
        for joined in done.unwrap_or_else(|_| panic!("{engine}: deadlocked")) {
            joined.expect("contender");
        }
    }
}

/// The second key is held for longer than the first lease's ttl: the first lease, taken
/// early, is renewed before the call returns, so every lease is valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_wait_leaves_every_lease_valid() {
    let server = Server::start();
    let busy = held_elsewhere(&server, "w:b", config(5_000, 500)).await;
    let locker = Locker::open(&server.url(), waiting(2_000, 5_000)).expect("locker");
    let waiter = tokio::spawn(async move { locker.acquire_all(&["w:a", "w:b"]).await });
    // Most of w:a's validity goes by while w:b is awaited.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    busy.release().await.expect("released");
    let all = waiter.await.expect("task").expect("granted after the release");
    all.ensure_valid().expect("valid");
    let first = all.get("w:a").expect("w:a");
    assert!(first.remaining() > Duration::from_millis(1_000), "w:a was not renewed: {:?}", first.remaining());
    assert!(all.release().await.expect("released"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_redlock_each_key_by_majority() {
    let servers = Server::start_many(3);
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let redlock = Redlock::open(&urls, config(5_000, 500)).expect("redlock");
    let all = redlock.try_acquire_all(&["r:1", "r:2"]).await.expect("granted");
    assert!(all.iter().all(|l| l.report().yes() >= 2));
    let refused = redlock.try_acquire_all(&["r:0", "r:2"]).await;
    assert!(refused.is_err());
    // The refused set's releases reach a majority before the call returns, the rest soon after.
    wait_until("nothing of a refused set is held", Duration::from_secs(2), || {
        servers.iter().all(|s| !s.lock_held("r:0"))
    })
    .await;
    assert!(all.release().await.expect("released"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_takes_the_set_in_one_command_and_a_refusal_in_one_reply() {
    let server = Server::start();
    let locker = Locker::open(&server.url(), config(5_000, 500)).expect("locker");
    let all = locker.try_acquire_all(&["one:b", "one:a", "one:c"]).await.expect("all granted");
    assert_eq!((calls(&server, ACQUIREALL.name), calls(&server, ACQUIRE.name)), (1, 0), "one command");
    let fences: Vec<u64> = all.iter().map(|l| l.fence()).collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "granted in the order named: {fences:?}");
    let token = all.iter().next().map(|l| l.token().clone()).expect("a lease");
    assert!(all.iter().all(|l| l.token() == &token && l.is_valid()), "one token for the set");
    for lease in all.iter() {
        let st = server.lock_status(lease.key()).expect("held");
        assert_eq!((st.fence, st.held), (lease.fence(), true), "{}", lease.key());
    }

    // A busy key: one refused command, no key of the set created, the busy key named.
    let other = Locker::open(&server.url(), config(5_000, 500)).expect("locker");
    let refused = other.try_acquire_all(&["one:z", "one:c", "one:y"]).await;
    assert!(matches!(refused, Err(Error::Contended { ref key }) if key == "one:c"), "{refused:?}");
    assert_eq!(calls(&server, ACQUIREALL.name), 2);
    assert!(server.lock_status("one:z").is_none() && server.lock_status("one:y").is_none());

    // Waiting: the set is granted as soon as its last key is free.
    let waiter = {
        let other = other.clone();
        tokio::spawn(async move { other.acquire_all(&["one:y", "one:a"]).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "one:a is still held");
    assert!(server.lock_status("one:y").is_none(), "no part of a set is held while it waits");
    assert!(all.release().await.expect("released"));
    let taken = waiter.await.expect("task").expect("granted after the release");
    assert!(taken.iter().all(|l| l.fence() > fences[2]));
    taken.release().await.expect("released");
}

/// On the library (`FCALL`, or the script where `FUNCTION` is denied) a set of one slot is one
/// `fencedlock_acquireall` call for one token, a refused set creates no key, and a set spread
/// over slots (which one floor cannot cover) is taken key by key, a token per key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_library_takes_a_set_of_one_slot_in_one_call() {
    let forms = [
        ("functions", Server::builder().without_module().start(), "fcall"),
        ("script", Server::builder().deny_functions().start(), "evalsha"),
    ];
    for (form, server, call) in forms {
        let locker = Locker::open(&server.url(), config(5_000, 500)).expect("locker");
        // Connected (and the library loaded) first, so that what follows counts only the set.
        locker.try_acquire("{lib}warm").await.expect("grant").release().await.expect("released");
        let before = calls(&server, call);
        let all = locker.try_acquire_all(&["{lib}b", "{lib}a", "{lib}c"]).await.expect("all granted");
        assert_eq!(calls(&server, call) - before, 1, "{form}: one call for the set");
        let fences: Vec<u64> = all.iter().map(|l| l.fence()).collect();
        assert!(fences.windows(2).all(|w| w[0] < w[1]), "{form}: in the order named: {fences:?}");
        let token = all.iter().next().map(|l| l.token().clone()).expect("a lease");
        assert!(all.iter().all(|l| l.token() == &token && l.is_valid()), "{form}: one token for the set");

        // A busy key: one refused call, no key of the set created, the busy key named.
        let other = Locker::open(&server.url(), config(5_000, 500)).expect("locker");
        other.try_acquire("{lib}warm").await.expect("grant").release().await.expect("released");
        let before = calls(&server, call);
        let refused = other.try_acquire_all(&["{lib}z", "{lib}c", "{lib}y"]).await;
        assert!(
            matches!(refused, Err(Error::Contended { ref key }) if key == "{lib}c"),
            "{form}: {refused:?}"
        );
        // The refused call, then a STATUS per key up to the busy one, which names it.
        assert_eq!(calls(&server, call) - before, 3, "{form}");
        let created: i64 = server.cmd(&["EXISTS", "{lib}z", "{lib}y"]).expect("EXISTS");
        assert_eq!(created, 0, "{form}: a refused set created a key");
        assert!(all.release().await.expect("released"), "{form}");

        // Keys of several slots: key by key, each with a token of its own.
        let spread = locker.try_acquire_all(&["lib:x", "lib:y"]).await.expect("all granted");
        let tokens: Vec<_> = spread.iter().map(|l| l.token().clone()).collect();
        assert_ne!(tokens[0], tokens[1], "{form}: keys of two slots in one call");
        assert!(spread.release().await.expect("released"), "{form}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_older_than_acquireall_is_asked_key_by_key() {
    let server = Server::builder().without_module().arg("loadmodule", v1_module().to_string_lossy()).start();
    let locker = Locker::open(&server.url(), config(5_000, 500)).expect("locker");
    // Connected first, so that what follows sends nothing but the set's requests.
    locker.try_acquire("old:warm").await.expect("grant").release().await.expect("released");
    let errors = || server.info_field("errorstats", "errorstat_ERR").unwrap_or_default();
    let errors_before = errors();
    let all = locker.try_acquire_all(&["old:a", "old:b"]).await.expect("all granted");
    assert_eq!(calls(&server, ACQUIRE.name), 3, "one ACQUIRE per key");
    // No ACQUIREALL was sent: its "unknown command" would have echoed the token.
    assert_eq!(errors(), errors_before);
    assert!(all.release().await.expect("released"));
}
