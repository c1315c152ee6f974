//! `FENCEDLOCK.ACQUIREALL` on a Redis Cluster (issue #36): the keys of one set must share a
//! slot (hash tags), which the server checks before the module runs (`CROSSSLOT`); and a
//! set's fences stay above every fence its slot granted when the keys were deleted and the
//! slot moved to a master with a much lower high-water mark (the slot's floor covers them).

use fencedlock_protocol::command::ACQUIREALL;
use harness::{error_text, Cluster, Server};

use crate::floors::{other_master, warm_up};

/// `ACQUIREALL` of `keys` for `token` on `node`: the fences (panics on nil or an error).
fn all(node: &Server, keys: &[&str], token: &str) -> Vec<u64> {
    let count = keys.len().to_string();
    let mut args = vec![ACQUIREALL.name, &count];
    args.extend(keys);
    args.extend([token, "60000"]);
    let fences: Option<Vec<u64>> = node
        .cmd(&args)
        .unwrap_or_else(|e| panic!("ACQUIREALL {keys:?} on {}: {}", node.addr(), error_text(&e)));
    fences.unwrap_or_else(|| panic!("ACQUIREALL {keys:?} was refused"))
}

#[test]
fn a_set_shares_a_slot_and_its_fences_outlive_a_migration() {
    let cluster = Cluster::builder().masters(3).start();
    let keys = ["{invoice-7}:ledger", "{invoice-7}:mail", "{invoice-7}:pdf"];
    let slot = cluster.key_slot(keys[0]);
    let a = cluster.slot_owner(slot);
    let b = other_master(&cluster, a);
    let (na, nb) = (&cluster.nodes()[a], &cluster.nodes()[b]);

    // Keys of two slots: the server's CROSSSLOT, before the module sees the request.
    let spread = ["{invoice-7}:ledger", "elsewhere"];
    assert_ne!(cluster.key_slot(spread[1]), slot);
    let mut args = vec![ACQUIREALL.name, "2"];
    args.extend(spread);
    args.extend(["t", "60000"]);
    let err = na.cmd::<Option<Vec<u64>>>(&args).expect_err("keys in two slots");
    assert_eq!(err.code(), Some("CROSSSLOT"), "{}", error_text(&err));
    assert!(na.lock_status(keys[0]).is_none(), "nothing was granted");
    // A master that does not own the slot redirects the whole set to the one that does.
    let mut here = vec![ACQUIREALL.name, "3"];
    here.extend(keys);
    here.extend(["t", "60000"]);
    let err = nb.cmd::<Option<Vec<u64>>>(&here).expect_err("not the slot's owner");
    assert_eq!(err.code(), Some("MOVED"), "{}", error_text(&err));

    // The source's mark far above the target's; the set granted, released and deleted.
    warm_up(&cluster, a, 50, &[slot]);
    let old = all(na, &keys, "worker-1");
    for key in keys {
        let released: i64 = na.cmd(&["FENCEDLOCK.RELEASE", key, "worker-1"]).expect("RELEASE");
        assert_eq!(released, 1);
        let deleted: i64 = na.cmd(&["DEL", key]).expect("DEL");
        assert_eq!(deleted, 1);
    }
    let top = old.iter().copied().max().expect("three fences");
    assert!(nb.high_water() < top, "the target issued fewer fences: {} vs {top}", nb.high_water());

    let migration = cluster.begin_slot_migration(slot, b);
    migration.move_keys();
    migration.finish();
    let new = all(nb, &keys, "worker-2");
    assert!(new.iter().all(|f| *f > top), "fences {new:?} on the target after {old:?} on the source");
}
