//! Leader election against a real server: one leader at a time with increasing epochs, an
//! immediate handover on resignation, who leads (label and epoch) readable by anyone, observed
//! changes, loss of leadership cancelling the leader's work before a successor is elected, and
//! an abandoned campaign leaving nothing behind.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};

use crate::support::{config, counter, wait_until};
use fencedlock::{Election, Error, Leader, LockConfig, Locker, LossCause, MIN_CAMPAIGN_WINDOW};
use harness::Server;

/// The stream's next item, within 3 s.
async fn next(changes: &mut (impl Stream<Item = Result<Option<Leader>, Error>> + Unpin)) -> Option<Leader> {
    let item =
        tokio::time::timeout(Duration::from_secs(3), changes.next()).await.expect("a change within 3 s");
    item.expect("the stream does not end").expect("STATUS answered")
}

fn election(server: &Server, key: &str, ttl_ms: u64) -> Election {
    Election::new(Locker::open(&server.url(), config(ttl_ms, 250)).expect("locker"), key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_with_increasing_epochs() {
    const CANDIDATES: usize = 3;
    const TERMS: usize = 4;
    let server = Server::start();
    let leading = Arc::new(AtomicUsize::new(0));
    let epochs = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..CANDIDATES)
        .map(|c| {
            let election = election(&server, "elect:one", 1_000);
            let (leading, epochs) = (Arc::clone(&leading), Arc::clone(&epochs));
            tokio::spawn(async move {
                for _ in 0..TERMS {
                    let leadership = election.campaign(format!("candidate-{c}")).await.expect("elected");
                    assert_eq!(leading.fetch_add(1, Ordering::SeqCst), 0, "two leaders at once");
                    epochs.lock().unwrap().push((leadership.epoch(), c));
                    let seen = election.leader().await.expect("leader").expect("somebody leads");
                    assert_eq!(seen.epoch, leadership.epoch());
                    assert_eq!(seen.label.as_deref(), Some(format!("candidate-{c}").as_bytes()));
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    leadership.ensure_valid().expect("still leading");
                    assert_eq!(leading.fetch_sub(1, Ordering::SeqCst), 1);
                    assert!(leadership.resign().await.expect("resign"), "still led at resignation");
                }
            })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(20), task).await.expect("terms end").expect("candidate");
    }
    let epochs = epochs.lock().unwrap().clone();
    assert_eq!(epochs.len(), CANDIDATES * TERMS);
    assert!(epochs.windows(2).all(|w| w[0].0 < w[1].0), "epochs increase across leaders: {epochs:?}");
    let leaders: std::collections::HashSet<usize> = epochs.iter().map(|e| e.1).collect();
    assert_eq!(leaders.len(), CANDIDATES, "every candidate led: {epochs:?}");
    assert_eq!(election(&server, "elect:one", 1_000).leader().await.expect("status"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resigning_hands_over_at_once() {
    let server = Server::start();
    // A ttl far longer than the handover: only the server queue can make it fast.
    let (a, b) = (election(&server, "elect:handover", 10_000), election(&server, "elect:handover", 10_000));
    let mut took = Vec::new();
    for _ in 0..5 {
        let leader_a = a.campaign("a").await.expect("a elected");
        let b = b.clone();
        let waiting_b = tokio::spawn(async move {
            let leadership = b.campaign("b").await.expect("b elected");
            (Instant::now(), leadership)
        });
        wait_until("b queued", Duration::from_secs(3), || counter(&server, "fencedlock_waiters") == 1).await;
        let resigned = Instant::now();
        assert!(leader_a.resign().await.expect("a resigns"));
        let (elected, leader_b) = waiting_b.await.expect("b's campaign");
        took.push(elected - resigned);
        let now = a.leader().await.expect("status").expect("b leads");
        assert_eq!((now.label.as_deref(), now.epoch), (Some(&b"b"[..]), leader_b.epoch()));
        assert!(leader_b.resign().await.expect("b resigns"));
    }
    took.sort();
    eprintln!("handover from resign() to the next leader elected: {took:?}");
    assert!(took.iter().all(|t| *t < Duration::from_millis(200)), "handover took {took:?}");
}

/// A campaign waits for as long as it takes, request after request (each waits one window,
/// here the 1 s minimum: the locker's maximum wait is shorter), and is elected at the
/// resignation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_outlasts_its_waiting_windows() {
    let server = Server::start();
    let config = LockConfig::builder().ttl(Duration::from_secs(5)).max_wait(Duration::from_millis(100));
    let locker = Locker::open(&server.url(), config.build().unwrap()).unwrap();
    let (a, b) = (Election::new(locker.clone(), "elect:long"), Election::new(locker, "elect:long"));
    let leader_a = a.campaign("a").await.expect("a elected");
    let started = Instant::now();
    let waiting_b = tokio::spawn(async move { b.campaign("b").await.map(|l| (Instant::now(), l)) });
    tokio::time::sleep(MIN_CAMPAIGN_WINDOW * 2 + Duration::from_millis(500)).await;
    assert!(!waiting_b.is_finished(), "b gave up while a led");
    let epoch_a = leader_a.epoch();
    let resigned = Instant::now();
    assert!(leader_a.resign().await.expect("a resigns"));
    let (elected, leader_b) = waiting_b.await.expect("b's campaign").expect("b elected after 2.5 s");
    assert!(elected - started > MIN_CAMPAIGN_WINDOW * 2, "b waited through several windows");
    let handover = elected - resigned;
    assert!(handover < Duration::from_millis(500), "b elected {handover:?} after the resignation");
    assert!(leader_b.epoch() > epoch_a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anyone_reads_the_leader_label_and_epoch() {
    let server = Server::start();
    let candidate = election(&server, "elect:who", 2_000);
    let bystander = election(&server, "elect:who", 2_000);
    assert_eq!(bystander.leader().await.expect("status"), None, "nobody leads yet");
    let leadership = candidate.campaign("host-a:4711").await.expect("elected");
    assert_eq!(leadership.label(), b"host-a:4711");
    let Leader { label, epoch, remaining } = bystander.leader().await.expect("status").expect("a leader");
    assert_eq!(label.as_deref(), Some(&b"host-a:4711"[..]));
    assert_eq!(epoch, leadership.epoch(), "the epoch is the lease's fence");
    assert_eq!(server.lock_status("elect:who").map(|st| st.fence), Some(epoch));
    assert!(remaining > Duration::ZERO && remaining <= Duration::from_secs(2), "{remaining:?}");
    // Renewals keep the label (the keep-alive renews every ttl / 3).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let later = bystander.leader().await.expect("status").expect("still leading");
    assert_eq!((later.label, later.epoch), (Some(b"host-a:4711".to_vec()), epoch));
    assert!(leadership.resign().await.expect("resign"));
    assert_eq!(bystander.leader().await.expect("status"), None);
    // A plain lock on the key leads nobody by name.
    let lease =
        Locker::open(&server.url(), config(2_000, 250)).unwrap().try_acquire("elect:who").await.unwrap();
    let plain = bystander.leader().await.expect("status").expect("held");
    assert_eq!((plain.label, plain.epoch), (None, lease.fence()));
    assert!(lease.fence() > epoch);
    // Labels follow the protocol's limits, refused before anything is sent.
    let too_long = vec![b'x'; fencedlock_protocol::limits::MAX_LABEL_LEN + 1];
    assert!(matches!(candidate.campaign(too_long).await, Err(Error::Config(_))));
    assert!(matches!(candidate.campaign("").await, Err(Error::Config(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_see_each_change() {
    let server = Server::start();
    let (a, b) = (election(&server, "elect:watch", 3_000), election(&server, "elect:watch", 3_000));
    let watcher = election(&server, "elect:watch", 3_000).with_poll_interval(Duration::from_millis(20));
    let mut changes = Box::pin(watcher.observe());
    assert_eq!(next(&mut changes).await, None, "nobody leads at first");
    let leader_a = a.campaign("a").await.expect("a elected");
    let seen = next(&mut changes).await.expect("a leads");
    assert_eq!((seen.label.as_deref(), seen.epoch), (Some(&b"a"[..]), leader_a.epoch()));
    let epoch_a = leader_a.epoch();
    let waiting_b = tokio::spawn(async move { b.campaign("b").await.expect("b elected") });
    wait_until("b queued", Duration::from_secs(3), || counter(&server, "fencedlock_waiters") == 1).await;
    // Renewals (every second) and a queued candidate are no change: nothing for 1.2 s of
    // polling every 20 ms.
    let quiet = tokio::time::timeout(Duration::from_millis(1_200), changes.next()).await;
    assert!(quiet.is_err(), "no change while a leads, yet the stream yielded {quiet:?}");
    let resigned = Instant::now();
    assert!(leader_a.resign().await.expect("a resigns"));
    let seen = next(&mut changes).await.expect("b leads");
    let latency = resigned.elapsed();
    let leader_b = waiting_b.await.expect("b's campaign");
    assert_eq!((seen.label.as_deref(), seen.epoch), (Some(&b"b"[..]), leader_b.epoch()));
    assert!(seen.epoch > epoch_a);
    assert!(latency < Duration::from_millis(500), "seen after {latency:?} with a 20 ms poll");
    assert!(leader_b.resign().await.expect("b resigns"));
    assert_eq!(next(&mut changes).await, None, "nobody leads after b resigned");
    eprintln!("observed the handover {latency:?} after resign() (poll every 20 ms)");
}

/// A holder that stops renewing is seen gone when its lease ends, even by an observer whose
/// poll interval is far longer: it looks again at the lease's expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_see_an_expiry_when_it_happens() {
    let server = Server::start();
    // A dead leader: its lease is left to expire after 700 ms.
    let locker = Locker::open(&server.url(), config(700, 250)).unwrap();
    let granted = Instant::now();
    let lease = locker.try_acquire("elect:expiry").await.unwrap();
    let fence = lease.fence();
    let _token = lease.detach();
    let watcher = election(&server, "elect:expiry", 700).with_poll_interval(Duration::from_secs(30));
    let mut changes = Box::pin(watcher.observe());
    let first = tokio::time::timeout(Duration::from_secs(3), changes.next()).await.expect("first");
    let holder = first.expect("item").expect("STATUS").expect("held");
    assert_eq!((holder.label, holder.epoch), (None, fence));
    let next = tokio::time::timeout(Duration::from_secs(5), changes.next()).await.expect("expiry seen");
    let seen_after = granted.elapsed();
    assert_eq!(next.expect("item").expect("STATUS"), None);
    assert!(
        seen_after >= Duration::from_millis(650) && seen_after < Duration::from_millis(1_200),
        "expiry at 700 ms seen after {seen_after:?} (poll interval 30 s)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_key_cancels_the_leaders_work() {
    let server = Server::start();
    let leadership = election(&server, "elect:deleted", 600).campaign("a").await.expect("elected");
    let stop = leadership.cancellation();
    let work = tokio::spawn(async move {
        stop.cancelled().await;
        Instant::now()
    });
    let _: i64 = server.cmd(&["DEL", "elect:deleted"]).expect("DEL");
    let deleted = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(2), leadership.lost()).await.expect("loss signalled");
    assert!(matches!(err, Error::LeaseLost { cause: LossCause::Refused, .. }), "{err:?}");
    let stopped = tokio::time::timeout(Duration::from_secs(1), work).await.expect("work stopped").unwrap();
    assert!(stopped - deleted < Duration::from_millis(500), "at the next renewal (every 200 ms)");
    assert!(matches!(leadership.ensure_valid(), Err(Error::LeaseLost { .. })));
    assert!(!leadership.resign().await.expect("resign"), "no longer leading");
}

/// The server refuses the leader's renewals (and releases): its work is cancelled before the
/// next candidate, queued on the server, is elected at the lease's expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_renewal_cancels_the_leader_before_a_successor_is_elected() {
    let server = Server::start();
    let _: String =
        server.cmd(&["ACL", "SETUSER", "leader", "on", ">pw", "~*", "+@all"]).expect("ACL SETUSER");
    let url = format!("redis://leader:pw@127.0.0.1:{}", server.port());
    let a = Election::new(Locker::open(&url, config(900, 250)).expect("locker"), "elect:refused");
    let b = election(&server, "elect:refused", 900);
    let leader_a = a.campaign("a").await.expect("a elected");
    let epoch_a = leader_a.epoch();
    let waiting_b = tokio::spawn(async move {
        let leadership = b.campaign("b").await.expect("b elected");
        (Instant::now(), leadership)
    });
    wait_until("b queued", Duration::from_secs(3), || counter(&server, "fencedlock_waiters") == 1).await;
    let _: String = server
        .cmd(&["ACL", "SETUSER", "leader", "-fencedlock.renew", "-fencedlock.release"])
        .expect("ACL SETUSER");
    let err = tokio::time::timeout(Duration::from_secs(3), leader_a.lost()).await.expect("loss signalled");
    let lost = Instant::now();
    assert!(matches!(err, Error::LeaseLost { cause: LossCause::RenewFailed(_), .. }), "{err:?}");
    let (elected, leader_b) =
        tokio::time::timeout(Duration::from_secs(3), waiting_b).await.expect("b").unwrap();
    assert!(leader_b.epoch() > epoch_a);
    assert!(lost < elected, "the old leader's work stopped {:?} after b was elected", lost - elected);
    eprintln!("old leader cancelled {:?} before the successor was elected", elected - lost);
    assert!(leader_b.resign().await.expect("b resigns"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_campaign_leaves_no_lease_and_no_waiter() {
    let server = Server::start();
    let (a, b) = (election(&server, "elect:drop", 5_000), election(&server, "elect:drop", 5_000));
    let leader_a = a.campaign("a").await.expect("a elected");
    let campaign = tokio::spawn(async move { b.campaign("b").await });
    wait_until("b queued", Duration::from_secs(3), || counter(&server, "fencedlock_waiters") == 1).await;
    campaign.abort();
    assert!(campaign.await.expect_err("aborted").is_cancelled());
    wait_until("b's waiter gone", Duration::from_secs(3), || counter(&server, "fencedlock_waiters") == 0)
        .await;
    let epoch_a = leader_a.epoch();
    assert!(leader_a.resign().await.expect("a resigns"));
    // Nobody was handed the lease, and nothing is left to expire later.
    assert_eq!(a.leader().await.expect("status"), None);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(a.leader().await.expect("status"), None);
    assert_eq!(server.lock_status("elect:drop").map(|st| st.fence), Some(epoch_a));
}
