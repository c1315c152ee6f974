//! The client's metrics against a real server: known outcomes give known counts, known hold
//! times give the hold ratios, and the runnable example prints every metric.
//!
//! Each test records into a recorder of its own, installed for its thread only
//! (`metrics::set_default_local_recorder`) and run on a current-thread runtime, so the
//! lease's background tasks record there too and the other tests of this binary, running at
//! the same time, record nowhere.

use std::collections::HashMap;
use std::time::Duration;

use fencedlock::metrics::{self as names, ALL};
use fencedlock::{Acquisition, Error, LockConfig, Locker, OnUnavailable};
use harness::Server;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// What was recorded: counters by name, histogram values by name and outcome label.
#[derive(Debug, Default)]
struct Recorded {
    counters: HashMap<String, u64>,
    histograms: HashMap<(String, Option<String>), Vec<f64>>,
}

impl Recorded {
    fn take(snapshotter: &Snapshotter) -> Recorded {
        let mut out = Recorded::default();
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let name = key.key().name().to_owned();
            let outcome =
                key.key().labels().find(|l| l.key() == names::OUTCOME).map(|l| l.value().to_owned());
            match value {
                DebugValue::Counter(n) => *out.counters.entry(name).or_default() += n,
                DebugValue::Histogram(values) => out
                    .histograms
                    .entry((name, outcome))
                    .or_default()
                    .extend(values.into_iter().map(|v| v.into_inner())),
                DebugValue::Gauge(_) => panic!("the client records no gauges: {name}"),
            }
        }
        out
    }

    fn counter(&self, name: &str) -> u64 {
        self.counters.get(name).copied().unwrap_or(0)
    }

    fn values(&self, name: &str, outcome: Option<&str>) -> Vec<f64> {
        let mut v =
            self.histograms.get(&(name.to_owned(), outcome.map(str::to_owned))).cloned().unwrap_or_default();
        v.sort_by(f64::total_cmp);
        v
    }
}

fn config(ttl_ms: u64, policy: OnUnavailable) -> LockConfig {
    LockConfig::builder()
        .ttl(Duration::from_millis(ttl_ms))
        .node_timeout(Duration::from_millis(300))
        .max_wait(Duration::ZERO)
        .on_unavailable(policy)
        .build()
        .expect("valid test config")
}

#[tokio::test]
async fn known_outcomes_give_known_counts() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let server = Server::start();
    let locker = Locker::open(&server.url(), config(2_000, OnUnavailable::FailClosed)).expect("locker");

    // Two grants, two refusals (one by try_acquire, one by acquire without waiting).
    let mut lease = locker.acquire("job").await.expect("free");
    assert!(matches!(locker.try_acquire("job").await, Err(Error::Contended { .. })));
    assert!(matches!(locker.acquire("job").await, Err(Error::Contended { .. })));
    lease.renew().await.expect("renew");
    lease.renew().await.expect("renew");
    // Lost: released behind its back; the renewal is refused, and releasing it afterwards
    // finds it gone without counting the loss twice.
    locker.release_token("job", &lease.token().clone()).await.expect("release by token");
    assert!(lease.renew().await.expect_err("refused").is_lease_lost());
    assert!(!lease.release().await.expect("release"), "already gone");
    let other = locker.acquire("other").await.expect("free");
    assert!(other.release().await.expect("release"));
    for _ in 0..3 {
        fencedlock::metrics::record_fence_refusal();
    }
    // The service down: once fail-closed, once fail-open (one attempt each: no wait).
    let down = {
        let mut s = Server::start();
        let url = s.url();
        s.stop();
        url
    };
    for policy in [OnUnavailable::FailClosed, OnUnavailable::FailOpen] {
        let locker = Locker::open(&down, config(2_000, policy)).expect("locker");
        match (policy, locker.acquire_with_policy("job").await) {
            (OnUnavailable::FailClosed, Err(err)) => assert!(err.is_unavailable(), "{err:?}"),
            (OnUnavailable::FailOpen, Ok(Acquisition::Unlocked(_))) => {}
            (_, other) => panic!("{policy:?}: {other:?}"),
        }
    }

    let got = Recorded::take(&snapshotter);
    assert_eq!(got.counter(names::CONTENDED_TOTAL), 2, "{got:?}");
    assert_eq!(got.counter(names::UNAVAILABLE_TOTAL), 2, "{got:?}");
    assert_eq!(got.counter(names::RENEWALS_TOTAL), 2, "{got:?}");
    assert_eq!(got.counter(names::RENEWAL_FAILURES_TOTAL), 1, "{got:?}");
    assert_eq!(got.counter(names::LEASES_LOST_TOTAL), 1, "{got:?}");
    assert_eq!(got.counter(names::FENCE_REFUSALS_TOTAL), 3, "{got:?}");
    let count = |outcome| got.values(names::ACQUIRE_SECONDS, Some(outcome)).len();
    assert_eq!(count(names::LOCKED), 2, "{got:?}");
    assert_eq!(count(names::CONTENDED), 2, "{got:?}");
    assert_eq!(count(names::UNAVAILABLE), 1, "{got:?}");
    assert_eq!(count(names::UNLOCKED), 1, "{got:?}");
    // Waiting calls (acquire, acquire_with_policy) that were granted or met a busy lock.
    assert_eq!(got.values(names::WAIT_SECONDS, None).len(), 3, "{got:?}");
    assert_eq!(got.values(names::HOLD_SECONDS, None).len(), 2, "{got:?}");
}

