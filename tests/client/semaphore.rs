//! Fenced semaphores against a real server: never more than N holders, fences strictly
//! increasing over every grant, waiters granted in arrival order as permits free up, a
//! mismatched count refused without effect, status showing every holder but no token,
//! keep-alive on a permit, and the runnable example.
//!
//! Holders are read through the harness's own connection (`Server::semaphore_status`) where
//! the client's `Semaphore::status` is not what is being tested.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{config, counter, wait_until};
use fencedlock::redis;
use fencedlock::{Error, Lease, Locker, ReplyError, Semaphore, MAX_PERMITS};
use harness::Server;
use tokio::task::JoinHandle;

fn semaphore(server: &Server, key: &str, ttl_ms: u64, permits: u32) -> Semaphore {
    let locker = Locker::open(&server.url(), config(ttl_ms, 250)).expect("locker");
    Semaphore::new(locker, key, permits).expect("a valid permit count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_than_n_holders_and_fences_increase_over_all_grants() {
    const PERMITS: u32 = 3;
    const TASKS: usize = 8;
    const ROUNDS: usize = 4;
    let server = Server::start();
    let sem = semaphore(&server, "sem:bound", 5_000, PERMITS);
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    // Every grant's fence, and the highest fence released before its request was sent.
    let released = Arc::new(Mutex::new(0u64));
    let grants = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let sem = sem.clone();
            let (holding, most, released, grants) =
                (Arc::clone(&holding), Arc::clone(&most), Arc::clone(&released), Arc::clone(&grants));
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let released_before = *released.lock().unwrap();
                    let permit = sem.acquire().await.expect("a permit within the wait");
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    assert!(now <= PERMITS as usize, "{now} holders of {PERMITS} permits");
                    grants.lock().unwrap().push((permit.fence(), released_before));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    permit.ensure_valid().expect("still held");
                    holding.fetch_sub(1, Ordering::SeqCst);
                    let fence = permit.fence();
                    assert!(permit.release().await.expect("release"), "the permit was still held");
                    let mut released = released.lock().unwrap();
                    *released = (*released).max(fence);
                }
            })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(20), task).await.expect("rounds end").expect("task");
    }
    assert_eq!(most.load(Ordering::SeqCst), PERMITS as usize, "the permits were all in use at some point");
    let grants = grants.lock().unwrap().clone();
    assert_eq!(grants.len(), TASKS * ROUNDS);
    let mut fences: Vec<u64> = grants.iter().map(|g| g.0).collect();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), grants.len(), "every grant has a fence of its own: {grants:?}");
    for (fence, released_before) in &grants {
        assert!(
            fence > released_before,
            "fence {fence} not above {released_before}, released before it was asked"
        );
    }
    let status = server.semaphore_status("sem:bound").expect("the key keeps its state");
    assert_eq!((status.permits, status.holders.len()), (PERMITS, 0));
    assert_eq!(status.fence, *fences.last().expect("grants"), "the key's fence is the last grant's");
}

