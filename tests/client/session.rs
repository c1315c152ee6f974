//! Sessions: many leases kept alive by one pipelined keep-alive per server, on both engines
//! and over Redlock; lost together when the keep-alive fails, a refused lease lost alone.

use std::time::Duration;

use fencedlock::{Error, Locker, Redlock};
use fencedlock_protocol::command::RENEW;
use harness::Server;

use crate::support::{calls, config};

/// Both engines: the module, and the Functions library on a server without it.
fn servers() -> [(&'static str, Server); 2] {
    [("module", Server::start()), ("functions", Server::builder().without_module().start())]
}

fn stat(server: &Server, section: &str, field: &str) -> u64 {
    server.info_field(section, field).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// 50 leases on a 1.5 s ttl stay valid for 3 s: renewed every 500 ms, each round one
/// pipeline, so the server reads far fewer requests than it renews leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_keep_alive_renews_every_lease_in_one_round_trip() {
    for (engine, server) in servers() {
        let locker = Locker::open(&server.url(), config(1_500, 1_000)).expect("locker");
        let session = locker.session();
        let mut leases = Vec::new();
        for i in 0..50 {
            leases.push(session.try_acquire(&format!("s:{i}")).await.expect("granted"));
        }
        assert_eq!(session.len(), 50);
        let renew = if engine == "module" { RENEW.name } else { "fcall" };
        let (reads, renewals) = (stat(&server, "stats", "total_reads_processed"), calls(&server, renew));
        tokio::time::sleep(Duration::from_millis(3_000)).await;
        let (reads, renewals) =
            (stat(&server, "stats", "total_reads_processed") - reads, calls(&server, renew) - renewals);
        for lease in &leases {
            lease.ensure_valid().unwrap_or_else(|e| panic!("{engine}: {} lost: {e}", lease.key()));
        }
        // About six rounds of 50 renewals; a round is one read (plus the INFO calls here).
        assert!(renewals >= 50 * 3, "{engine}: {renewals} renewals");
        assert!(reads * 10 <= renewals, "{engine}: {reads} reads for {renewals} renewals");
        assert_eq!(session.close().await, 50, "{engine}: every lease released while held");
        assert!(leases.iter().all(|l| l.ensure_valid().is_err()), "{engine}: closed leases are lost");
    }
}

/// The server stops answering for longer than the ttl: the session is lost once, every
/// lease reports it, and nothing is renewed after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_keep_alive_loses_every_lease_together() {
    let server = Server::start();
    let locker = Locker::open(&server.url(), config(600, 200)).expect("locker");
    let session = locker.session();
    let a = session.try_acquire("t:a").await.expect("granted");
    let b = session.try_acquire("t:b").await.expect("granted");
    let (ha, hb) = (a.handle(), b.handle());
    server.pause();
    let lost = tokio::time::timeout(Duration::from_secs(2), session.lost()).await;
    server.resume();
    let lost = lost.expect("the session's loss is signalled within the ttl");
    assert!(lost.is_lease_lost(), "{lost:?}");
    assert!(ha.is_lost() && hb.is_lost(), "every lease is lost with the session");
    assert!(
        matches!(session.try_acquire("t:c").await, Err(Error::LeaseLost { .. })),
        "a lost session takes no lease"
    );
    assert!(session.is_empty());
    // Released in the background (or expired): the keys are free again.
    let other = Locker::open(&server.url(), config(600, 500)).expect("locker");
    for key in ["t:a", "t:b"] {
        let mut granted = None;
        for _ in 0..50 {
            if let Ok(lease) = other.try_acquire(key).await {
                granted = Some(lease);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(granted.is_some(), "{key} never freed");
    }
}

/// A lease deleted behind the session's back is lost alone; the session and its other
/// leases carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_lease_is_lost_alone() {
    let server = Server::start();
    let locker = Locker::open(&server.url(), config(1_500, 1_000)).expect("locker");
    let session = locker.session();
    let kept = session.try_acquire("r:kept").await.expect("granted");
    let taken = session.try_acquire("r:taken").await.expect("granted");
    let handle = taken.handle();
    let _: i64 = server.cmd(&["DEL", "r:taken"]).expect("DEL");
    let lost =
        tokio::time::timeout(Duration::from_secs(3), handle.lost()).await.expect("the deleted lease is lost");
    assert!(lost.is_lease_lost(), "{lost:?}");
    // Past the kept lease's ttl: renewed meanwhile.
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    kept.ensure_valid().expect("the other lease is still kept alive");
    session.ensure_valid().expect("the session is not lost");
    assert_eq!(session.len(), 1);
    assert!(matches!(taken.release().await, Err(Error::LeaseLost { .. })));
    assert!(kept.release().await.expect("released"));
    assert!(!server.lock_held("r:kept"));
}

/// Over three masters: each round is one pipeline per master, each lease renewed by majority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_session_renews_by_majority() {
    let servers = Server::start_many(3);
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let redlock = Redlock::open(&urls, config(1_500, 1_000)).expect("redlock");
    let session = redlock.session();
    let mut leases = Vec::new();
    for i in 0..10 {
        leases.push(session.try_acquire(&format!("m:{i}")).await.expect("granted"));
    }
    let reads: Vec<u64> = servers.iter().map(|s| stat(s, "stats", "total_reads_processed")).collect();
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    for lease in &leases {
        lease.ensure_valid().expect("renewed by a majority");
    }
    for (server, before) in servers.iter().zip(reads) {
        let read = stat(server, "stats", "total_reads_processed") - before;
        // About four rounds of ten renewals each, plus the INFO calls: not one read a lease.
        assert!(read <= 10, "{}: {read} reads in 2 s", server.addr());
    }
    assert_eq!(session.close().await, 10);
}
