//! Scale-out: a Redis Cluster of three masters with a replica each (created with
//! `redis-cli --cluster create`, the module on every node), used through the client's cluster
//! connection. Leases on keys over the whole slot range; then slots are migrated while leases
//! are held: each lease survives (same token, same fence, renewals keep working through the
//! `ASK` / `MOVED` redirections), and the next grant on the target is
//! `max(key fence, target high-water mark) + 1`. `floors` covers slots whose lock keys were
//! deleted or reclaimed before they moved.

mod acquire_all;
mod atomic;
mod floors;
mod functions;
mod semaphore;
mod waiting;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use fencedlock::{Error, Lease, LockConfig, LockConfigBuilder, Locker};
use fencedlock_protocol::command::{ACQUIRE, RAISE, STATUS};
use harness::redis;
use harness::{decode_status, epoch_of, error_text, Cluster, Server};

const TTL: Duration = Duration::from_secs(30);

fn config() -> LockConfig {
    settings(TTL, Duration::from_secs(3), Duration::from_secs(5)).build().expect("valid config")
}

/// The cluster tests' locker settings, for a test to add its own to: leases of `ttl`,
/// `node_timeout` per node, waits of up to `max_wait` retried after short backoffs.
fn settings(ttl: Duration, node_timeout: Duration, max_wait: Duration) -> LockConfigBuilder {
    LockConfig::builder()
        .ttl(ttl)
        .node_timeout(node_timeout)
        .backoff(Duration::from_millis(5), Duration::from_millis(50))
        .max_wait(max_wait)
}

/// The slot of `key`, its owner, and another master to move it to.
fn route(cluster: &Cluster, key: &str) -> (u16, usize, usize) {
    let slot = cluster.key_slot(key);
    let source = cluster.slot_owner(slot);
    let target = cluster.masters().into_iter().find(|&m| m != source).expect("another master");
    (slot, source, target)
}

fn cluster() -> Cluster {
    let cluster = Cluster::builder().masters(3).replicas_per_master(1).start();
    assert_eq!(cluster.masters().len(), 3, "three masters, three replicas");
    cluster
}

/// `(fence, held)` of `key` read on `node` directly (not through the client under test).
fn status_on(node: &Server, key: &str) -> Option<(u64, bool)> {
    node.lock_status(key).map(|st| (st.fence, st.held))
}

/// `STATUS key` on a connection that first sent `prefix` (`READONLY` for a replica,
/// `ASKING` for the importing target of a migration), as `(fence, held)`.
fn status_after(node: &Server, prefix: &str, key: &str) -> Option<(u64, bool)> {
    let mut conn = node.conn();
    let _: () = redis::cmd(prefix).query(&mut conn).unwrap_or_else(|e| panic!("{prefix}: {e}"));
    let reply: redis::Value = redis::cmd(STATUS.name)
        .arg(key)
        .query(&mut conn)
        .unwrap_or_else(|e| panic!("{prefix} STATUS {key} on {}: {}", node.addr(), error_text(&e)));
    decode_status(&reply).map(|st| (st.fence, st.held))
}

/// `(fence, held)` on a replica, which serves reads only after `READONLY`.
fn status_on_replica(replica: &Server, key: &str) -> Option<(u64, bool)> {
    status_after(replica, "READONLY", key)
}

/// `(fence, held)` on the target of a migration in progress, which serves an importing
/// slot only to a client that sent `ASKING`.
fn status_asking(node: &Server, key: &str) -> Option<(u64, bool)> {
    status_after(node, "ASKING", key)
}

/// The replica whose master is node `master`.
fn replica_of(cluster: &Cluster, master: usize) -> &Server {
    let port = cluster.nodes()[master].port().to_string();
    cluster
        .nodes()
        .iter()
        .find(|n| n.info_field("replication", "master_port").as_deref() == Some(port.as_str()))
        .unwrap_or_else(|| panic!("no replica of node {master}"))
}

