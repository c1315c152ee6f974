//! The client and the CLI behind real Sentinels (`redis+sentinel://`): after the primary is
//! killed, the same process is granted leases by the promoted replica within seconds, with
//! fences above every earlier one; a grant confirmed by a replica before the failover is still
//! held, and renewed, on the new primary; a planned switchover (the primary demoted while it
//! runs) is followed without an error; `rediss+sentinel://` reaches TLS sentinels and a TLS
//! primary, and follows a kill there too.

use std::time::{Duration, Instant};

use fencedlock::redis::ErrorKind;
use fencedlock::{Error, Lease, LockConfig, Locker, Redlock, Tls};
use harness::{
    poll, wait_replica_online, Certs, ClientAuth, Flavor, Sentinels, Server, ServerBuilder,
    SENTINEL_FAILOVER_LIMIT, SYNC_TIMEOUT,
};

use crate::support::runtime;

const TTL: Duration = Duration::from_secs(30);

fn config(confirm: usize) -> LockConfig {
    builder(confirm).build().expect("config")
}

fn builder(confirm: usize) -> fencedlock::LockConfigBuilder {
    LockConfig::builder()
        .ttl(TTL)
        .node_timeout(Duration::from_millis(500))
        .max_wait(Duration::ZERO)
        .confirm_replicas(confirm)
        .confirm_timeout(Duration::from_millis(1000))
}

/// A primary with two replicas (AOF, so a restart loses nothing) and three Sentinels that
/// know all of them.
fn group() -> (Server, Vec<Server>, Sentinels) {
    let primary = Server::builder().arg("appendonly", "yes").start();
    let replicas: Vec<Server> = (0..2)
        .map(|_| {
            let replica = primary.replica_builder().arg("appendonly", "yes").start();
            wait_replica_online(&primary, &replica);
            replica
        })
        .collect();
    let sentinels = Sentinels::start(&primary);
    sentinels.wait_ready(2);
    (primary, replicas, sentinels)
}

