//! Periodic jobs (`Locker::schedule`, `Due::record`, `Locker::run_at_most_every`) on both
//! engines: due once per period, a stale holder's record refused, failed runs not counted,
//! records fencedlock did not write refused, and no periodic job over several masters.

use std::time::Duration;

use fencedlock::{Error, LockConfig, Locker, Periodic, Redlock, Schedule};
use fencedlock_protocol::periodic::{record_key, FENCE, STARTED_MS};
use harness::Server;

use crate::support::config;

const HOUR: Duration = Duration::from_secs(3600);

/// Both engines: the module, and the Functions library on a server without it.
fn servers() -> [(&'static str, Server); 2] {
    [("module", Server::start()), ("functions", Server::builder().without_module().start())]
}

fn labelled(label: &str) -> LockConfig {
    LockConfig::builder()
        .ttl(Duration::from_secs(5))
        .node_timeout(Duration::from_millis(500))
        .label(label)
        .build()
        .expect("valid config")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_run_makes_the_job_not_due_for_a_period() {
    for (engine, server) in servers() {
        let locker = Locker::open(&server.url(), labelled("host-a")).expect("locker");
        assert_eq!(locker.last_run("report").await.expect("read"), None, "{engine}");
        let first = locker.try_acquire("report").await.expect("granted");
        let first_fence = first.fence();
        let Schedule::Due(due) = locker.schedule(&first, HOUR).await.expect("schedule") else {
            panic!("{engine}: a job without a run on record is due");
        };
        assert!(due.previous().is_none());
        assert!(due.record(0).await.expect("recorded"), "{engine}");
        first.release().await.expect("released");

        let second = locker.try_acquire("report").await.expect("granted");
        match locker.schedule(&second, HOUR).await.expect("schedule") {
            Schedule::NotDue { last, due_in } => {
                assert_eq!(last.fence, first_fence, "{engine}");
                assert_eq!(last.label.as_deref(), Some(&b"host-a"[..]), "{engine}");
                assert!(last.age < Duration::from_secs(5), "{engine}: {last:?}");
                assert!(due_in > HOUR - Duration::from_secs(5) && due_in <= HOUR, "{engine}: {due_in:?}");
            }
            Schedule::Due(_) => panic!("{engine}: due again right after a recorded run"),
        }
        // A shorter period measured from the same run is over already.
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(matches!(locker.schedule(&second, Duration::from_millis(50)).await, Ok(Schedule::Due(_))));
        second.release().await.expect("released");
    }
}

/// A holder paused past its lease records after its successor ran and recorded: refused,
/// and the successor's run stays on record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_cannot_overwrite_a_newer_run() {
    for (engine, server) in servers() {
        let locker = Locker::open(&server.url(), config(300, 500)).expect("locker");
        let stale = locker.try_acquire("sweep").await.expect("granted");
        let Ok(Schedule::Due(stale_due)) = locker.schedule(&stale, HOUR).await else {
            panic!("{engine}: due");
        };
        std::mem::forget(stale);
        tokio::time::sleep(Duration::from_millis(400)).await;
        let newer = locker.try_acquire("sweep").await.expect("granted after the expiry");
        let Ok(Schedule::Due(newer_due)) = locker.schedule(&newer, HOUR).await else {
            panic!("{engine}: still due: the stale run was never recorded");
        };
        assert!(newer_due.record(0).await.expect("recorded"), "{engine}");
        assert!(!stale_due.record(0).await.expect("answered"), "{engine}: a stale record was written");
        let last = locker.last_run("sweep").await.expect("read").expect("a run");
        assert_eq!(last.fence, newer.fence(), "{engine}");
        newer.release().await.expect("released");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_at_most_every_runs_records_and_skips() {
    for (engine, server) in servers() {
        let locker = Locker::open(&server.url(), config(5_000, 500)).expect("locker");
        // A failed run is not counted: the next call runs the job again.
        let failed = locker
            .run_at_most_every("sync", HOUR, |_lease| async {
                Err::<(), Error>(Error::Config("the job failed".into()))
            })
            .await;
        assert!(matches!(failed, Err(Error::Config(_))), "{engine}: {failed:?}");
        let ran = locker
            .run_at_most_every("sync", HOUR, |lease| async move { Ok::<_, Error>(lease.fence()) })
            .await;
        let Ok(Periodic::Ran(fence)) = ran else { panic!("{engine}: {ran:?}") };
        let again = locker.run_at_most_every("sync", HOUR, |_| async { Ok::<_, Error>(0) }).await;
        let Ok(Periodic::NotDue { last, .. }) = again else { panic!("{engine}: {again:?}") };
        assert_eq!(last.fence, fence, "{engine}");

        // Each call released its lease: another is granted at once.
        let holder = locker.try_acquire("sync").await.expect("granted");
        let busy = locker.run_at_most_every("sync", HOUR, |_| async { Ok::<_, Error>(0) }).await;
        assert!(matches!(busy, Ok(Periodic::Busy)), "{engine}: {busy:?}");
        holder.release().await.expect("released");
    }
}

/// A record fencedlock did not write says nothing about when the job ran: the job is not
/// run, with an error that names the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_fencedlock_did_not_write_is_refused() {
    let server = Server::start();
    let locker = Locker::open(&server.url(), config(5_000, 500)).expect("locker");
    let record = record_key(b"odd");
    let _: i64 = server
        .cmd(&[&b"HSET"[..], &record, STARTED_MS.as_bytes(), b"yesterday", FENCE.as_bytes(), b"1"])
        .expect("HSET");
    let lease = locker.try_acquire("odd").await.expect("granted");
    let refused = locker.schedule(&lease, HOUR).await;
    assert!(matches!(&refused, Err(Error::BadRecord { key, .. }) if key == "odd"), "{refused:?}");
    let _: i64 = server.cmd(&[&b"DEL"[..], &record]).expect("DEL");
    let _: String = server.cmd(&[&b"SET"[..], &record, b"a string"]).expect("SET");
    let wrong_type = locker.schedule(&lease, HOUR).await;
    assert!(matches!(&wrong_type, Err(Error::Server { .. })), "{wrong_type:?}");
    assert!(matches!(locker.schedule(&lease, Duration::ZERO).await, Err(Error::Config(_))));
    lease.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_jobs_need_one_servers_clock() {
    let servers = Server::start_many(3);
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let redlock = Redlock::open(&urls, config(5_000, 500)).expect("redlock");
    assert!(matches!(redlock.last_run("k").await, Err(Error::Config(_))));
    let ran = redlock.run_at_most_every("k", HOUR, |_| async { Ok::<_, Error>(()) }).await;
    assert!(matches!(ran, Err(Error::Config(_))), "{ran:?}");
    assert!(servers.iter().all(|s| !s.lock_held("k")), "nothing was taken");
}
