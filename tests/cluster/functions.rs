//! Slot migration under the Functions engine (issue 22): a cluster of module-less masters,
//! leases through the client's cluster connection on the library, and a slot moved step by
//! step (`IMPORTING` / `MIGRATING`, `MIGRATE`, `SETSLOT NODE`) while a lease on it is renewed.
//!
//! The slot's floor key (`fencedlock:fn-floor:{tag}`) is a key of that slot, so `MIGRATE`
//! carries it with the lock keys, and the target, another server process than the one the
//! floor names, starts a new epoch at the wall clock on its first grant there: fences after
//! the move are above the slot's fences before it, also for a lock key deleted before the move.
//! While a slot's lock key and its floor are on different nodes (between `MIGRATE` batches),
//! requests on that key fail (`TRYAGAIN`): the second test shows that window.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencedlock::{Engine, EngineChoice, Error, LockConfig, Locker};
use fencedlock_protocol::functions::{self, FENCES_PER_MILLISECOND, LIBRARY};
use harness::redis;
use harness::{error_text, Cluster, Server};

use crate::settings;

fn config() -> LockConfig {
    settings(Duration::from_secs(30), Duration::from_secs(2), Duration::from_secs(5))
        .engine(EngineChoice::Only(Engine::Functions))
        .build()
        .expect("valid config")
}

/// Three module-less masters with the library loaded on each (a library is per node).
fn module_less_cluster() -> Cluster {
    let cluster = Cluster::builder().masters(3).node(|b| b.without_module()).start();
    for node in cluster.nodes() {
        let name: String = node
            .cmd(&["FUNCTION", "LOAD", "REPLACE", LIBRARY])
            .unwrap_or_else(|e| panic!("FUNCTION LOAD on {}: {}", node.addr(), error_text(&e)));
        assert_eq!(name, functions::NAME);
    }
    cluster
}

fn floor(key: &str) -> String {
    String::from_utf8(functions::floor_key(key.as_bytes())).expect("floor keys are ASCII")
}

/// `HGET floor field` on `node`, after `ASKING` when the slot is being imported there.
fn floor_field(node: &Server, key: &str, field: &str, asking: bool) -> Option<String> {
    let mut conn = node.conn();
    if asking {
        let _: () = redis::cmd("ASKING").query(&mut conn).expect("ASKING");
    }
    redis::cmd("HGET")
        .arg(floor(key))
        .arg(field)
        .query(&mut conn)
        .unwrap_or_else(|e| panic!("HGET floor on {}: {}", node.addr(), error_text(&e)))
}

