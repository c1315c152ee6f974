//! Fences across slot migration when the lock keys themselves are gone (issue #10). The
//! high-water mark is per server and does not travel with a slot, so each slot that granted a
//! lease keeps a floor key (`fencedlock:floor:{tag}`) at or above every fence it granted; the
//! floor migrates with the slot and lifts the new owner's mark. Each test gives the source a
//! much higher mark than the target, so without the floor the target would repeat fences.
//!
//! Cases: the issue's repro (DEL, then a step-by-step `MIGRATE`), the same after a reclaim,
//! `redis-cli --cluster reshard`, reclaim racing a migration in progress, and a failover right
//! after a reclaim.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use fencedlock_protocol::command::ACQUIRE;
use fencedlock_protocol::config::RECLAIM_AFTER_MS;
use harness::redis;
use harness::{
    epoch_of, error_text, is_floor_key, key_in_slot, key_slot, poll, Cluster, LockStatus, Server,
    FLOOR_KEY_PREFIX,
};

use crate::{grant, release, replica_of};

const RECLAIM: &str = RECLAIM_AFTER_MS.full_name;
const LONG_TTL: u64 = 60_000;
/// Bound on waiting for a reclaim (the sweep runs every 100 ms).
const GONE_WITHIN: Duration = Duration::from_secs(5);

fn reclaimed(node: &Server) -> u64 {
    node.fencedlock_counter("fencedlock_reclaimed")
}

/// Another master than `than`.
pub(crate) fn other_master(cluster: &Cluster, than: usize) -> usize {
    cluster.masters().into_iter().find(|&m| m != than).expect("another master")
}

/// The floor key of `slot` on `node` (which serves the slot) and its status. There is at most
/// one; it is named as documented, hashes to the slot, and is a lock value without a holder.
fn floor_of(cluster: &Cluster, node: usize, slot: u16) -> Option<(String, LockStatus)> {
    let floors: Vec<String> =
        cluster.keys_in_slot(node, slot).into_iter().filter(|k| k.starts_with(FLOOR_KEY_PREFIX)).collect();
    assert!(floors.len() <= 1, "one floor key per slot: {floors:?}");
    let name = floors.into_iter().next()?;
    assert!(is_floor_key(&name), "{name}: fencedlock:floor:{{decimal tag}}");
    assert_eq!(key_slot(name.as_bytes()), slot, "{name} hashes to its slot");
    let server = &cluster.nodes()[node];
    let st = server
        .lock_status(&name)
        .unwrap_or_else(|| panic!("{name} on {} is not a lock value", server.addr()));
    assert!(!st.held && st.remaining.is_none(), "a floor has no holder: {st:?}");
    Some((name, st))
}

/// `n` grants (taken and released) on master `node`, on keys in its slots other than `avoid`:
/// pushes its high-water mark above the other masters'. Returns the largest fence.
pub(crate) fn warm_up(cluster: &Cluster, node: usize, n: usize, avoid: &[u16]) -> u64 {
    let owned: HashSet<u16> = cluster.slots_of(node).into_iter().collect();
    let server = &cluster.nodes()[node];
    let keys: Vec<String> = (0..100_000)
        .map(|i| format!("warm:{i}"))
        .filter(|k| {
            let slot = key_slot(k.as_bytes());
            owned.contains(&slot) && !avoid.contains(&slot)
        })
        .take(n)
        .collect();
    assert_eq!(keys.len(), n);
    keys.iter()
        .map(|k| {
            let fence = grant(server, k, "warm", LONG_TTL);
            release(server, k, "warm");
            fence
        })
        .max()
        .unwrap_or(0)
}

fn wait_gone(node: &Server, keys: &[String]) {
    poll(&format!("{} keys to be reclaimed on {}", keys.len(), node.addr()), GONE_WITHIN, || {
        keys.iter().all(|k| node.lock_status(k).is_none())
    });
}