/// Tries `try_acquire` on fresh keys until one is granted or `limit` runs out: the first grant
/// after a failover, and how long it took from `since`.
fn first_grant(
    rt: &tokio::runtime::Runtime,
    locker: &Locker,
    since: Instant,
    limit: Duration,
) -> (Lease, Duration) {
    for attempt in 0.. {
        match rt.block_on(locker.try_acquire(&format!("sc:after:{attempt}"))) {
            Ok(lease) => return (lease, since.elapsed()),
            Err(err) => {
                assert!(since.elapsed() < limit, "no grant {limit:?} after the kill; last error: {err}")
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    unreachable!("the loop returns or panics")
}

/// The new primary, found among `replicas` by port, with the harness's cached connection
/// renewed: Sentinel's `CLIENT KILL` on the nodes it reconfigures closed it.
fn promoted(replicas: &[Server], port: u16) -> &Server {
    let promoted = replicas.iter().find(|r| r.port() == port).expect("a replica was promoted");
    let _ = promoted.cmd::<String>(&["PING"]);
    promoted
}

#[test]
fn after_a_kill_the_same_locker_is_granted_by_the_promoted_replica() {
    let rt = runtime();
    let (mut primary, replicas, sentinels) = group();
    let locker = Locker::open(&sentinels.url(), config(1)).expect("a Sentinel URL");
    // Confirmed grants: each is on a replica before it is handed out.
    let before: Vec<Lease> = (0..3)
        .map(|i| rt.block_on(locker.try_acquire(&format!("sc:before:{i}"))).expect("confirmed grant"))
        .collect();
    let highest = before.iter().map(Lease::fence).max().expect("three leases");

    let old = primary.port();
    let killed = Instant::now();
    primary.kill9();
    let (lease, took) = first_grant(&rt, &locker, killed, SENTINEL_FAILOVER_LIMIT);
    let new = sentinels.wait_primary_change(old, SENTINEL_FAILOVER_LIMIT);
    eprintln!("kill -9 to the first grant by the promoted replica: {took:?}");
    let promoted = promoted(&replicas, new);
    assert!(promoted.lock_held(lease.key()), "granted by the new primary");
    assert!(lease.fence() > highest, "fences keep rising: {} after {highest}", lease.fence());

    // Every confirmed lease survived the failover, and its holder renews it there.
    for mut lease in before {
        let status = promoted.lock_status(lease.key());
        assert!(
            status.as_ref().is_some_and(|s| s.held && s.fence == lease.fence()),
            "{}: {status:?}",
            lease.key()
        );
        rt.block_on(lease.renew()).expect("renewed on the new primary");
        rt.block_on(lease.release()).expect("released on the new primary");
    }
    rt.block_on(lease.release()).expect("released");
}

#[test]
fn a_planned_switchover_is_followed_without_an_error() {
    let rt = runtime();
    let (primary, replicas, sentinels) = group();
    let locker = Locker::open(&sentinels.url(), config(0)).expect("a Sentinel URL");
    let first = rt.block_on(locker.try_acquire("sw:first")).expect("granted");
    assert!(primary.lock_held("sw:first"));

    let old = primary.port();
    sentinels.failover();
    let new = sentinels.wait_primary_change(old, SENTINEL_FAILOVER_LIMIT);
    sentinels.wait_converted_to_replica(old, SENTINEL_FAILOVER_LIMIT);
    // The locker's connection went to the old primary, now a replica (Sentinel closed it
    // when it demoted the node): the request goes to the one the Sentinels name now, in the
    // same call. A client that reconnected to the old address would get READONLY here.
    let next = rt.block_on(locker.try_acquire("sw:next")).expect("granted by the new primary at once");
    let promoted = promoted(&replicas, new);
    assert!(promoted.lock_held("sw:next"));
    assert!(next.fence() > first.fence());
    rt.block_on(first.release()).expect("released on the new primary");
    assert!(!promoted.lock_held("sw:first"));
}

#[test]
fn a_redlock_master_may_be_a_sentinel_group() {
    let rt = runtime();
    let (_primary, _replicas, sentinels) = group();
    let plain: Vec<Server> = (0..2).map(|_| Server::start()).collect();
    let urls = [sentinels.url(), plain[0].url(), plain[1].url()];
    let redlock = Redlock::open(&urls, config(0)).expect("a Redlock with a Sentinel master");
    let lease = rt.block_on(redlock.try_acquire("rl:s")).expect("a majority");
    rt.block_on(lease.release()).expect("released");
}

/// A server of the flavor with TLS in the suite, reached over TLS and replicating over it
/// (so the addresses the sentinels learn are TLS ports), with AOF.
fn tls_server(certs: &Certs) -> ServerBuilder {
    Server::builder()
        .flavor(Flavor::Redis)
        .tls(certs, ClientAuth::None)
        .arg("tls-replication", "yes")
        .arg("appendonly", "yes")
}

#[test]
fn tls_sentinels_name_a_tls_primary_and_are_followed_across_a_kill() {
    let rt = runtime();
    let certs = Certs::generate();
    let mut primary = tls_server(&certs).start();
    let replicas: Vec<Server> = (0..2)
        .map(|_| {
            let replica = tls_server(&certs)
                .args("replicaof", ["127.0.0.1".into(), primary.tls_port().to_string()])
                .start();
            poll("a TLS replica's link up", SYNC_TIMEOUT, || {
                replica.info_field("replication", "master_link_status").as_deref() == Some("up")
            });
            replica
        })
        .collect();
    let sentinels = Sentinels::start_tls(&primary, &certs);
    sentinels.wait_ready(2);
    let trusting = |ca: &std::path::Path| {
        let tls = Tls::from_files(Some(ca), None).expect("certificate files");
        Locker::open(&sentinels.tls_url(), builder(0).tls(tls).build().expect("config")).expect("URL")
    };

    // Sentinels whose certificate does not verify: a configuration error, never an outage.
    let err = rt.block_on(trusting(&certs.other_ca()).try_acquire("st:k")).expect_err("untrusted");
    match &err {
        Error::Server { source, .. } => assert_eq!(source.kind(), ErrorKind::InvalidClientConfig, "{err}"),
        other => panic!("expected a TLS configuration error, got {other:?}"),
    }
    assert!(!err.is_unavailable(), "{err}");

    let locker = trusting(&certs.ca());
    let before = rt.block_on(locker.try_acquire("st:before")).expect("granted over TLS");
    assert!(primary.lock_held("st:before"), "granted by the primary the sentinels name");

    let killed = Instant::now();
    primary.kill9();
    let (lease, took) = first_grant(&rt, &locker, killed, SENTINEL_FAILOVER_LIMIT);
    eprintln!("TLS: kill -9 to the first grant by the promoted replica: {took:?}");
    // Sentinel's CLIENT KILL on the nodes it reconfigured closed the harness's connections.
    let granted_by_a_replica = replicas.iter().any(|r| {
        let _ = r.cmd::<String>(&["PING"]);
        r.lock_held(lease.key())
    });
    assert!(granted_by_a_replica, "granted by a promoted replica, reached over TLS");
    assert!(lease.fence() > before.fence(), "fences keep rising: {} after {}", lease.fence(), before.fence());
    rt.block_on(lease.release()).expect("released");
}
