//! `fencedlock list [PREFIX]`: the held locks and semaphores with fence, holders, labels and
//! time left, on a Redis Cluster (every primary's) and on the Functions engine; a bounded
//! `SCAN` that says when it stopped early, never `KEYS`, and a prefix taken as text.

use std::collections::{BTreeMap, BTreeSet};

use harness::Cluster;
use serde_json::Value;

use crate::support::*;

fn listed(out: &Outcome) -> Value {
    assert_eq!(out.code(), 0, "{out:?}");
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("one JSON object ({e}): {out:?}"))
}

/// Each listed lock's key and the field `name` of it.
fn field(list: &Value, name: &str) -> BTreeMap<String, Value> {
    list["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .map(|lock| (lock["key"].as_str().unwrap().to_owned(), lock[name].clone()))
        .collect()
}

#[test]
fn a_cluster_lists_the_held_locks_of_every_primary() {
    let cluster = Cluster::builder().masters(3).start();
    let cli = |args: &[&str]| run_on_cluster(&cluster, args);
    let mut fences = BTreeMap::new();
    for i in 0..9 {
        let key = format!("ls:job:{i}");
        let out = cli(&["acquire", &key, "--ttl", "60s", "--label", &format!("worker-{i}")]);
        assert_eq!(out.code(), 0, "{out:?}");
        fences.insert(key, out.stdout.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap());
    }
    // A released lock is not held; a semaphore shows its holders; another prefix is not shown.
    let out = cli(&["acquire", "ls:job:gone", "--ttl", "60s"]);
    let token = out.stdout.split_whitespace().next().expect("TOKEN FENCE").to_owned();
    assert_eq!(cli(&["release", "ls:job:gone", "--token", &token]).code(), 0);
    for label in ["a", "b"] {
        assert_eq!(
            cli(&["acquire", "ls:pool", "--permits", "3", "--ttl", "60s", "--label", label]).code(),
            0
        );
    }
    assert_eq!(cli(&["acquire", "other:x", "--ttl", "60s"]).code(), 0);

    let list = listed(&cli(&["list", "ls:", "--json"]));
    assert_eq!(list["complete"], true, "{list}");
    let servers = field(&list, "server");
    let keys: BTreeSet<&String> = servers.keys().collect();
    let mut expected: BTreeSet<String> = fences.keys().cloned().collect();
    expected.insert("ls:pool".into());
    assert_eq!(keys, expected.iter().collect(), "held locks under ls: on every primary");
    let mut primaries = BTreeSet::new();
    for (key, server) in &servers {
        let owner = &cluster.nodes()[cluster.slot_owner(cluster.key_slot(key))];
        assert_eq!(server.as_str(), Some(owner.addr().as_str()), "{key} is listed with its primary");
        primaries.insert(owner.addr());
    }
    assert_eq!(primaries.len(), 3, "keys from all three primaries");
    let (labels, listed_fences) = (field(&list, "label"), field(&list, "fence"));
    for (key, fence) in &fences {
        assert_eq!(listed_fences[key], *fence, "{key}");
        assert_eq!(labels[key].as_str(), Some(format!("worker-{}", &key["ls:job:".len()..]).as_str()));
    }
    let pool = list["locks"].as_array().unwrap().iter().find(|l| l["key"] == "ls:pool").unwrap();
    let holders: Vec<&str> =
        pool["holders"].as_array().unwrap().iter().map(|h| h["label"].as_str().unwrap()).collect();
    assert_eq!((pool["permits"].as_u64(), holders), (Some(3), vec!["a", "b"]));

    // The text: a line per lock (with its primary), a line per semaphore holder.
    let out = cli(&["ls", "ls:job:"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(out.stdout.lines().count(), 9, "{out:?}");
    assert!(
        out.stdout
            .lines()
            .all(|l| l.contains("held") && l.contains("label \"worker-") && l.contains(" on 127.0.0.1:")),
        "{out:?}"
    );
}

#[test]
fn the_functions_engine_lists_its_lock_keys_and_no_other_hash() {
    let server = Server::builder().managed().start();
    let url = server.url();
    for key in ["fn:a", "fn:b"] {
        let out = run(&["acquire", key, "--ttl", "60s", "--label", key, "--redis", &url]);
        assert_eq!(out.code(), 0, "{out:?}");
    }
    // A waiter leaves the key's wake-up list behind; every grant writes its slot's floor.
    let out = run(&["acquire", "fn:a", "--wait", "100ms", "--redis", &url]);
    assert_eq!(out.code(), BUSY, "{out:?}");
    // An application's hash under the same prefix.
    let _: () = server.cmd(&["HSET", "fn:app", "fence", "7", "holders", "x"]).unwrap();
    let list = listed(&run(&["list", "--json", "--redis", &url]));
    let engines = field(&list, "engine");
    assert_eq!(engines.keys().collect::<Vec<_>>(), ["fn:a", "fn:b"], "{list}");
    assert!(engines.values().all(|e| e == "functions"), "{list}");
    assert_eq!(field(&list, "label")["fn:b"], "fn:b");
    // `--all` also shows a key nobody holds: its fence.
    let token_out = run(&["acquire", "fn:c", "--ttl", "60s", "--redis", &url]);
    let token = token_out.stdout.split_whitespace().next().unwrap().to_owned();
    assert_eq!(run(&["release", "fn:c", "--token", &token, "--redis", &url]).code(), 0);
    let all = listed(&run(&["list", "fn:", "--all", "--json", "--redis", &url]));
    assert_eq!(field(&all, "held").get("fn:c"), Some(&Value::Bool(false)), "{all}");
    assert!(!field(&listed(&run(&["list", "fn:", "--json", "--redis", &url])), "key").contains_key("fn:c"));
}

#[test]
fn the_scan_is_bounded_takes_the_prefix_as_text_and_never_runs_keys() {
    let server = Server::start();
    let url = server.url();
    // 3,000 other keys for the scan to walk.
    let mut mset = vec!["MSET".to_string()];
    for i in 0..3000 {
        mset.extend([format!("filler:{i}"), "x".into()]);
    }
    let _: () = server.cmd(&mset).unwrap();
    for key in ["a*b", "axb", "a?c"] {
        assert_eq!(run(&["acquire", key, "--ttl", "60s", "--redis", &url]).code(), 0);
    }
    // This user may not run KEYS: a listing that used it would fail.
    let _: () = server.cmd(&["ACL", "SETUSER", "default", "-keys"]).unwrap();

    let list = listed(&run(&["list", "a*", "--json", "--redis", &url]));
    assert_eq!(field(&list, "key").keys().collect::<Vec<_>>(), ["a*b"], "a prefix, not a pattern: {list}");
    assert_eq!(list["complete"], true);

    // A bound below the keyspace: it stops, says so, and still exits 0.
    let out = run(&["list", "--count", "100", "--max-scan", "500", "--json", "--redis", &url]);
    let partial = listed(&out);
    assert_eq!(partial["complete"], false, "{partial}");
    assert!(partial["visited"].as_u64().is_some_and(|v| (500..=600).contains(&v)), "{partial}");
    assert!(out.stderr.contains("incomplete") && out.stderr.contains("--max-scan"), "{out:?}");
    let out = run(&["list", "--count", "100", "--max-scan", "500", "--redis", &url]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stderr.contains("the listing is incomplete"), "{out:?}");
}