fn wall_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970");
    u64::try_from(since.as_millis()).expect("fits")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_moved_with_its_floor_keeps_leases_and_fences_rise_on_the_new_owner() {
    let cluster = module_less_cluster();
    let locker = Locker::open_cluster(&cluster.urls(), config()).expect("cluster locker");
    let rival = Locker::open_cluster(&cluster.urls(), config()).expect("rival locker");
    let (held_key, gone_key) = ("{fnmig}:held", "{fnmig}:gone");
    let slot = cluster.key_slot(held_key);
    let source = cluster.slot_owner(slot);
    let target = cluster.masters().into_iter().find(|&m| m != source).expect("another master");
    let (src, dst) = (&cluster.nodes()[source], &cluster.nodes()[target]);

    // Fences on the slot before the move: a lease kept, and grants on a key then deleted, so
    // only the floor remembers them.
    let mut fences = Vec::new();
    for _ in 0..20 {
        let lease = locker.try_acquire(gone_key).await.expect("granted");
        fences.push(lease.fence());
        assert!(lease.release().await.expect("release"));
    }
    let _: i64 = src.cmd(&["DEL", gone_key]).expect("DEL");
    let mut held = locker.try_acquire(held_key).await.expect("granted");
    fences.push(held.fence());
    let before = *fences.iter().max().expect("fences");
    assert_eq!(floor_field(src, held_key, "fence", false), Some(before.to_string()));

    let migration = cluster.begin_slot_migration(slot, target);
    held.renew().await.expect("renew while MIGRATING: the source still has the keys");
    migration.move_keys();
    let moved_floor = floor_field(dst, held_key, "fence", true);
    assert_eq!(moved_floor, Some(before.to_string()), "MIGRATE carried the floor to the target");
    held.renew().await.expect("renew after MIGRATE: ASK to the target");
    let moved_at = wall_ms();
    migration.finish();
    held.renew().await.expect("renew after the slot moved: MOVED to the target");
    assert!(matches!(rival.try_acquire(held_key).await, Err(Error::Contended { .. })), "still held");

    // The target's first grant on the slot: above every fence before the move, from an
    // epoch it took at the wall clock (the floor names the source's process).
    let next = rival.try_acquire(gone_key).await.expect("granted on the target");
    assert!(next.fence() > before, "{} after {before}", next.fence());
    assert!(next.fence() > moved_at * FENCES_PER_MILLISECOND, "an epoch the target took after the move");
    let target_run = dst.info_field("server", "run_id").expect("run_id");
    assert_eq!(floor_field(dst, gone_key, "run", false), Some(target_run));
    let next_fence = next.fence();
    assert!(next.release().await.expect("release"));
    let last = held.fence();
    assert!(held.release().await.expect("released on the target"));
    let after = rival.try_acquire(held_key).await.expect("free");
    assert!(after.fence() > next_fence && after.fence() > last);
    assert!(after.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_a_lock_key_and_its_floor_sit_on_two_nodes_mid_migration_its_requests_fail_until_both_moved() {
    // Not held (availability, not safety): every library call names the lock key and its
    // slot's floor, and during a migration a node that has only one of two keys of the slot
    // answers TRYAGAIN, which the cluster client retries until the node timeout. So a key
    // whose MIGRATE batch is not the floor's cannot be renewed, granted or released until
    // both have moved (the module's commands name one key and never see this). A lease
    // outlives the window if its ttl does; nothing is granted twice meanwhile.
    let cluster = module_less_cluster();
    let locker = Locker::open_cluster(&cluster.urls(), config()).expect("cluster locker");
    let key = "{fnsplit}:k";
    let slot = cluster.key_slot(key);
    let source = cluster.slot_owner(slot);
    let target = cluster.masters().into_iter().find(|&m| m != source).expect("another master");
    let mut held = locker.try_acquire(key).await.expect("granted");
    let fence = held.fence();

    let migration = cluster.begin_slot_migration(slot, target);
    let floor_key = floor(key);
    migration.move_these(&[floor_key.as_bytes()]);
    let raw: redis::RedisResult<redis::Value> = cluster.nodes()[source].cmd(&["EXISTS", key, &floor_key]);
    let err = raw.expect_err("a multi-key request on a slot split between two nodes");
    assert_eq!(err.code(), Some("TRYAGAIN"), "{}", error_text(&err));
    let renewal = held.renew().await;
    assert!(
        matches!(&renewal, Err(e) if e.is_unavailable()),
        "the renewal fails as unavailable while the keys are apart: {renewal:?}"
    );
    let other = locker.try_acquire("{fnsplit}:other").await;
    assert!(matches!(&other, Err(e) if e.is_unavailable()), "a new key of the slot too: {other:?}");

    migration.move_keys();
    migration.finish();
    held.renew().await.expect("renewable again once both keys moved");
    assert_eq!(held.fence(), fence);
    assert!(held.release().await.expect("release"));
}

/// On the library, a set of one slot is one `fencedlock_acquireall` on the slot's owner (the
/// keys and the slot's floor in one call, one token); a set of three slots is taken key by key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_of_one_slot_is_one_call_on_its_owner_and_a_spread_set_key_by_key() {
    let cluster = module_less_cluster();
    let locker = Locker::open_cluster(&cluster.urls(), config()).expect("cluster locker");
    let fcalls = || -> u64 {
        cluster
            .nodes()
            .iter()
            .map(|node| node.info_field("commandstats", "cmdstat_fcall").map_or(0, |f| calls_in(&f)))
            .sum()
    };
    // Connected to every node first, so that what follows counts only the sets' calls.
    for key in ["{warm-1}", "{warm-2}", "{warm-3}"] {
        locker.try_acquire(key).await.expect("grant").release().await.expect("released");
    }

    let before = fcalls();
    let tagged = ["{order-9}:stock", "{order-9}:payment", "{order-9}:mail"];
    let set = locker.try_acquire_all(&tagged).await.expect("granted");
    assert_eq!(fcalls() - before, 1, "one call on the slot's owner");
    let tokens: Vec<_> = set.iter().map(|lease| lease.token().clone()).collect();
    assert!(tokens.iter().all(|t| *t == tokens[0]), "one token for the set");
    let fences: Vec<u64> = set.iter().map(|lease| lease.fence()).collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");

    let spread = ["spread:a", "spread:b", "spread:c"];
    let slots: std::collections::HashSet<u16> = spread.iter().map(|k| cluster.key_slot(k)).collect();
    assert_eq!(slots.len(), 3);
    let before = fcalls();
    let taken = locker.try_acquire_all(&spread).await.expect("granted");
    assert_eq!(fcalls() - before, 3, "a call per key");
    let tokens: std::collections::HashSet<_> = taken.iter().map(|lease| lease.token().clone()).collect();
    assert_eq!(tokens.len(), 3, "a token per key");
    assert!(set.release().await.expect("released") && taken.release().await.expect("released"));
}

/// The `calls=` count of a `cmdstat_*` line.
fn calls_in(stat: &str) -> u64 {
    stat.split(',').find_map(|kv| kv.strip_prefix("calls=")).map_or(0, |n| n.parse().expect("a count"))
}