#[tokio::test]
async fn hold_times_and_their_share_of_the_lease() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let server = Server::start();
    let ttl = Duration::from_millis(1_000);
    let locker = Locker::open(&server.url(), config(1_000, OnUnavailable::FailClosed)).expect("locker");
    let holds = [100u64, 300, 600];
    for ms in holds {
        let lease = locker.acquire("hold").await.expect("free");
        tokio::time::sleep(Duration::from_millis(ms)).await;
        assert!(lease.release().await.expect("release"));
    }
    // Dropped rather than released: the background release ends the hold.
    let dropped = locker.acquire("hold").await.expect("free");
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(dropped);
    crate::support::wait_until("the background release", Duration::from_secs(2), || {
        !server.lock_held("hold")
    })
    .await;
    // Kept alive past its ttl, then released: a ratio above 1 (renewals keep it held).
    let kept = locker.acquire("hold").await.expect("free").keep_alive();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    kept.ensure_valid().expect("kept alive");
    assert!(kept.release().await.expect("release"));

    let got = Recorded::take(&snapshotter);
    let seconds = got.values(names::HOLD_SECONDS, None);
    let ratios = got.values(names::HOLD_RATIO, None);
    assert_eq!(seconds.len(), 5, "{got:?}");
    let expected = [100u64, 200, 300, 600, 1_500];
    for ((s, r), ms) in seconds.iter().zip(&ratios).zip(expected) {
        let want = Duration::from_millis(ms).as_secs_f64();
        assert!((want..want + 0.1).contains(s), "hold {s} s, slept {ms} ms: {seconds:?}");
        let share = want / ttl.as_secs_f64();
        assert!((share..share + 0.1).contains(r), "ratio {r}, expected about {share}: {ratios:?}");
    }
    assert!(got.counter(names::RENEWALS_TOTAL) >= 3, "renewed every ttl / 3: {got:?}");
    assert_eq!(got.counter(names::LEASES_LOST_TOTAL), 0, "{got:?}");
}

#[tokio::test]
async fn a_lost_kept_lease_counts_once() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let server = Server::start();
    let locker = Locker::open(&server.url(), config(600, OnUnavailable::FailClosed)).expect("locker");
    let kept = locker.acquire("kept").await.expect("free").keep_alive();
    crate::support::steal(&server, "kept");
    let loss = tokio::time::timeout(Duration::from_secs(2), kept.lost()).await.expect("loss noticed");
    assert!(loss.is_lease_lost(), "{loss:?}");
    assert!(kept.ensure_valid().is_err());
    drop(kept);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let got = Recorded::take(&snapshotter);
    assert_eq!(got.counter(names::LEASES_LOST_TOTAL), 1, "{got:?}");
    assert_eq!(got.counter(names::RENEWAL_FAILURES_TOTAL), 1, "{got:?}");
}

/// The example runs against a real server and prints every metric by name.
#[test]
fn the_example_prints_every_metric() {
    let stdout = crate::support::run_example("metrics", &Server::start());
    let printed = stdout.split_once("--- metrics").map(|(_, m)| m).expect("the metrics section");
    for name in ALL {
        assert!(printed.lines().any(|l| l.starts_with(name)), "{name} missing from:\n{printed}");
    }
    for outcome in [names::LOCKED, names::CONTENDED, names::UNLOCKED] {
        let label = format!("{}={outcome}", names::OUTCOME);
        assert!(printed.contains(&label), "{label} missing from:\n{printed}");
    }
}