/// A waiting `acquire`'s permit and when it was granted, within 3 s.
async fn granted(waiter: JoinHandle<Result<(Instant, Lease), Error>>) -> (Instant, Lease) {
    tokio::time::timeout(Duration::from_secs(3), waiter)
        .await
        .expect("granted")
        .expect("task")
        .expect("permit")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_granted_in_arrival_order_as_permits_free_up() {
    let server = Server::start();
    // A ttl far beyond the test: only the releases can free the permits.
    let sem = semaphore(&server, "sem:fifo", 30_000, 2);
    let (a, b) = (sem.acquire().await.expect("a"), sem.acquire().await.expect("b"));
    let waiter = |sem: &Semaphore| {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire().await.map(|permit| (Instant::now(), permit)) })
    };
    let first = waiter(&sem);
    wait_until("the first waiter queued", Duration::from_secs(3), || {
        counter(&server, "fencedlock_waiters") == 1
    })
    .await;
    let second = waiter(&sem);
    wait_until("the second waiter queued", Duration::from_secs(3), || {
        counter(&server, "fencedlock_waiters") == 2
    })
    .await;
    // No barging: a new caller gets nothing while others wait.
    assert!(matches!(sem.try_acquire().await, Err(Error::Contended { .. })));

    let b_fence = b.fence();
    let freed = Instant::now();
    assert!(a.release().await.expect("release a"));
    let (granted_at, first) = granted(first).await;
    assert!(
        granted_at - freed < Duration::from_secs(1),
        "handed over at the release: {:?}",
        granted_at - freed
    );
    assert!(first.fence() > b_fence, "a new grant's fence is above every earlier one");
    assert!(!second.is_finished(), "one freed permit grants one waiter");
    assert_eq!(counter(&server, "fencedlock_waiters"), 1);

    assert!(b.release().await.expect("release b"));
    let (_, second) = granted(second).await;
    assert!(second.fence() > first.fence(), "the first to queue was granted first");
    let holders: Vec<u64> =
        server.semaphore_status("sem:fifo").expect("state").holders.iter().map(|h| h.fence).collect();
    assert_eq!(holders, [first.fence(), second.fence()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_count_is_refused_at_once_and_changes_nothing() {
    let server = Server::start();
    let two = semaphore(&server, "sem:count", 30_000, 2);
    let held = two.acquire().await.expect("a permit");
    let before = server.semaphore_status("sem:count").expect("state");
    let mismatch = |err: &Error| {
        err.reply_error() == Some(ReplyError::PermitsMismatch) && !err.is_retryable() && !err.is_unavailable()
    };
    let three = semaphore(&server, "sem:count", 30_000, 3);
    let err = three.try_acquire().await.expect_err("another count");
    assert!(mismatch(&err), "{err:?}");
    // Not waited out: the wait (5 s) is for busy permits, not for a wrong count.
    let started = Instant::now();
    let err = three.acquire().await.expect_err("another count");
    assert!(mismatch(&err), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(1), "refused at once, not after {:?}", started.elapsed());
    let err = three.acquire_with_policy().await.expect_err("never unlocked");
    assert!(mismatch(&err), "{err:?}");
    // A plain lock on the key is a semaphore of one permit: refused too.
    let locker = Locker::open(&server.url(), config(30_000, 250)).expect("locker");
    let err = locker.try_acquire("sem:count").await.expect_err("a mutex on a semaphore key");
    assert!(mismatch(&err), "{err:?}");
    assert_eq!(server.semaphore_status("sem:count").expect("state").holders.len(), 1);
    assert_eq!(server.semaphore_status("sem:count").map(|s| (s.fence, s.permits)), Some((before.fence, 2)));

    // Once nobody holds the key, the next grant sets the count anew.
    assert!(held.release().await.expect("release"));
    let permit = three.try_acquire().await.expect("the idle key takes the new count");
    assert!(permit.fence() > before.fence);
    assert_eq!(server.semaphore_status("sem:count").map(|s| s.permits), Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_every_holder_and_never_a_token() {
    let server = Server::start();
    let sem = |label: &str| semaphore(&server, "sem:status", 5_000, 3).with_label(label).expect("a label");
    assert_eq!(sem("w-0").status().await.expect("status"), None, "no state before the first grant");
    let (one, two) = (sem("w-1").acquire().await.expect("one"), sem("w-2").acquire().await.expect("two"));
    let status = sem("w-0").status().await.expect("status").expect("state");
    assert_eq!((status.permits, status.free(), status.fence), (3, 1, two.fence()));
    let seen: Vec<(u64, Option<&[u8]>)> =
        status.holders.iter().map(|h| (h.fence, h.label.as_deref())).collect();
    assert_eq!(seen, [(one.fence(), Some(&b"w-1"[..])), (two.fence(), Some(&b"w-2"[..]))]);
    for holder in &status.holders {
        assert!(
            holder.remaining > Duration::from_secs(4) && holder.remaining <= Duration::from_secs(5),
            "{holder:?}"
        );
    }
    // The raw reply carries no token anywhere.
    let raw: redis::Value =
        server.cmd(&[fencedlock_protocol::command::STATUS.name, "sem:status"]).expect("STATUS");
    let strings = bulk_strings(&raw);
    assert_eq!(strings, [b"w-1".to_vec(), b"w-2".to_vec()], "only the labels are strings: {raw:?}");
    for lease in [&one, &two] {
        assert!(!strings.iter().any(|s| s.as_slice() == lease.token().as_bytes()), "a token in {raw:?}");
    }
    // A lock's status cannot show several holders: a typed error, not a parse failure.
    let node = fencedlock::Node::new(&server.url()).expect("node");
    let err = node.status("sem:status").await.expect_err("a semaphore key");
    assert!(matches!(err, Error::Semaphore { permits: 3, .. }), "{err:?}");
    // A mutex key shows as one permit.
    let locker = Locker::open(&server.url(), config(5_000, 250)).expect("locker");
    let lock = locker.acquire("sem:mutex").await.expect("lock");
    let mutex = node.semaphore_status("sem:mutex").await.expect("status").expect("state");
    assert_eq!((mutex.permits, mutex.holders.len(), mutex.holders[0].fence), (1, 1, lock.fence()));
    // An idle semaphore keeps its count and its fence.
    drop((one.release().await, two.release().await));
    let idle = sem("w-0").status().await.expect("status").expect("state");
    assert_eq!((idle.permits, idle.holders.len(), idle.fence), (3, 0, status.fence));
}

/// Every bulk string anywhere in `value`.
fn bulk_strings(value: &redis::Value) -> Vec<Vec<u8>> {
    match value {
        redis::Value::BulkString(bytes) => vec![bytes.clone()],
        redis::Value::Array(items) => items.iter().flat_map(bulk_strings).collect(),
        _ => Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_is_kept_alive_like_a_lease() {
    let server = Server::start();
    let sem = semaphore(&server, "sem:alive", 300, 2);
    let kept = sem.acquire().await.expect("a permit").keep_alive();
    let other = sem.acquire().await.expect("the other permit");
    let fence = kept.fence();
    // Three ttls: only the renewals keep the permit (the other one, not renewed, expires).
    tokio::time::sleep(Duration::from_millis(900)).await;
    kept.ensure_valid().expect("kept alive");
    assert!(other.ensure_valid().is_err(), "the permit nobody renewed expired");
    let status = server.semaphore_status("sem:alive").expect("state");
    assert_eq!(status.holders.iter().map(|h| h.fence).collect::<Vec<_>>(), [fence]);
    let next = sem.try_acquire().await.expect("the expired permit is free again");
    assert!(next.fence() > other.fence());
    assert!(kept.release().await.expect("release"), "still held at the release");
}

#[test]
fn a_count_outside_the_protocols_range_is_a_config_error() {
    let locker = || Locker::open("redis://127.0.0.1:1", config(1_000, 250)).expect("no connection yet");
    for permits in [0, MAX_PERMITS + 1] {
        let err = Semaphore::new(locker(), "k", permits).expect_err("out of range");
        assert!(matches!(err, Error::Config(_)), "{err:?}");
    }
    assert_eq!(Semaphore::new(locker(), "k", MAX_PERMITS).expect("the maximum").permits(), MAX_PERMITS);
}

/// The example runs against a real server, shows the bound held, and exits 0.
#[test]
fn the_example_keeps_the_bound() {
    let stdout = crate::support::run_example("semaphore", &Server::start());
    assert!(stdout.contains("at most 2 of 5 workers ran at once"), "{stdout}");
}
