//! Keep-alive against a real server: a lease held far past its ttl, loss signalled on the
//! first refused or failed renewal, and `with_lease` dropping the work when the lease is lost.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{config, steal};
use fencedlock::{Error, Locker, LossCause};
use harness::{wait_released, LockStatus, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeps_a_450ms_lease_for_1800ms() {
    let server = Server::start();
    let locker = Locker::open(&server.url(), config(450, 120)).unwrap();
    let kept = locker.try_acquire("kept").await.unwrap().keep_alive();
    let fence = kept.fence();
    let started = Instant::now();
    let rival = locker.clone();
    while started.elapsed() < Duration::from_millis(1_800) {
        kept.ensure_valid().expect("kept alive");
        assert!(kept.remaining() > Duration::ZERO);
        assert!(server.lock_held("kept"));
        assert!(matches!(rival.try_acquire("kept").await, Err(Error::Contended { .. })));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!kept.cancellation().is_cancelled());
    assert_eq!(server.lock_status("kept").map(|st| st.fence), Some(fence), "same lease, same fence");
    assert!(kept.release().await.expect("release"), "still held at release time");
    assert!(!server.lock_held("kept"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stolen_lease_is_signalled_as_lost() {
    let server = Server::start();
    let locker = Locker::open(&server.url(), config(450, 120)).unwrap();
    let kept = locker.try_acquire("victim").await.unwrap().keep_alive();
    let handle = kept.handle();
    tokio::time::sleep(Duration::from_millis(150)).await;
    handle.ensure_valid().unwrap();

    steal(&server, "victim");
    let stolen_at = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(2), handle.lost())
        .await
        .expect("loss signalled within a renewal period");
    assert!(
        stolen_at.elapsed() < Duration::from_secs(1),
        "signalled at the next renewal (every 150 ms), not after the ttl; took {:?}",
        stolen_at.elapsed()
    );
    assert!(matches!(err, Error::LeaseLost { cause: LossCause::Refused, .. }), "{err:?}");
    assert!(kept.cancellation().is_cancelled());
    assert!(handle.is_lost());
    assert_eq!(handle.remaining(), Duration::ZERO);
    assert!(matches!(handle.ensure_valid(), Err(Error::LeaseLost { .. })));
    // Releasing a lost lease reports false and leaves the thief's lease alone.
    assert!(!kept.release().await.unwrap());
    assert!(server.lock_held("victim"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_makes_the_first_renewal_fail() {
    let server = Server::start();
    let locker = Locker::open(&server.url(), config(600, 80)).unwrap();
    let kept = locker.try_acquire("frozen").await.unwrap().keep_alive();
    server.pause();
    let err = tokio::time::timeout(Duration::from_secs(2), kept.lost()).await;
    server.resume();
    let err = err.expect("loss signalled");
    match err {
        Error::LeaseLost { cause: LossCause::RenewFailed(inner), .. } => {
            assert!(matches!(*inner, Error::Timeout { operation: "RENEW", .. }), "{inner:?}")
        }
        other => panic!("expected RenewFailed(Timeout), got {other:?}"),
    }
    drop(kept);
    wait_released(&[&server], "frozen", Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lease_runs_the_work_and_releases() {
    let server = Server::start();
    let locker = Locker::open(&server.url(), config(450, 120)).unwrap();
    let s = &server;
    let fence = locker
        .with_lease("job", |lease| async move {
            // Longer than the ttl: the keep-alive carries it.
            for _ in 0..8 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                lease.ensure_valid().expect("still held");
                assert!(s.lock_held("job"));
            }
            Ok::<_, Error>(lease.fence())
        })
        .await
        .expect("work completes");
    assert!(fence > 0);
    assert_eq!(
        server.lock_status("job"),
        Some(LockStatus { fence, held: false, remaining: None, label: None }),
        "released afterwards"
    );
}

/// Fallible work: its own error comes back as is (one `?` for it and the lock's), and the
/// lease is released all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lease_returns_the_works_error_and_releases() {
    #[derive(Debug)]
    enum JobError {
        Lock(Error),
        Failed(u64),
    }
    impl From<Error> for JobError {
        fn from(e: Error) -> Self {
            JobError::Lock(e)
        }
    }
    let server = Server::start();
    let locker = Locker::open(&server.url(), config(450, 120)).unwrap();
    let result: Result<(), JobError> =
        locker.with_lease("failing", |lease| async move { Err(JobError::Failed(lease.fence())) }).await;
    assert!(matches!(result, Err(JobError::Failed(fence)) if fence > 0), "{result:?}");
    wait_released(&[&server], "failing", Duration::from_secs(2)).await;
    // The lock's own error converts into the work's type.
    let _held = locker.try_acquire("taken").await.unwrap();
    let once =
        fencedlock::LockConfig::builder().ttl(Duration::from_millis(450)).max_wait(Duration::ZERO).build();
    let busy = Locker::open(&server.url(), once.unwrap()).unwrap();
    let result: Result<(), JobError> = busy.with_lease("taken", |_| async { Ok(()) }).await;
    assert!(matches!(result, Err(JobError::Lock(Error::Contended { .. }))), "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lease_drops_the_work_when_the_lease_is_lost() {
    let server = Server::start();
    let locker = Locker::open(&server.url(), config(450, 120)).unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let steps = Arc::new(AtomicU32::new(0));

    struct SetOnDrop(Arc<AtomicBool>);
    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    let thief = {
        let url = server.url();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let s = harness::redis::Client::open(url).unwrap();
            let mut c = s.get_multiplexed_async_connection().await.unwrap();
            let _: i64 = harness::redis::cmd("DEL").arg("work").query_async(&mut c).await.unwrap();
        })
    };
    let (d, st) = (dropped.clone(), steps.clone());
    let started = Instant::now();
    let result = locker
        .with_lease("work", |lease| async move {
            let _guard = SetOnDrop(d);
            // Work that would run for 10 s if nobody stopped it.
            for _ in 0..200 {
                st.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok::<_, Error>(lease.fence())
        })
        .await;
    thief.await.unwrap();
    assert!(matches!(result, Err(Error::LeaseLost { cause: LossCause::Refused, .. })), "{result:?}");
    assert!(dropped.load(Ordering::SeqCst), "the work future was dropped");
    assert!(started.elapsed() < Duration::from_secs(2), "stopped promptly: {:?}", started.elapsed());
    let at_stop = steps.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(steps.load(Ordering::SeqCst), at_stop, "no work after the loss");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_kept_lease_stops_renewing_and_releases() {
    let server = Server::start();
    let locker = Locker::open(&server.url(), config(450, 120)).unwrap();
    let kept = locker.try_acquire("drop-kept").await.unwrap().keep_alive();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(server.lock_held("drop-kept"), "renewed past the ttl");
    drop(kept);
    wait_released(&[&server], "drop-kept", Duration::from_secs(2)).await;

    // stop() hands the lease back, still held; it is no longer renewed.
    let kept = locker.try_acquire("stopped").await.unwrap().keep_alive();
    let lease = kept.stop().await.unwrap();
    lease.ensure_valid().unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(lease.ensure_valid().is_err(), "no renewals after stop()");
    assert!(!server.lock_held("stopped"), "expired on the server too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_started_late_renews_at_once() {
    let server = Server::start();
    let locker = Locker::open(&server.url(), config(400, 100)).unwrap();
    let lease = locker.try_acquire("late").await.unwrap();
    // 300 ms of the 400 ms are gone: waiting another ttl/3 would let the lease expire.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let kept = lease.keep_alive();
    tokio::time::sleep(Duration::from_millis(250)).await;
    kept.ensure_valid().expect("renewed immediately, not after a full interval");
    assert!(server.lock_held("late"));
    assert!(kept.release().await.unwrap());
}
