//! `fencedlock plan`: the lease-sizing numbers, as a table and as JSON, and its usage errors.
//! (The arithmetic's edge cases are unit tests in `cli/src/plan.rs`.)

use crate::support::*;

#[test]
fn the_lessons_example_as_json() {
    let out = run(&["plan", "--ttl", "30s", "--renew-every", "10s", "--pause", "45s", "--json"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("one JSON object");
    assert_eq!(v["ttl_ms"], 30_000);
    assert_eq!(v["renew_every_ms"], 10_000);
    // ttl - renew interval - the client's drift allowance (1% of the ttl + 2 ms).
    assert_eq!(v["drift_ms"], 302);
    assert_eq!(v["freeze_absorbed_ms"], 19_698);
    assert_eq!(v["failed_renewals_tolerated"], 1);
    assert_eq!(v["recovery_after_crash_ms"], 30_000);
    assert_eq!(v["stale_window_ms"], 25_000);
    let codes: Vec<&str> =
        v["warnings"].as_array().unwrap().iter().map(|w| w["code"].as_str().unwrap()).collect();
    assert_eq!(codes, ["pause_loses_lease", "pause_opens_stale_window"]);
}

#[test]
fn the_table_and_its_warnings() {
    let out = run(&["plan", "--ttl", "30s"]);
    assert_eq!(out.code(), 0, "{out:?}");
    // The default renewal is run's, ttl/3.
    for needle in
        ["renewed every", "10s", "freeze absorbed", "19.698s", "failed renewals tolerated", "up to 30s"]
    {
        assert!(out.stdout.contains(needle), "missing {needle:?}:\n{}", out.stdout);
    }
    assert!(!out.stdout.contains("warning"), "{}", out.stdout);
    let out = run(&["plan", "--ttl", "30s", "--renew-every", "30s"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.contains("warning: unsafe"), "{}", out.stdout);
    assert!(out.stdout.contains("lapses between renewals"), "{}", out.stdout);
    let out = run(&["plan", "--ttl", "30s", "--renew-every", "20s"]);
    assert!(out.stdout.contains("tolerates no failed renewal"), "{}", out.stdout);
    let out = run(&["plan", "--ttl", "30s", "--pause", "45s"]);
    assert!(out.stdout.contains("stale window 25s"), "{}", out.stdout);
}

#[test]
fn invalid_input_exits_64() {
    for args in [
        vec!["plan", "--ttl", "0s"],
        vec!["plan", "--ttl", "30s", "--renew-every", "0s"],
        // Above the largest fencedlock.max-ttl-ms any server can be set to (2^42 ms).
        vec!["plan", "--ttl", "1300000h"],
        vec!["plan", "--ttl", "30"],
        vec!["plan", "--pause", "soon"],
    ] {
        let out = run(&args);
        assert_eq!(out.code(), USAGE, "{args:?}: {out:?}");
        assert_eq!(out.stdout, "", "{args:?}");
        assert!(out.stderr.starts_with("fencedlock: error: "), "{args:?}: {out:?}");
    }
}

#[test]
fn help_explains_each_number() {
    let out = run(&["plan", "--help"]);
    assert_eq!(out.code(), 0, "{out:?}");
    for needle in ["freeze absorbed", "failed renewals", "recovery", "stale window", "Exit 0, or 64"] {
        assert!(out.stdout.contains(needle), "plan --help lacks {needle:?}");
    }
}
