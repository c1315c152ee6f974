//! `rediss://` servers: a private CA, mutual TLS, and every way the trust can be wrong, which
//! must end in a configuration error (never an outage a fail-open policy would run through,
//! never a fallback to plaintext). Redis with TLS on a second port, certificates by openssl.

use std::time::{Duration, Instant};

use fencedlock::redis::ErrorKind;
use fencedlock::{Error, LockConfig, Locker, Redlock, Tls};
use harness::{Certs, ClientAuth, Cluster, Flavor, Server};

use crate::support::{hand_over, waiter};

/// A TLS server of the flavor that has TLS in the suite (see [`harness::ServerBuilder::tls`]).
fn tls_server(certs: &Certs, auth: ClientAuth) -> Server {
    Server::builder().flavor(Flavor::Redis).tls(certs, auth).start()
}

/// A config trusting `ca`, presenting `client` if given, waiting up to 10 s for a busy lock.
/// The node timeout is generous: a handshake on a loaded machine must not read as a timeout.
fn config(ca: &std::path::Path, client: Option<(std::path::PathBuf, std::path::PathBuf)>) -> LockConfig {
    let client = client.as_ref().map(|(cert, key)| (cert.as_path(), key.as_path()));
    LockConfig::builder()
        .ttl(Duration::from_secs(5))
        .node_timeout(Duration::from_secs(3))
        .max_wait(Duration::from_secs(10))
        .tls(Tls::from_files(Some(ca), client).expect("certificate files"))
        .build()
        .expect("config")
}

/// A refusal of the TLS handshake: a configuration error, not retried, not an outage, and
/// returned at once even by a waiting `acquire`.
async fn assert_handshake_refused(what: &str, locker: &Locker) {
    let started = Instant::now();
    for result in [locker.try_acquire("k").await, locker.acquire("k").await] {
        let err = result.expect_err("the handshake must fail");
        match &err {
            Error::Server { source, .. } => {
                assert_eq!(source.kind(), ErrorKind::InvalidClientConfig, "{err}")
            }
            other => panic!("{what}: expected a TLS configuration error, got {other:?}"),
        }
        assert!(!err.is_unavailable(), "a trust failure is not an outage: {err}");
        assert!(!err.is_retryable(), "{err}");
        assert!(err.to_string().contains("TLS"), "{err}");
    }
    // Well below the 10 s max_wait: the refusal is not retried.
    assert!(started.elapsed() < Duration::from_secs(6), "waited out max_wait: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_over_tls_with_a_private_ca() {
    let certs = Certs::generate();
    let server = tls_server(&certs, ClientAuth::None);
    let locker = Locker::open(&server.tls_url(), config(&certs.ca(), None)).expect("locker");
    let lease = locker.try_acquire("tls:k").await.expect("granted over TLS");
    assert!(server.lock_held("tls:k"), "the grant is on the server");
    // The server's queue works over TLS too: a waiter is handed the lease at the release.
    let waiter = waiter(&locker, "tls:k");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let next = hand_over(lease, waiter).await;
    next.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_over_tls_masters() {
    let certs = Certs::generate();
    let servers: Vec<Server> = (0..3).map(|_| tls_server(&certs, ClientAuth::None)).collect();
    let urls: Vec<String> = servers.iter().map(Server::tls_url).collect();
    let redlock = Redlock::open(&urls, config(&certs.ca(), None)).expect("redlock");
    let lease = redlock.try_acquire("tls:r").await.expect("a majority over TLS");
    // A round ends once a majority granted; the last master may still be answering.
    assert!(servers.iter().filter(|s| s.lock_held("tls:r")).count() >= 2);
    lease.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_takes_a_certificate_of_the_servers_ca_only() {
    let certs = Certs::generate();
    let server = tls_server(&certs, ClientAuth::Required);
    let url = server.tls_url();
    let mutual = Locker::open(&url, config(&certs.ca(), Some(certs.client()))).expect("locker");
    mutual.try_acquire("mtls:k").await.expect("granted with the client certificate").release().await.unwrap();

    let anonymous = Locker::open(&url, config(&certs.ca(), None)).expect("locker");
    assert_handshake_refused("no client certificate", &anonymous).await;
    let stranger = Locker::open(&url, config(&certs.ca(), Some(certs.other_client()))).expect("locker");
    assert_handshake_refused("a client certificate of another CA", &stranger).await;
    assert!(!server.lock_held("k"), "nothing was granted to a refused client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_that_does_not_verify_is_a_configuration_error() {
    let certs = Certs::generate();
    let server = tls_server(&certs, ClientAuth::None);
    // Another CA: the server's certificate is not trusted.
    let wrong_ca = Locker::open(&server.tls_url(), config(&certs.other_ca(), None)).expect("locker");
    assert_handshake_refused("another CA", &wrong_ca).await;
    // The system's CAs do not know the test CA either.
    let system = Locker::open(
        &server.tls_url(),
        LockConfig::builder()
            .node_timeout(Duration::from_secs(3))
            .max_wait(Duration::from_secs(10))
            .build()
            .unwrap(),
    )
    .expect("locker");
    assert_handshake_refused("the system CAs", &system).await;
    // TLS spoken to the plaintext port: the server never answers the handshake (it reads
    // the ClientHello as a command without its end), so it times out; never plaintext.
    let plain_port = server.url().replacen("redis://", "rediss://", 1);
    let confused = Locker::open(&plain_port, config(&certs.ca(), None)).expect("locker");
    let result = confused.try_acquire("k").await;
    assert!(matches!(result, Err(Error::Timeout { .. })), "{result:?}");
    assert!(!server.lock_held("k"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_options_with_a_plaintext_url_are_refused_before_connecting() {
    let certs = Certs::generate();
    for result in [
        Locker::open("redis://127.0.0.1:1", config(&certs.ca(), None)).map(drop),
        Locker::open_cluster(&["redis://127.0.0.1:1"], config(&certs.ca(), None)).map(drop),
        Redlock::open(
            &["rediss://127.0.0.1:1", "redis://127.0.0.1:2", "rediss://127.0.0.1:3"],
            config(&certs.ca(), None),
        )
        .map(drop),
    ] {
        assert!(matches!(result, Err(Error::Config(_))), "{result:?}");
    }
    let missing = Tls::from_files(Some(&certs.dir().join("absent.pem")), None);
    assert!(matches!(missing, Err(Error::Config(_))), "{missing:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_tls_routes_every_key_to_its_slots_primary() {
    let certs = Certs::generate();
    let cluster = Cluster::builder().tls(&certs).start();
    let locker = Locker::open_cluster(&cluster.tls_urls(), config(&certs.ca(), None)).expect("locker");
    let mut owners = std::collections::HashSet::new();
    for i in 0..12 {
        let key = format!("tls:cluster:{i}");
        let lease = locker.try_acquire(&key).await.unwrap_or_else(|e| panic!("{key}: {e}"));
        let owner = cluster.slot_owner(cluster.key_slot(&key));
        assert!(cluster.nodes()[owner].lock_held(&key), "{key} held on its slot's primary");
        owners.insert(owner);
        lease.release().await.expect("released");
    }
    assert_eq!(owners.len(), 3, "keys on every primary");
    let wrong_ca =
        Locker::open_cluster(&cluster.tls_urls(), config(&certs.other_ca(), None)).expect("locker");
    assert_handshake_refused("a cluster with another CA", &wrong_ca).await;
}