/// Wait until the replica of master `m` applied everything written to it so far.
fn sync_replica(cluster: &Cluster, m: usize) {
    cluster.nodes()[m].wait_caught_up(replica_of(cluster, m));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_on_keys_over_all_slots_through_the_cluster_connection() {
    let cluster = cluster();
    let locker = Locker::open_cluster(&cluster.urls(), config()).expect("cluster locker");
    let rival = Locker::open_cluster(&cluster.urls()[3..], config()).expect("second cluster locker");

    let keys: Vec<String> = (0..300).map(|i| format!("spread:{i}")).collect();
    let leases: Vec<Lease> = futures::future::join_all(keys.iter().map(|k| locker.try_acquire(k)))
        .await
        .into_iter()
        .zip(&keys)
        .map(|(r, k)| r.unwrap_or_else(|e| panic!("{k}: {e}")))
        .collect();

    let mut slots = BTreeSet::new();
    let mut per_master: HashMap<usize, usize> = HashMap::new();
    for lease in &leases {
        let slot = cluster.key_slot(lease.key());
        slots.insert(slot);
        let owner = cluster.slot_owner_seen_by(0, slot).expect("every slot is served");
        *per_master.entry(owner).or_default() += 1;
        assert_eq!(
            status_on(&cluster.nodes()[owner], lease.key()),
            Some((lease.fence(), true)),
            "{}",
            lease.key()
        );
    }
    assert_eq!(per_master.len(), 3, "keys on every master: {per_master:?}");
    let (lo, hi) = (*slots.first().expect("slots"), *slots.last().expect("slots"));
    assert!(
        lo < 500 && hi > 15_800 && slots.len() > 280,
        "keys spread over the slot range: {lo}..{hi}, {}",
        slots.len()
    );

    // Only the slot's master answers; the others redirect.
    for lease in leases.iter().take(10) {
        let owner = cluster.slot_owner_seen_by(0, cluster.key_slot(lease.key())).expect("owner");
        for m in cluster.masters().into_iter().filter(|&m| m != owner) {
            let err = cluster.nodes()[m].cmd::<redis::Value>(&[STATUS.name, lease.key()]).unwrap_err();
            assert!(error_text(&err).starts_with("MOVED"), "{}", error_text(&err));
        }
    }
    // Every lease is exclusive, and replicated to its master's replica.
    for lease in leases.iter().step_by(15) {
        assert!(
            matches!(rival.try_acquire(lease.key()).await, Err(Error::Contended { .. })),
            "{}",
            lease.key()
        );
    }
    for m in cluster.masters() {
        sync_replica(&cluster, m);
    }
    for lease in leases.iter().step_by(7) {
        let owner = cluster.slot_owner_seen_by(0, cluster.key_slot(lease.key())).expect("owner");
        let on_replica = status_on_replica(replica_of(&cluster, owner), lease.key());
        assert_eq!(on_replica, Some((lease.fence(), true)), "{} on the replica", lease.key());
    }

    for lease in leases {
        let key = lease.key().to_string();
        assert!(lease.release().await.expect("release"), "{key}");
    }
    // Released everywhere: the rival can now take any of them, with a higher fence.
    let again = rival.try_acquire(&keys[0]).await.expect("free again");
    assert!(again.release().await.expect("release"));
}

/// Two hash tags whose slots live on the same master, and a different master.
fn two_slots_on_one_master(cluster: &Cluster) -> (String, String, usize, usize) {
    let first = "{mig0}".to_string();
    let source = cluster.slot_owner(cluster.key_slot(&first));
    let second = (1..200)
        .map(|n| format!("{{mig{n}}}"))
        .find(|tag| cluster.slot_owner(cluster.key_slot(tag)) == source)
        .expect("another tag on the same master");
    let target = cluster.masters().into_iter().find(|&m| m != source).expect("another master");
    (first, second, source, target)
}

/// Retake a lease with its own token: the same fence comes back (after a RAISE, the raised one).
async fn retake(locker: &Locker, lease: Lease) -> Lease {
    let key = lease.key().to_string();
    let token = lease.detach();
    locker.try_acquire_with_token(&key, &token).await.unwrap_or_else(|e| panic!("{key}: {e}"))
}

fn raise(node: &Server, key: &str, token: &[u8], fence: u64) -> u64 {
    let mut cmd = redis::cmd(RAISE.name);
    cmd.arg(key).arg(token).arg(fence);
    let raised: Option<u64> = node.query(&cmd).unwrap_or_else(|e| panic!("RAISE {key}: {}", error_text(&e)));
    raised.expect("the holder raises")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_survive_slot_migration_and_fences_stay_monotonic() {
    let cluster = cluster();
    let locker = Locker::open_cluster(&cluster.urls(), config()).expect("cluster locker");
    let rival = Locker::open_cluster(&cluster.urls(), config()).expect("rival locker");
    let (tag_high, tag_low, source, target) = two_slots_on_one_master(&cluster);
    let (src, dst) = (&cluster.nodes()[source], &cluster.nodes()[target]);

    // Case "key fence above the target's mark": `high` carries a fence far above anything
    // the target has issued. Case "target's mark above the key fence": `low` keeps a small
    // fence while the target's mark is pushed above it.
    let key_low = format!("{tag_low}:lease");
    let low = locker.try_acquire(&key_low).await.expect("low");
    let dummy = (0..500)
        .map(|n| format!("dummy:{n}"))
        .find(|k| cluster.slot_owner_seen_by(0, cluster.key_slot(k)) == Some(target))
        .expect("a key on the target");
    let d: Option<u64> = dst.cmd(&[ACQUIRE.name, &dummy, "dummy", "60000"]).expect("dummy grant");
    d.expect("granted");
    let target_mark = raise(dst, &dummy, b"dummy", low.fence() + 1_000_000);
    assert_eq!(dst.high_water(), target_mark, "RAISE moves the mark");

    let key_high = format!("{tag_high}:lease");
    let high = locker.try_acquire(&key_high).await.expect("high");
    raise(src, &key_high, high.token().as_bytes(), target_mark + 1_000_000);
    let high = retake(&locker, high).await;
    assert_eq!(high.fence(), target_mark + 1_000_000, "the retaken lease carries the raised fence");
    // A kept-alive lease on the same slot renews in the background through the migration.
    let kept = locker.try_acquire(&format!("{tag_high}:kept")).await.expect("kept").keep_alive();
    let kept_fence = kept.fence();

    // Migrate the slot of `high` step by step, renewing between the steps.
    let slot_high = cluster.key_slot(&key_high);
    let migration = cluster.begin_slot_migration(slot_high, target);
    let mut high = high;
    high.renew().await.expect("renew while MIGRATING: the source still has the key");
    migration.move_keys();
    let moved = dst.cmd::<redis::Value>(&[STATUS.name, &key_high]).unwrap_err();
    assert!(
        error_text(&moved).starts_with("MOVED"),
        "the target serves it only after ASKING: {}",
        error_text(&moved)
    );
    assert_eq!(status_asking(dst, &key_high), Some((high.fence(), true)), "MIGRATE carried the lease");
    high.renew().await.expect("renew after MIGRATE: the source answers ASK, the target serves it");
    migration.finish();
    high.renew().await.expect("renew after the slot moved: MOVED to the target");

    let on_target = status_on(dst, &key_high).expect("the lease moved with its key");
    assert_eq!(on_target, (high.fence(), true), "same fence, still held");
    assert!(dst.high_water() >= high.fence(), "a restored lock raises the target's mark");
    assert!(matches!(rival.try_acquire(&key_high).await, Err(Error::Contended { .. })));
    assert!(src.cmd::<redis::Value>(&[STATUS.name, &key_high]).is_err(), "the source redirects");
    kept.ensure_valid().expect("the kept-alive lease survived the migration");
    assert_eq!(status_on(dst, &format!("{tag_high}:kept")), Some((kept_fence, true)));
    sync_replica(&cluster, target);
    let replica = status_on_replica(replica_of(&cluster, target), &key_high);
    assert_eq!(replica, Some((high.fence(), true)), "on the target's replica");

    // The next grant on the target: max(key fence, mark) + 1.
    let fence_high = high.fence();
    assert!(high.release().await.expect("release on the target"));
    let mark = dst.high_water();
    let next = rival.try_acquire(&key_high).await.expect("free after release");
    assert_eq!(next.fence(), fence_high.max(mark) + 1);
    assert!(next.fence() > fence_high);
    assert!(next.release().await.expect("release"));
    assert!(kept.release().await.expect("release the kept lease"));

    // Migrate `low` in one go: its fence is below the target's mark.
    let slot_low = cluster.key_slot(&key_low);
    let fence_low = low.fence();
    let mark = dst.high_water();
    assert!(mark > fence_low);
    cluster.migrate_slot(slot_low, target);
    assert_eq!(status_on(dst, &key_low), Some((fence_low, true)), "same fence, still held");
    let mut low = low;
    low.renew().await.expect("renew on the new owner");
    assert!(matches!(rival.try_acquire(&key_low).await, Err(Error::Contended { .. })));
    assert!(low.release().await.expect("release"));
    let mark = dst.high_water();
    let next = rival.try_acquire(&key_low).await.expect("free after release");
    assert_eq!(next.fence(), fence_low.max(mark) + 1);
    assert!(next.fence() > mark, "the target's mark orders the migrated key's next fence");
    assert!(next.release().await.expect("release"));
}

/// Run `op` until it returns something other than a transient error (a connection to the
/// dead node, a timeout, a redirect the client has not learnt yet), for at most 20 s.
async fn through_failover<T, F, Fut>(what: &str, mut op: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        match op().await {
            Err(Error::Timeout { .. } | Error::Server { .. }) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e @ (Error::Timeout { .. } | Error::Server { .. })) => {
                panic!("{what}: still failing after 20 s: {e}")
            }
            other => return other,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_keeps_leases_and_jumps_to_a_new_epoch() {
    let mut cluster = cluster();
    let locker = Locker::open_cluster(&cluster.urls(), config()).expect("cluster locker");
    let rival = Locker::open_cluster(&cluster.urls(), config()).expect("rival locker");
    let slot = cluster.key_slot("{fo}");
    let victim = cluster.slot_owner(slot);
    let heir_port = replica_of(&cluster, victim).port();
    let heir = cluster.nodes().iter().position(|n| n.port() == heir_port).expect("the replica");

    let mut leases = Vec::new();
    for i in 0..10 {
        leases.push(locker.try_acquire(&format!("{{fo}}:{i}")).await.expect("grant"));
    }
    let old_mark = cluster.nodes()[victim].high_water();
    assert!(leases.iter().all(|l| l.fence() <= old_mark));
    sync_replica(&cluster, victim);

    // The master dies; its replica takes over without waiting for a vote.
    cluster.nodes_mut()[victim].kill9();
    let new_master = &cluster.nodes()[heir];
    let _: () = new_master
        .cmd(&["CLUSTER", "FAILOVER", "TAKEOVER"])
        .unwrap_or_else(|e| panic!("CLUSTER FAILOVER TAKEOVER: {}", error_text(&e)));
    harness::poll("the replica to become master", Duration::from_secs(10), || {
        new_master.info_field("replication", "role").as_deref() == Some("master")
    });
    assert_eq!(cluster.slot_owner(slot), heir, "every live node routes the slot to the new master");

    // Every lease survived: same fence, still held, refused to others, and its own token
    // takes it back with the same fence.
    for lease in leases {
        let key = lease.key().to_string();
        assert_eq!(status_on(new_master, &key), Some((lease.fence(), true)), "{key} on the new master");
        let refused = through_failover(&key, || rival.try_acquire(&key)).await;
        assert!(matches!(refused, Err(Error::Contended { .. })), "{key}: {refused:?}");
        let fence = lease.fence();
        let token = lease.detach();
        let again =
            through_failover(&key, || locker.try_acquire_with_token(&key, &token)).await.expect("retake");
        assert_eq!(again.fence(), fence, "{key}: the same token holds it");
        assert!(again.release().await.expect("release"));
    }
    // New grants on the new master are in a later 2^32 block than anything before.
    let next = through_failover("new grant", || locker.try_acquire("{fo}:new")).await.expect("grant");
    assert!(
        next.fence() > old_mark && epoch_of(next.fence()) > epoch_of(old_mark),
        "{} vs {old_mark}",
        next.fence()
    );
    let next_on_old_key = locker.try_acquire("{fo}:0").await.expect("grant");
    assert!(next_on_old_key.fence() > next.fence());
}

/// `ACQUIRE` on one node, which must grant: the fence.
fn grant(node: &Server, key: &str, token: &str, ttl_ms: u64) -> u64 {
    let fence: Option<u64> = node
        .cmd(&[ACQUIRE.name, key, token, &ttl_ms.to_string()])
        .unwrap_or_else(|e| panic!("ACQUIRE {key} on {}: {}", node.addr(), error_text(&e)));
    fence.unwrap_or_else(|| panic!("ACQUIRE {key} on {} was refused", node.addr()))
}

/// `RELEASE` on one node, which must have held the lease for `token`.
fn release(node: &Server, key: &str, token: &str) {
    let released: i64 = node
        .cmd(&[fencedlock_protocol::command::RELEASE.name, key, token])
        .unwrap_or_else(|e| panic!("RELEASE {key} on {}: {}", node.addr(), error_text(&e)));
    assert_eq!(released, 1, "RELEASE {key} on {}", node.addr());
}
