//! `--cluster`: the `--redis` URLs are nodes of one Redis Cluster, and every subcommand sends
//! each key to its slot's primary. Without it, a node that does not own the key is a usage
//! error that names the flag, at once, whatever `--wait` and `--on-unavailable` say.

use std::time::Duration;

use harness::Cluster;

use crate::support::*;

#[test]
fn every_subcommand_routes_each_key_to_its_slots_primary() {
    let cluster = Cluster::builder().masters(3).start();
    let cli = |args: &[&str]| run_on_cluster(&cluster, args);
    let mut owners = std::collections::HashSet::new();
    for i in 0..12 {
        let key = format!("cli:cluster:{i}");
        let out = cli(&["acquire", "-k", &key, "--ttl", "30s"]);
        assert_eq!(out.code(), 0, "{out:?}");
        let (token, fence) = printed_lease(&out);
        let owner = cluster.slot_owner(cluster.key_slot(&key));
        owners.insert(owner);
        let status = cluster.nodes()[owner].lock_status(&key).expect("held on the slot's primary");
        assert_eq!((status.fence, status.held), (fence, true));

        assert_eq!(cli(&["acquire", "-k", &key]).code(), BUSY);
        let out = cli(&["status", "-k", &key]);
        assert_eq!(out.code(), 0, "{out:?}");
        assert!(out.stdout.contains(&fence.to_string()), "{out:?}");
        assert_eq!(cli(&["renew", "-k", &key, "--ttl", "60s", "--token", &token]).code(), 0);
        assert_eq!(cli(&["release", "-k", &key, "--token", &token]).code(), 0);
        assert!(!cluster.nodes()[owner].lock_held(&key));
    }
    assert_eq!(owners.len(), 3, "twelve keys on all three primaries");

    // `run`, waiting on the slot's primary until the holder releases.
    let key = "cli:cluster:run";
    let out = cli(&["acquire", "-k", key, "--ttl", "1s"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let waited = cli(&["run", "-k", key, "--wait", "10s", "--", "true"]);
    assert_eq!(waited.code(), 0, "granted when the first lease ended: {waited:?}");
    // Permits on a cluster key: two holders, the third is busy.
    for expected in [0, 0, BUSY] {
        let out = cli(&["acquire", "-k", "cli:cluster:sem", "--permits", "2", "--ttl", "30s"]);
        assert_eq!(out.code(), expected, "{out:?}");
    }
}

#[test]
fn a_cluster_node_without_cluster_is_a_usage_error_that_names_the_flag() {
    let cluster = Cluster::builder().masters(3).start();
    let node = &cluster.urls()[0];
    // A key whose slot another node owns.
    let key = (0..)
        .map(|i| format!("cli:moved:{i}"))
        .find(|key| cluster.slot_owner(cluster.key_slot(key)) != 0)
        .expect("a key on another node");
    let dir = scratch();
    let marker = p(dir.path(), "ran");
    let script = format!("touch '{}'", marker.display());
    for policy in ["fail", "skip", "run"] {
        let out = run(&[
            "run",
            "-k",
            &key,
            "--redis",
            node,
            "--wait",
            "10s",
            "--on-unavailable",
            policy,
            "--",
            "sh",
            "-c",
            &script,
        ]);
        assert_one_line_error(&out, USAGE, &["--cluster"]);
        assert!(out.elapsed < Duration::from_secs(5), "no waiting on a MOVED: {out:?}");
        assert!(!marker.exists(), "{policy}: a misrouted lock must not run the command unlocked");
    }
}