#[test]
fn issue_repro_a_deleted_lock_key_migrated_step_by_step_gets_a_higher_fence() {
    let cluster = Cluster::builder().masters(3).start();
    let key = "lockk";
    let slot = cluster.key_slot(key);
    assert_eq!(slot, key_slot(key.as_bytes()));
    let a = cluster.slot_owner(slot);
    let b = other_master(&cluster, a);
    let (na, nb) = (&cluster.nodes()[a], &cluster.nodes()[b]);

    let warm = warm_up(&cluster, a, 50, &[slot]);
    let old = grant(na, key, "worker-1", LONG_TTL);
    assert!(old > warm);
    release(na, key, "worker-1");
    let deleted: i64 = na.cmd(&["DEL", key]).expect("DEL");
    assert_eq!(deleted, 1);
    let floor = floor_of(&cluster, a, slot);
    assert!(nb.high_water() < old, "the target issued fewer fences: {} vs {old}", nb.high_water());

    // The issue's steps: IMPORTING / MIGRATING, MIGRATE what is left, SETSLOT NODE.
    let migration = cluster.begin_slot_migration(slot, b);
    migration.move_keys();
    migration.finish();
    let new = grant(nb, key, "worker-2", LONG_TTL);
    eprintln!(
        "{key}: fence {old} on the source; {new} on the target after DEL + migration (floor {floor:?})"
    );
    assert!(new > old, "{key}: fence {new} on the target after {old} on the source: a fence repeated");

    // How: the slot's floor key, the only key left in the slot after the DEL, moved too.
    let (floor_name, floor) = floor.expect("the slot that granted has a floor key");
    assert!(floor.fence >= old, "floor {} below the fence {old} it covers", floor.fence);
    assert!(new > floor.fence, "loading the floor lifted the target's mark");
    let (moved_name, moved) = floor_of(&cluster, b, slot).expect("the floor moved with the slot");
    assert_eq!(moved_name, floor_name);
    assert!(moved.fence > new, "raised again, with headroom, by the grant on the target");
    let mut in_slot = cluster.keys_in_slot(b, slot);
    in_slot.sort();
    assert_eq!(in_slot, vec![floor_name, key.to_string()], "the floor and the lock key");
}

