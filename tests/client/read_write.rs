//! Fenced read-write locks through the client against a real server: readers and writers
//! under contention (a writer always alone, readers together, every writer's fence above
//! every lease released before it asked), a writer waiting in the server's queue while
//! readers stream in, the downgrade keeping the fence and letting waiting readers in, and a
//! lost write lease that cannot be downgraded.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::config;
use fencedlock::{Error, Locker, ReadWriteLock};
use harness::Server;

fn rw_lock(server: &Server, key: &str, ttl_ms: u64) -> ReadWriteLock {
    let locker = Locker::open(&server.url(), config(ttl_ms, 250)).expect("locker");
    ReadWriteLock::new(locker, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_is_alone_readers_share_and_writers_fences_rise_over_all_leases() {
    const TASKS: usize = 6;
    const ROUNDS: usize = 5;
    let server = Server::start();
    let lock = rw_lock(&server, "rw:contend", 5_000);
    // (readers, writers) holding now, the most readers seen at once.
    let holding = Arc::new(Mutex::new((0usize, 0usize)));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let released = Arc::new(Mutex::new(0u64));
    let writes = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let lock = lock.clone();
            let (holding, most_readers, released, writes) =
                (Arc::clone(&holding), Arc::clone(&most_readers), Arc::clone(&released), Arc::clone(&writes));
            tokio::spawn(async move {
                for round in 0..ROUNDS {
                    let writer = (t + round) % 3 == 0;
                    let released_before = *released.lock().unwrap();
                    let lease = if writer { lock.write().await } else { lock.read().await }.expect("a lease");
                    {
                        let mut now = holding.lock().unwrap();
                        if writer {
                            now.1 += 1;
                            writes.lock().unwrap().push((lease.fence(), released_before));
                        } else {
                            now.0 += 1;
                            most_readers.fetch_max(now.0, Ordering::SeqCst);
                        }
                        assert!(
                            now.1 <= 1 && (now.1 == 0 || now.0 == 0),
                            "readers and writers at once: {now:?}"
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(if writer { 5 } else { 20 })).await;
                    lease.ensure_valid().expect("still held");
                    {
                        let mut now = holding.lock().unwrap();
                        if writer {
                            now.1 -= 1;
                        } else {
                            now.0 -= 1;
                        }
                    }
                    let fence = lease.fence();
                    assert!(lease.release().await.expect("release"), "the lease was still held");
                    let mut released = released.lock().unwrap();
                    *released = (*released).max(fence);
                }
            })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task).await.expect("rounds end").expect("task");
    }
    assert!(most_readers.load(Ordering::SeqCst) >= 2, "readers held together at some point");
    for (fence, released_before) in writes.lock().unwrap().iter() {
        assert!(fence > released_before, "a writer's fence {fence} not above {released_before}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_gets_in_while_readers_keep_coming() {
    let server = Server::start();
    let lock = rw_lock(&server, "rw:queue", 5_000);
    let first = lock.read().await.expect("a read lease");
    let writer = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.write().await })
    };
    harness::poll("the writer to wait in the server's queue", Duration::from_secs(5), || {
        server.waiters() == 1
    });
    // Readers that come later are refused at once, or queue behind the writer.
    assert!(matches!(lock.try_read().await, Err(Error::Contended { .. })));
    let late = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.read().await })
    };
    harness::poll("the late reader to queue", Duration::from_secs(5), || server.waiters() == 2);
    let read_fence = first.fence();
    assert!(first.release().await.expect("release"));
    let written = tokio::time::timeout(Duration::from_secs(5), writer).await.expect("in time").expect("task");
    let written = written.expect("the write lease");
    assert!(written.fence() > read_fence);
    assert!(!late.is_finished(), "the late reader waits for the writer");
    let write_fence = written.fence();
    assert!(written.release().await.expect("release"));
    let read = tokio::time::timeout(Duration::from_secs(5), late).await.expect("in time").expect("task");
    assert!(read.expect("the read lease").fence() > write_fence);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_keeps_the_fence_and_lets_waiting_readers_in() {
    let server = Server::start();
    let lock = rw_lock(&server, "rw:down", 5_000).with_label("exporter").expect("a label");
    let mut lease = lock.write().await.expect("the write lease");
    let fence = lease.fence();
    let reader = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.read().await })
    };
    harness::poll("the reader to queue", Duration::from_secs(5), || server.waiters() == 1);
    let before = Instant::now();
    lock.downgrade(&mut lease).await.expect("a downgrade");
    assert_eq!(lease.fence(), fence);
    assert!(lease.valid_until() > before + Duration::from_secs(4), "a fresh ttl");
    let read = tokio::time::timeout(Duration::from_secs(5), reader).await.expect("in time").expect("task");
    let read = read.expect("the waiting reader");
    assert!(read.fence() > fence);
    let status = lock.status().await.expect("status").expect("state");
    assert!(status.is_shared());
    let fences: Vec<u64> = status.holders.iter().map(|h| h.fence).collect();
    assert_eq!(fences, [fence, read.fence()]);
    assert_eq!(status.holders[0].label.as_deref(), Some(&b"exporter"[..]));
    // A reader's lease is no write lease: the downgrade of another key is refused at once.
    let other = rw_lock(&server, "rw:other", 5_000);
    let mut not_mine = other.write().await.expect("a write lease");
    assert!(matches!(lock.downgrade(&mut not_mine).await, Err(Error::Config(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_lease_that_ended_is_not_downgraded() {
    let server = Server::start();
    let lock = rw_lock(&server, "rw:lost", 300);
    let mut lease = lock.write().await.expect("the write lease");
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Past its validity: refused locally, nothing sent.
    assert!(matches!(lock.downgrade(&mut lease).await, Err(Error::LeaseLost { .. })));
    let taken = lock.write().await.expect("another writer");
    assert!(taken.fence() > lease.fence());
    assert!(server.semaphore_status("rw:lost").is_some_and(|s| !s.is_shared()), "still the writer's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_lease_the_server_no_longer_holds_is_not_turned_into_a_new_read_lease() {
    let server = Server::start();
    let lock = rw_lock(&server, "rw:gone", 5_000);
    let mut lease = lock.write().await.expect("the write lease");
    // The key is deleted behind the holder's back: the server would grant a new lease.
    let _: i64 = server.cmd(&["DEL", "rw:gone"]).expect("DEL");
    assert!(matches!(lock.downgrade(&mut lease).await, Err(Error::LeaseLost { .. })));
    assert!(!lease.is_valid(), "the lease is over");
    let status = server.semaphore_status("rw:gone").expect("the refused grant's key");
    assert!(status.holders.is_empty(), "the new read lease was given back: {status:?}");
    assert!(status.fence > lease.fence());
}
