//! Single-node leases through a Redis Cluster connection: every command routes by key to the
//! slot's master, so leases on keys in different slots live on different nodes. A waiting
//! acquire queues on the slot's owner and follows the slot when it moves.

use std::time::Duration;

use crate::support::{calls, config, wait_until};
use fencedlock::{Error, LockConfig, Locker};
use fencedlock_protocol::command::{ACQUIRE, ACQUIREALL, STATUS};
use harness::redis::{ErrorKind, ServerErrorKind, Value};
use harness::{decode_status, Cluster, Server};

/// The `(fence, held)` of `key` on the node that owns its slot; the others answer MOVED.
fn owner_status(cluster: &Cluster, key: &str) -> Vec<(String, u64, bool)> {
    cluster
        .nodes()
        .iter()
        .filter_map(|n: &Server| {
            let reply: Result<Value, _> = n.cmd(&[STATUS.name, key]);
            match reply.map(|v| decode_status(&v)) {
                Ok(Some(st)) => Some((n.addr(), st.fence, st.held)),
                Ok(None) => Some((n.addr(), 0, false)),
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::Server(ServerErrorKind::Moved), "{}: {e}", n.addr());
                    None
                }
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_route_by_key_through_a_cluster_connection() {
    let cluster = Cluster::builder().masters(3).start();
    let locker = Locker::open_cluster(&cluster.urls(), config(10_000, 1_000)).expect("cluster locker");
    let rival =
        Locker::open_cluster(&cluster.urls()[1..], config(10_000, 1_000)).expect("second cluster locker");

    let keys: Vec<String> = (0..24).map(|i| format!("cluster:key:{i}")).collect();
    let mut leases = Vec::new();
    for key in &keys {
        leases.push(locker.try_acquire(key).await.unwrap_or_else(|e| panic!("{key}: {e}")));
    }
    let mut owners = std::collections::HashSet::new();
    for lease in &leases {
        let owner = owner_status(&cluster, lease.key());
        assert_eq!(owner.len(), 1, "exactly one node owns {}: {owner:?}", lease.key());
        assert_eq!((owner[0].1, owner[0].2), (lease.fence(), true));
        owners.insert(owner[0].0.clone());
        assert!(matches!(rival.try_acquire(lease.key()).await, Err(Error::Contended { .. })));
    }
    assert_eq!(owners.len(), 3, "24 keys spread over all three masters");

    let mut lease = leases.pop().unwrap();
    lease.renew().await.expect("renew through the cluster");
    let kept = lease.keep_alive();
    tokio::time::sleep(Duration::from_millis(50)).await;
    kept.ensure_valid().unwrap();
    assert!(kept.release().await.unwrap());
    for lease in leases {
        let key = lease.key().to_owned();
        assert!(lease.release().await.unwrap());
        assert!(!owner_status(&cluster, &key)[0].2, "{key} released");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_locker_waits_on_the_slot_owner_and_follows_the_slot() {
    let cluster = Cluster::builder().masters(3).start();
    let holder = Locker::open_cluster(&cluster.urls(), config(10_000, 1_000)).expect("cluster locker");
    let waiter = Locker::open_cluster(
        &cluster.urls(),
        LockConfig::builder()
            .ttl(Duration::from_secs(10))
            .node_timeout(Duration::from_secs(1))
            .max_wait(Duration::from_secs(15))
            .backoff(Duration::from_millis(500), Duration::from_millis(500))
            .build()
            .unwrap(),
    )
    .expect("cluster locker");
    let key = "cluster:wait";
    let slot = cluster.key_slot(key);
    let owner = cluster.slot_owner(slot);
    let lease = holder.try_acquire(key).await.expect("grant");
    let waiting = tokio::spawn(async move { waiter.acquire(key).await });
    let waiters = |i: usize| cluster.nodes()[i].fencedlock_counter("fencedlock_waiters");
    wait_until("the waiter queued on the slot's owner", Duration::from_secs(5), || waiters(owner) == 1).await;

    // The slot (with the held lease) moves: the waiter is told to ask again, and the cluster
    // connection sends it to the new owner, where it queues again.
    let to = (owner + 1) % 3;
    tokio::task::block_in_place(|| cluster.migrate_slot(slot, to));
    wait_until("the waiter queued on the new owner", Duration::from_secs(10), || waiters(to) == 1).await;
    assert_eq!(waiters(owner), 0);
    assert!(!waiting.is_finished(), "the lease moved with the slot and is still held");

    let fence = lease.fence();
    assert!(lease.release().await.expect("release on the new owner"));
    let granted = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("handed over at the release")
        .expect("task")
        .expect("grant");
    assert!(granted.fence() > fence);
    assert_eq!(cluster.nodes()[to].fencedlock_counter("fencedlock_handoffs"), 1);
    assert!(granted.release().await.unwrap());
}

/// A session through a cluster: its leases live on every master, and one pipeline per slot
/// renews them (keys in one hash tag share a slot, so one pipeline for all of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_renews_leases_across_slots_and_masters() {
    let cluster = Cluster::builder().masters(3).start();
    let locker = Locker::open_cluster(&cluster.urls(), config(1_500, 1_000)).expect("cluster locker");
    let session = locker.session();
    let keys: Vec<String> =
        (0..12).map(|i| format!("cs:{i}")).chain((0..12).map(|i| format!("{{tagged}}:{i}"))).collect();
    let mut leases = Vec::new();
    for key in &keys {
        leases.push(session.try_acquire(key).await.unwrap_or_else(|e| panic!("{key}: {e}")));
    }
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    for lease in &leases {
        lease.ensure_valid().unwrap_or_else(|e| panic!("{}: {e}", lease.key()));
        let owner = owner_status(&cluster, lease.key());
        assert_eq!((owner[0].1, owner[0].2), (lease.fence(), true), "{}", lease.key());
    }
    assert_eq!(session.close().await, keys.len());
}

/// A periodic job's record lives in its key's slot, read and written through the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_periodic_job_is_recorded_through_a_cluster() {
    let cluster = Cluster::builder().masters(3).start();
    let locker = Locker::open_cluster(&cluster.urls(), config(5_000, 1_000)).expect("cluster locker");
    let hour = Duration::from_secs(3600);
    for key in ["nightly", "{user:7}:report", "cs:9"] {
        let ran =
            locker.run_at_most_every(key, hour, |lease| async move { Ok::<_, Error>(lease.fence()) }).await;
        let Ok(fencedlock::Periodic::Ran(fence)) = ran else { panic!("{key}: {ran:?}") };
        let last = locker.last_run(key).await.expect("read").expect("recorded");
        assert_eq!(last.fence, fence, "{key}");
        let again = locker.run_at_most_every(key, hour, |_| async { Ok::<_, Error>(0) }).await;
        assert!(matches!(again, Ok(fencedlock::Periodic::NotDue { .. })), "{key}: {again:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_of_one_slot_is_one_command_and_a_spread_set_is_taken_key_by_key() {
    let cluster = Cluster::builder().masters(3).start();
    let locker = Locker::open_cluster(&cluster.urls(), config(10_000, 1_000)).expect("cluster locker");
    let count = |command: &str| -> u64 { cluster.nodes().iter().map(|node| calls(node, command)).sum() };

    let tagged = ["{order-9}:stock", "{order-9}:payment", "{order-9}:mail"];
    let set = locker.try_acquire_all(&tagged).await.expect("granted");
    assert_eq!((count(ACQUIREALL.name), count(ACQUIRE.name)), (1, 0), "one command on the slot's owner");
    for lease in set.iter() {
        let owner = owner_status(&cluster, lease.key());
        assert_eq!((owner.len(), owner[0].1, owner[0].2), (1, lease.fence(), true), "{}", lease.key());
    }

    // Keys of three slots (on different masters): one ACQUIRE each, still all or none.
    let spread = ["spread:a", "spread:b", "spread:c"];
    let slots: std::collections::HashSet<u16> = spread.iter().map(|k| cluster.key_slot(k)).collect();
    assert_eq!(slots.len(), 3);
    let taken = locker.try_acquire_all(&spread).await.expect("granted");
    assert_eq!((count(ACQUIREALL.name), count(ACQUIRE.name)), (1, 3));
    assert!(set.release().await.expect("released") && taken.release().await.expect("released"));
}