#[test]
fn a_reclaimed_lock_key_migrated_gets_a_higher_fence_and_floors_are_never_reclaimed() {
    let cluster = Cluster::builder().masters(3).node(|b| b.arg(RECLAIM, "0")).start();
    let key = "lockk";
    let slot = cluster.key_slot(key);
    let a = cluster.slot_owner(slot);
    let b = other_master(&cluster, a);
    let (na, nb) = (&cluster.nodes()[a], &cluster.nodes()[b]);

    warm_up(&cluster, a, 50, &[slot]);
    let old = grant(na, key, "worker-1", LONG_TTL);
    release(na, key, "worker-1");
    wait_gone(na, &[key.to_string()]);
    // Every lock key on the source is gone now (the warm-up keys were released too); only
    // floors are left, and they stay through several sweeps with retention 0.
    std::thread::sleep(Duration::from_millis(400));
    let left = na.scan_match("*");
    assert_eq!(reclaimed(na), 51);
    assert!(nb.high_water() < old);

    let migration = cluster.begin_slot_migration(slot, b);
    migration.move_keys();
    migration.finish();
    let new = grant(nb, key, "worker-2", LONG_TTL);
    eprintln!("{key}: fence {old} on the source, reclaimed there; {new} on the target after the migration");
    assert!(new > old, "{key}: fence {new} on the target after {old} on the source: a fence repeated");

    assert!(!left.is_empty() && left.iter().all(|k| is_floor_key(k)), "only floor keys stayed: {left:?}");
    // What the index still holds on the source are the 51 released keys' entries from their
    // grants, due at their long deadlines and skipped as stale then; no floor is filed.
    assert_eq!(
        na.fencedlock_counter("fencedlock_reclaim_tracked"),
        51,
        "only the lock keys' grant entries, no floor ({} floors)",
        left.len()
    );
    let (_, floor) = floor_of(&cluster, b, slot).expect("the floor of the reclaimed key's slot moved");
    assert!(floor.fence > new);
    // The moved floor stays on the target too.
    release(nb, key, "worker-2");
    wait_gone(nb, &[key.to_string()]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(floor_of(&cluster, b, slot).map(|(_, st)| st.fence), Some(floor.fence));
}

#[test]
fn redis_cli_reshard_carries_the_floors_of_deleted_and_reclaimed_keys() {
    let cluster = Cluster::builder().masters(3).start();
    let a = cluster.slot_owner(0);
    let b = other_master(&cluster, a);
    let (na, nb) = (&cluster.nodes()[a], &cluster.nodes()[b]);
    // redis-cli moves the source's lowest slots.
    const MOVED: usize = 40;
    let moving: Vec<u16> = cluster.slots_of(a)[..MOVED].to_vec();
    warm_up(&cluster, a, 100, &moving);

    let key = |i: usize| key_in_slot("resh:", moving[i * 7]);
    let (deleted, reclaimed_keys, held): (Vec<String>, Vec<String>, Vec<String>) =
        ((0..2).map(key).collect(), (2..4).map(key).collect(), (4..6).map(key).collect());
    // The held leases first, with the lowest fences: the target's mark rises to theirs when
    // they arrive, which is below the fences of the keys deleted or reclaimed before.
    let mut old: HashMap<String, u64> = HashMap::new();
    for k in &held {
        old.insert(k.clone(), grant(na, k, "holder", LONG_TTL));
    }
    for k in deleted.iter().chain(&reclaimed_keys) {
        old.insert(k.clone(), grant(na, k, "t", LONG_TTL));
        release(na, k, "t");
    }
    for k in &deleted {
        let n: i64 = na.cmd(&["DEL", k]).expect("DEL");
        assert_eq!(n, 1);
    }
    na.config_set(RECLAIM, "0");
    wait_gone(na, &reclaimed_keys);
    na.config_set(RECLAIM, "600000");
    let top = *old.values().max().expect("fences");
    assert!(nb.high_water() < top);

    let out = cluster.reshard_with_redis_cli(a, b, MOVED, &[]);
    for &slot in &moving {
        assert_eq!(cluster.slot_owner(slot), b, "slot {slot} moved\n{out}");
    }
    for k in &held {
        let st = nb.lock_status(k).unwrap_or_else(|| panic!("{k}: the held lease moved"));
        assert_eq!((st.fence, st.held), (old[k], true), "{k}");
    }
    for k in deleted.iter().chain(&reclaimed_keys) {
        let new = grant(nb, k, "next", LONG_TTL);
        assert!(new > old[k], "{k}: fence {new} on the target after {} on the source", old[k]);
    }
    for (i, &slot) in moving.iter().enumerate().filter(|(i, _)| i % 7 == 0).take(6) {
        assert!(floor_of(&cluster, b, slot).is_some(), "slot {slot} (#{i}): the floor moved with it");
    }
}

#[test]
fn reclaim_racing_a_slot_migration_never_repeats_a_fence() {
    let cluster = Cluster::builder().masters(3).start();
    let slot = cluster.key_slot("{race}");
    let a = cluster.slot_owner(slot);
    let b = other_master(&cluster, a);
    let (na, nb) = (&cluster.nodes()[a], &cluster.nodes()[b]);

    let held: Vec<String> = (0..20).map(|i| format!("{{race}}:held:{i}")).collect();
    let late: Vec<String> = (0..50).map(|i| format!("{{race}}:late:{i}")).collect();
    let idle: Vec<String> = (0..300).map(|i| format!("{{race}}:idle:{i}")).collect();
    let mut old: HashMap<String, u64> = HashMap::new();
    for k in held.iter().chain(&late) {
        old.insert(k.clone(), grant(na, k, "holder", LONG_TTL));
    }
    for k in &idle {
        old.insert(k.clone(), grant(na, k, "t", LONG_TTL));
        release(na, k, "t");
    }
    let top = *old.values().max().expect("fences");
    assert_eq!(nb.high_water(), 0, "the target granted nothing yet");

    let migration = cluster.begin_slot_migration(slot, b);
    // The oldest idle keys and half the held ones move first.
    let first: Vec<&[u8]> = idle[..100].iter().chain(&held[..10]).map(|k| k.as_bytes()).collect();
    migration.move_these(&first);
    // Reclaim on both sides, in the middle of the migration.
    na.config_set(RECLAIM, "0");
    nb.config_set(RECLAIM, "0");
    poll("reclaim on the source and the target during the migration", GONE_WITHIN, || {
        reclaimed(na) > 0 && reclaimed(nb) > 0
    });
    // More leases end on the source while the rest of the slot moves in small batches: reclaim
    // and MIGRATE race for them.
    for k in &late {
        release(na, k, "holder");
    }
    migration.move_keys_in_batches(5, || std::thread::sleep(Duration::from_millis(5)));
    let (on_source, on_target) = (reclaimed(na), reclaimed(nb));
    poll("every idle key of the slot to be reclaimed", GONE_WITHIN, || {
        reclaimed(na) + reclaimed(nb) == (idle.len() + late.len()) as u64
    });
    migration.finish();
    eprintln!(
        "reclaimed during the migration: {on_source} on the source, {on_target} on the target (of {} idle keys)",
        idle.len() + late.len()
    );

    // The target keeps the held leases (and the floor).
    let left = cluster.keys_in_slot(b, slot);
    for k in &held {
        let st = nb.lock_status(k).unwrap_or_else(|| panic!("{k} was lost"));
        assert_eq!((st.fence, st.held), (old[k], true), "{k}");
    }
    // Every key, wherever it was reclaimed, gets a higher fence than it ever had.
    for k in idle.iter().chain(&late) {
        let new = grant(nb, k, "next", LONG_TTL);
        assert!(new > old[k] && new > top, "{k}: fence {new} after {} (slot max {top})", old[k]);
    }
    assert_eq!(left.len(), held.len() + 1, "held keys and the floor: {left:?}");
    let (_, floor) = floor_of(&cluster, b, slot).expect("the floor moved");
    assert!(floor.fence >= top, "floor {} below the slot's fences ({top})", floor.fence);
    for k in &held {
        release(nb, k, "holder");
        let new = grant(nb, k, "next", LONG_TTL);
        assert!(new > top, "{k}: {new}");
    }
}

#[test]
fn a_failover_right_after_a_reclaim_keeps_fences_rising() {
    let mut cluster =
        Cluster::builder().masters(3).replicas_per_master(1).node(|b| b.arg(RECLAIM, "200")).start();
    let slot = cluster.key_slot("{fo2}");
    let m = cluster.slot_owner(slot);
    let heir_port = replica_of(&cluster, m).port();
    let r = cluster.nodes().iter().position(|n| n.port() == heir_port).expect("the replica");

    let held: Vec<String> = (0..2).map(|i| format!("{{fo2}}:held:{i}")).collect();
    // Short leases: if the replica misses a release, the lease still ends soon.
    let idle: Vec<String> = (0..30).map(|i| format!("{{fo2}}:idle:{i}")).collect();
    let mut old: HashMap<String, u64> = HashMap::new();
    {
        let nm = &cluster.nodes()[m];
        for k in &held {
            old.insert(k.clone(), grant(nm, k, "holder", LONG_TTL));
        }
        for k in &idle {
            old.insert(k.clone(), grant(nm, k, "t", 2_000));
        }
        nm.wait_caught_up(&cluster.nodes()[r]);
        for k in &idle {
            release(nm, k, "t");
        }
        wait_gone(nm, &idle);
    }
    let old_mark = cluster.nodes()[m].high_water();

    // Right after the reclaim, the primary dies and its replica takes over.
    cluster.nodes_mut()[m].kill9();
    let heir = &cluster.nodes()[r];
    let _: () = heir
        .cmd(&["CLUSTER", "FAILOVER", "TAKEOVER"])
        .unwrap_or_else(|e| panic!("CLUSTER FAILOVER TAKEOVER: {}", error_text(&e)));
    poll("the replica to become master", Duration::from_secs(10), || {
        heir.info_field("replication", "role").as_deref() == Some("master")
    });
    assert_eq!(cluster.slot_owner(slot), r);

    // Whether the DELs arrived or not, the idle keys go (by the new master's own reclaim).
    poll("the idle keys to be gone on the new master", Duration::from_millis(2_200) + GONE_WITHIN, || {
        idle.iter().all(|k| heir.lock_status(k).is_none())
    });
    for k in &held {
        let st = heir.lock_status(k).unwrap_or_else(|| panic!("{k} was lost in the failover"));
        assert_eq!((st.fence, st.held), (old[k], true), "{k}");
    }
    assert!(
        floor_of(&cluster, r, slot).is_some_and(|(_, st)| st.fence >= old_mark),
        "the floor was replicated"
    );
    let mut new: HashMap<&str, u64> = HashMap::new();
    for k in &idle {
        let fence = grant(heir, k, "next", LONG_TTL);
        assert!(fence > old[k] && fence > old_mark, "{k}: {fence} after {} (old mark {old_mark})", old[k]);
        assert!(epoch_of(fence) > epoch_of(old_mark), "{k}: {fence} is in a new epoch");
        new.insert(k, fence);
    }
    // The new master's index still has entries of the deleted versions, due now: the keys,
    // held again, must stay.
    std::thread::sleep(Duration::from_millis(500));
    for k in &idle {
        let st = heir.lock_status(k).map(|st| (st.fence, st.held));
        assert_eq!(st, Some((new[k.as_str()], true)), "{k}: held again on the new master");
    }
    // The new master reclaims on its own.
    let before = reclaimed(heir);
    release(heir, &idle[0], "next");
    wait_gone(heir, &idle[..1]);
    assert_eq!(reclaimed(heir), before + 1);
    let again: Option<u64> =
        heir.query(redis::cmd(ACQUIRE.name).arg(&idle[0]).arg("again").arg(1000)).expect("grant");
    assert!(again.is_some_and(|f| f > old_mark));
}
