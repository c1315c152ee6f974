//! The declared failure policy against real servers: a stopped server, a killed one, one
//! loading its dataset, one in the module's restart grace, and Redlock with a majority down
//! or refusing. Fail closed returns the error (unavailable by kind); fail open hands back an
//! explicit unlocked outcome with no fence; a busy lock is never "unlocked".

use std::time::Duration;

use crate::support::{blocking, restarted_in_grace, wait_until};
use fencedlock::{Acquisition, Error, LockConfig, Locker, OnUnavailable, Redlock};
use harness::Server;

const BOTH: [OnUnavailable; 2] = [OnUnavailable::FailClosed, OnUnavailable::FailOpen];

fn config(policy: OnUnavailable) -> LockConfig {
    LockConfig::builder()
        .ttl(Duration::from_secs(2))
        .node_timeout(Duration::from_millis(200))
        .backoff(Duration::from_millis(5), Duration::from_millis(20))
        .max_wait(Duration::from_millis(150))
        .on_unavailable(policy)
        .build()
        .expect("valid test config")
}

/// Asserts what `result` must be under `policy` when the service cannot answer.
fn expect_unavailable(policy: OnUnavailable, result: Result<Acquisition, Error>, what: &str) {
    match (policy, result) {
        (OnUnavailable::FailClosed, Err(err)) => assert!(err.is_unavailable(), "{what}: {err:?}"),
        (OnUnavailable::FailOpen, Ok(acq @ Acquisition::Unlocked(_))) => {
            assert!(!acq.is_locked() && acq.fence().is_none() && acq.lease().is_none(), "{what}");
            assert!(acq.unavailable().is_some_and(Error::is_unavailable), "{what}: {acq:?}");
        }
        (policy, other) => panic!("{what}, {policy:?}: expected unavailable, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_fails_closed_or_open_as_declared() {
    let mut server = Server::start();
    let url = server.url();
    blocking(move || server.stop()).await;
    for policy in BOTH {
        let locker = Locker::open(&url, config(policy)).expect("locker");
        expect_unavailable(policy, locker.acquire_with_policy("job").await, "nothing listening");
        // The plain calls are unchanged: the error, whatever the policy.
        let err = locker.acquire("job").await.expect_err("nobody answers");
        assert!(err.is_unavailable(), "{err:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_breaks_the_connection_and_is_unavailable() {
    let mut server = Server::start();
    let lockers: Vec<Locker> =
        BOTH.iter().map(|&p| Locker::open(&server.url(), config(p)).expect("locker")).collect();
    for locker in &lockers {
        let acq = locker.acquire_with_policy(&format!("before:{:?}", locker.config().on_unavailable())).await;
        let acq = acq.expect("the server is up");
        assert!(acq.is_locked() && acq.fence().is_some_and(|f| f > 0), "{acq:?}");
        drop(acq.into_lease().map(|l| l.detach()));
    }
    let server = blocking(move || {
        server.kill9();
        server
    })
    .await;
    for (policy, locker) in BOTH.iter().zip(&lockers) {
        expect_unavailable(*policy, locker.acquire_with_policy("after").await, "killed mid-session");
    }
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loading_server_is_unavailable() {
    let server = Server::start();
    // 3000 keys at 1 ms each: DEBUG RELOAD loads for about 3 s and answers LOADING meanwhile.
    let _: String = server.cmd(&["DEBUG", "POPULATE", "3000"]).expect("DEBUG POPULATE");
    server.config_set("key-load-delay", "1000");
    server.config_set("loading-process-events-interval-bytes", "1024");
    let mut conn = server.conn();
    let reload =
        std::thread::spawn(move || fencedlock::redis::cmd("DEBUG").arg("RELOAD").query::<String>(&mut conn));
    wait_until("the server to load", Duration::from_secs(5), || {
        server.info_field("persistence", "loading").as_deref() == Some("1")
    })
    .await;
    for policy in BOTH {
        let locker = Locker::open(&server.url(), config(policy)).expect("locker");
        let result = locker.acquire_with_policy("job").await;
        if let Err(Error::Server { source, .. }) | Ok(Acquisition::Unlocked(Error::Server { source, .. })) =
            &result
        {
            assert_eq!(
                source.kind(),
                fencedlock::redis::ErrorKind::Server(fencedlock::redis::ServerErrorKind::BusyLoading),
                "{source}"
            );
        } else {
            panic!("expected LOADING, got {result:?}");
        }
        expect_unavailable(policy, result, "loading");
    }
    let reloaded = blocking(move || reload.join()).await.expect("reload thread");
    assert_eq!(reloaded.expect("DEBUG RELOAD"), "OK");
    server.config_set("key-load-delay", "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_restart_grace_is_unavailable() {
    let server = restarted_in_grace("3000").await;
    for policy in BOTH {
        let locker = Locker::open(&server.url(), config(policy)).expect("locker");
        let result = locker.acquire_with_policy("job").await;
        let err = match &result {
            Err(err) | Ok(Acquisition::Unlocked(err)) => err,
            Ok(Acquisition::Locked(_)) => panic!("granted during the restart grace"),
        };
        assert_eq!(err.reply_error(), Some(fencedlock::ReplyError::RestartGrace), "{err:?}");
        expect_unavailable(policy, result, "restart grace");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_lock_is_never_unlocked() {
    let server = Server::start();
    let holder = Locker::open(&server.url(), config(OnUnavailable::FailOpen)).expect("locker");
    let lease = holder.acquire("job").await.expect("free");
    for policy in BOTH {
        let locker = Locker::open(&server.url(), config(policy)).expect("locker");
        match locker.acquire_with_policy("job").await {
            Err(err @ Error::Contended { .. }) => assert!(!err.is_unavailable()),
            other => panic!("{policy:?}: expected Contended, got {other:?}"),
        }
    }
    assert!(lease.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_majority_down_is_unavailable_majority_refusing_is_contended() {
    let servers = Server::start_many(3);
    let all: Vec<String> = servers.iter().map(Server::url).collect();
    let long = LockConfig::builder().ttl(Duration::from_secs(30)).build().expect("valid config");
    let holder = Redlock::open(&all, long).expect("redlock");
    let held = holder.acquire("held").await.expect("all up");
    let stop = |mut servers: Vec<Server>, i: usize| {
        blocking(move || {
            servers[i].stop();
            servers
        })
    };
    let refused = |policy, result: Result<Acquisition, Error>| match result {
        Err(err @ Error::QuorumNotReached(_)) => assert!(!err.is_unavailable(), "a master refused: {err}"),
        other => panic!("{policy:?}: expected a refused quorum, got {other:?}"),
    };
    // One master down: the others refuse — somebody holds the lock. Several tries, since the
    // round ends once a majority is out of reach and which answers came first varies.
    let servers = stop(servers, 2).await;
    for policy in BOTH {
        let redlock = Redlock::open(&all, config(policy)).expect("redlock");
        for _ in 0..5 {
            refused(policy, redlock.acquire_with_policy("held").await);
        }
    }
    // Two of three down: no majority can answer. (For the held key, whether the live master's
    // refusal is heard depends on whether it answers before the two failures end the round.)
    let servers = stop(servers, 1).await;
    for policy in BOTH {
        let redlock = Redlock::open(&all, config(policy)).expect("redlock");
        expect_unavailable(policy, redlock.acquire_with_policy("free").await, "majority down");
    }
    drop(held.detach());
    drop(servers);
}
