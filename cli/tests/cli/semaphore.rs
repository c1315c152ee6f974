//! `--permits N`: a fenced semaphore from the command line. Concurrent `run`s of one key never
//! overlap more than N at a time and all run in the end (`--wait`), each with its own fence;
//! `status` shows the permits and holders (never a token); bad counts and several servers are
//! usage errors.

use std::fs;
use std::time::Duration;

use crate::support::*;

#[test]
fn at_most_n_runs_overlap_and_every_run_gets_its_turn() {
    const RUNS: usize = 4;
    let server = Server::start();
    let dir = scratch();
    let log = p(dir.path(), "log");
    // Appends of one short line each are atomic: the log orders starts and ends by timestamp.
    let script = format!(
        "echo \"$(date +%s%N) start $FENCEDLOCK_FENCE\" >> '{0}'; sleep 0.3; echo \"$(date +%s%N) end $FENCEDLOCK_FENCE\" >> '{0}'",
        log.display()
    );
    let url = server.url();
    let runs: Vec<Running> = (0..RUNS)
        .map(|_| {
            spawn_sh_under_run(
                &url,
                &["--permits", "2", "-k", "exports", "--ttl", "5s", "--wait", "20s"],
                &script,
            )
        })
        .collect();
    for run in runs {
        let out = run.finish();
        assert_eq!(out.code(), 0, "{out:?}");
    }
    let text = fs::read_to_string(&log).expect("the log");
    let mut events: Vec<(u128, bool, u64)> = text
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let [at, what, fence] = fields[..] else { panic!("bad log line {line:?}") };
            (at.parse().expect("time"), what == "start", fence.parse().expect("FENCEDLOCK_FENCE"))
        })
        .collect();
    events.sort_unstable();
    let (mut running, mut most) = (0usize, 0usize);
    for (_, start, _) in &events {
        running = if *start { running + 1 } else { running - 1 };
        most = most.max(running);
    }
    assert_eq!(most, 2, "at most 2 runs at once, and 2 did: {events:?}");
    let mut fences: Vec<u64> = events.iter().filter(|e| e.1).map(|e| e.2).collect();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), RUNS, "every run ran, each with a fence of its own: {events:?}");
    let status = server.semaphore_status("exports").expect("the key keeps its state");
    assert_eq!((status.permits, status.holders.len()), (2, 0), "every permit was released");
}

#[test]
fn status_shows_the_permits_and_holders_but_never_a_token() {
    let server = Server::start();
    let url = server.url();
    let acquire = || {
        let out = run(&["acquire", "--redis", &url, "--permits", "3", "-k", "slots", "--ttl", "30s"]);
        assert_eq!(out.code(), 0, "{out:?}");
        let line = out.stdout.trim().to_owned();
        let (token, fence) = line.split_once(' ').expect("TOKEN FENCE");
        (token.to_owned(), fence.parse::<u64>().expect("fence"))
    };
    let ((token_a, fence_a), (token_b, fence_b)) = (acquire(), acquire());
    assert!(fence_b > fence_a);

    let text = run(&["status", "--redis", &url, "-k", "slots"]);
    assert_eq!(text.code(), 0, "{text:?}");
    assert!(text.stdout.contains(&format!("slots  fence {fence_b}  permits 2 of 3 held")), "{text:?}");
    for fence in [fence_a, fence_b] {
        assert!(text.stdout.contains(&format!("\n  fence {fence}  held  ")), "{text:?}");
    }
    let json = run(&["status", "--redis", &url, "-k", "slots", "--json"]);
    assert_eq!(json.code(), 0, "{json:?}");
    let v: serde_json::Value = serde_json::from_str(json.stdout.trim()).expect("one JSON object");
    assert_eq!((v["permits"].as_u64(), v["held"].as_bool()), (Some(3), Some(true)), "{v}");
    let holders: Vec<u64> = v["holders"]
        .as_array()
        .expect("holders")
        .iter()
        .map(|h| h["fence"].as_u64().expect("fence"))
        .collect();
    assert_eq!(holders, [fence_a, fence_b]);
    assert!(v["holders"][0]["pttl_ms"].as_u64().is_some_and(|ms| ms > 0 && ms <= 30_000), "{v}");
    for token in [&token_a, &token_b] {
        assert!(!text.stdout.contains(token.as_str()) && !json.stdout.contains(token.as_str()));
    }

    // Another count while permits are held: refused as a usage error, nothing changed.
    let other = run(&["acquire", "--redis", &url, "--permits", "2", "-k", "slots", "--ttl", "30s"]);
    assert_one_line_error(&other, USAGE, &["--permits"]);
    assert_eq!(server.semaphore_status("slots").map(|s| (s.permits, s.holders.len())), Some((3, 2)));
    // A permit is released by its token, like a lease.
    let released = run(&["release", "--redis", &url, "-k", "slots", "--token", &token_a]);
    assert_eq!(released.code(), 0, "{released:?}");
    let left: Vec<u64> =
        server.semaphore_status("slots").expect("state").holders.iter().map(|h| h.fence).collect();
    assert_eq!(left, [fence_b]);
}

#[test]
fn a_count_out_of_range_or_several_servers_are_usage_errors() {
    for count in ["0", "1025", "many"] {
        let out = run(&["run", "--permits", count, "-k", "k", "--", "true"]);
        assert_one_line_error(&out, USAGE, &["--permits"]);
    }
    // Checked before anything connects: no server needed.
    let servers = "redis://127.0.0.1:1,redis://127.0.0.1:2,redis://127.0.0.1:3";
    let out = run(&["run", "--redis", servers, "--permits", "3", "-k", "k", "--", "true"]);
    assert_one_line_error(&out, USAGE, &["--permits 3", "single --redis", "up to 4 holders"]);
    let out = run(&["acquire", "--redis", servers, "--permits", "3", "-k", "k"]);
    assert_one_line_error(&out, USAGE, &["single --redis"]);
    assert!(out.elapsed < Duration::from_secs(2), "{out:?}");
}
