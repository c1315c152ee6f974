//! Semaphore keys (`ACQUIRE … PERMITS n`) and read leases (`ACQUIRE … SHARED`) across slot
//! migration: a key migrates with its holders (each keeps its token and fence, and no more than
//! `n` hold it on the target; a writer still waits for the readers), the next grant on the
//! target is above every fence of the key, and after the key is deleted the slot's floor still
//! keeps the next fence above all of them.

use fencedlock_protocol::command::{ACQUIRE, PERMITS, RELEASE, SHARED};
use harness::{error_text, key_slot, redis, Cluster, SemaphoreStatus, Server};

const TTL: &str = "60000";

/// `ACQUIRE key token TTL PERMITS 3` on `node` (the slot's owner): the fence, or `None`.
fn take(node: &Server, key: &str, token: &str) -> Option<u64> {
    node.query(redis::cmd(ACQUIRE.name).arg(key).arg(token).arg(TTL).arg(PERMITS).arg(3))
        .unwrap_or_else(|e| panic!("ACQUIRE {key} {token} on {}: {}", node.addr(), error_text(&e)))
}

/// A semaphore key's STATUS on `node`, decoded and checked by the protocol's rules.
fn semaphore_on(node: &Server, key: &str) -> SemaphoreStatus {
    node.semaphore_status(key).unwrap_or_else(|| panic!("{key} has no lock state on {}", node.addr()))
}

/// Where a key migrates from and to: its slot, the master `a` that owns it and another, `b`.
struct Route<'c> {
    slot: u16,
    a: usize,
    b: usize,
    na: &'c Server,
    nb: &'c Server,
}

fn route<'c>(cluster: &'c Cluster, key: &str) -> Route<'c> {
    let (slot, a, b) = crate::route(cluster, key);
    Route { slot, a, b, na: &cluster.nodes()[a], nb: &cluster.nodes()[b] }
}

#[test]
fn a_semaphore_key_migrates_with_its_holders_and_its_fences_keep_rising() {
    let cluster = Cluster::builder().masters(3).start();
    let key = "semk";
    let Route { slot, a, b, na, nb } = route(&cluster, key);
    // The source's mark far above the target's, so only the key and its floor can lift it.
    let owned: Vec<u16> = cluster.slots_of(a);
    let warm: Vec<String> = (0..100_000)
        .map(|i| format!("warm:{i}"))
        .filter(|k| {
            let s = key_slot(k.as_bytes());
            s != slot && owned.contains(&s)
        })
        .take(50)
        .collect();
    for k in &warm {
        assert!(take(na, k, "warm").is_some(), "{k}");
    }
    let held: Vec<u64> = ["w1", "w2"].iter().map(|t| take(na, key, t).expect("a free permit")).collect();
    assert!(held[0] < held[1]);
    assert!(nb.high_water() < held[0], "the target issued fewer fences");

    let migration = cluster.begin_slot_migration(slot, b);
    migration.move_keys();
    migration.finish();

    let moved = semaphore_on(nb, key);
    assert_eq!(moved.permits, 3);
    assert_eq!(moved.holders.iter().map(|h| h.fence).collect::<Vec<_>>(), held, "same holders, same fences");
    assert_eq!(take(nb, key, "w1"), Some(held[0]), "a holder re-enters its own permit on the target");
    let third = take(nb, key, "w3").expect("the third permit");
    assert!(third > held[1], "{third} after {held:?}: a fence repeated");
    assert_eq!(take(nb, key, "w4"), None, "three permits, three holders");

    // Everyone leaves, the key is deleted, the slot moves on: its floor keeps fences rising.
    for token in ["w1", "w2", "w3"] {
        let released: i64 = nb.query(redis::cmd(RELEASE.name).arg(key).arg(token)).expect("RELEASE");
        assert_eq!(released, 1, "{token}");
    }
    let deleted: i64 = nb.cmd(&["DEL", key]).expect("DEL");
    assert_eq!(deleted, 1);
    let c = cluster.masters().into_iter().find(|&m| m != a && m != b).expect("a third master");
    let migration = cluster.begin_slot_migration(slot, c);
    migration.move_keys();
    migration.finish();
    let next = take(&cluster.nodes()[c], key, "w5").expect("a fresh key");
    assert!(next > third, "{next} after {third} on the key's third node: a fence repeated");
}

/// `ACQUIRE key token TTL`, with `SHARED` when `shared`, on `node`: the fence, or `None`.
fn take_rw(node: &Server, key: &str, token: &str, shared: bool) -> Option<u64> {
    let mut cmd = redis::cmd(ACQUIRE.name);
    cmd.arg(key).arg(token).arg(TTL);
    if shared {
        cmd.arg(SHARED);
    }
    node.query(&cmd)
        .unwrap_or_else(|e| panic!("ACQUIRE {key} {token} on {}: {}", node.addr(), error_text(&e)))
}

#[test]
fn read_leases_migrate_with_their_readers_and_the_next_writer_is_above_them() {
    let cluster = Cluster::builder().masters(3).start();
    let key = "rwk";
    let Route { slot, b, na, nb, .. } = route(&cluster, key);
    let writer = take_rw(na, key, "w0", false).expect("the write lease");
    let released: i64 = na.query(redis::cmd(RELEASE.name).arg(key).arg("w0")).expect("RELEASE");
    assert_eq!(released, 1);
    let readers: Vec<u64> =
        ["r1", "r2"].iter().map(|t| take_rw(na, key, t, true).expect("a read lease")).collect();
    assert!(writer < readers[0] && readers[0] < readers[1]);

    let migration = cluster.begin_slot_migration(slot, b);
    migration.move_keys();
    migration.finish();

    let moved = semaphore_on(nb, key);
    assert!(moved.is_shared(), "{moved:?}");
    assert_eq!(
        moved.holders.iter().map(|h| h.fence).collect::<Vec<_>>(),
        readers,
        "same readers, same fences"
    );
    assert_eq!(take_rw(nb, key, "r1", true), Some(readers[0]), "a reader re-enters on the target");
    assert_eq!(take_rw(nb, key, "w1", false), None, "a writer still waits for the readers");
    let third = take_rw(nb, key, "r3", true).expect("another reader");
    assert!(third > readers[1], "{third} after {readers:?}: a fence repeated");
    for token in ["r1", "r2", "r3"] {
        let released: i64 = nb.query(redis::cmd(RELEASE.name).arg(key).arg(token)).expect("RELEASE");
        assert_eq!(released, 1, "{token}");
    }
    let next = take_rw(nb, key, "w1", false).expect("the writer, once the readers left");
    assert!(next > third, "{next} after {third}: a fence repeated");
}
