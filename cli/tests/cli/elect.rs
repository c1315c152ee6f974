//! `fencedlock elect NAME -- CMD` and `fencedlock leader NAME [--watch]`: the command runs while
//! its process leads, with the epoch in its environment; leadership passes to the next
//! candidate when the command exits, and a leader whose server stops answering (SIGSTOP) stops
//! its command before anyone else can be elected; a watcher sees every leader, one that came and
//! went between two of its polls included.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::*;

fn read_number(path: &Path) -> u64 {
    fs::read_to_string(path).unwrap().trim().parse().unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn leader_json(url: &str, key: &str) -> Value {
    let out = run(&["leader", key, "--json", "--redis", url]);
    assert_eq!(out.code(), 0, "{out:?}");
    serde_json::from_str(&out.stdout).expect("JSON")
}

#[test]
fn the_next_candidate_leads_when_the_leaders_command_exits() {
    let server = Server::start();
    let url = server.url();
    let dir = scratch();
    let (started, go) = (p(dir.path(), "started"), p(dir.path(), "go"));
    let first =
        format!("echo $FENCEDLOCK_EPOCH > '{}'; {}", p(dir.path(), "a").display(), hold_until(&started, &go));
    let a = spawn(&["elect", "sched", "--ttl", "2s", "--label", "A", "--redis", &url, "-c", &first]);
    wait_for_file(&started, HANG);
    let epoch_a = read_number(&p(dir.path(), "a"));
    let second = format!(
        "echo $FENCEDLOCK_EPOCH $FENCEDLOCK_FENCE $FENCEDLOCK_KEY > '{}'",
        p(dir.path(), "b").display()
    );
    let b = spawn(&["elect", "sched", "--ttl", "2s", "--label", "B", "--redis", &url, "-c", &second]);
    // A leads, B waits (its command has not run), and anyone can ask who leads.
    let now = leader_json(&url, "sched");
    assert_eq!((now["leader"].as_str(), now["epoch"].as_u64()), (Some("A"), Some(epoch_a)), "{now}");
    let out = run(&["leader", "sched", "--redis", &url]);
    assert!(out.stdout.starts_with(&format!("sched  leader \"A\"  epoch {epoch_a}  ")), "{out:?}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(!p(dir.path(), "b").exists(), "B's command ran while A led");

    fs::write(&go, "").unwrap();
    assert_eq!(a.finish().code(), 0, "A's command exited 0");
    let out = b.finish();
    assert_eq!(out.code(), 0, "{out:?}");
    let b_env = fs::read_to_string(p(dir.path(), "b")).unwrap();
    let words: Vec<&str> = b_env.split_whitespace().collect();
    let epoch_b: u64 = words[0].parse().unwrap();
    assert!(epoch_b > epoch_a, "a later leader has a higher epoch: {b_env}");
    assert_eq!(words[1..], [words[0], "sched"], "FENCEDLOCK_FENCE is the epoch: {b_env}");
    assert_eq!(leader_json(&url, "sched")["leader"], Value::Null, "B resigned when its command exited");

    // A command that fails: its exit code is elect's, and leadership is given back.
    let out = run(&["elect", "sched", "--redis", &url, "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.code(), 3, "{out:?}");
    assert_eq!(leader_json(&url, "sched")["leader"], Value::Null);
}

#[test]
fn a_leader_whose_server_is_paused_stops_its_command_and_another_leads_after() {
    let server = Server::start();
    let url = server.url();
    let dir = scratch();
    let pid_file = p(dir.path(), "a.pid");
    // Each candidate's lease is 1.5 s, and each request waits 200 ms at most.
    let candidate = |label: &str, command: &str| {
        spawn(&[
            "elect",
            "paused",
            "--ttl",
            "1500ms",
            "--timeout",
            "200ms",
            "--label",
            label,
            "--redis",
            &url,
            "-c",
            command,
        ])
    };
    let a = candidate("A", &format!("echo $$ > '{}'; exec sleep 60", pid_file.display()));
    wait_for_file(&pid_file, HANG);
    let a_pid = fs::read_to_string(&pid_file).unwrap().trim().to_owned();
    let epoch_a = leader_json(&url, "paused")["epoch"].as_u64().expect("A leads");
    let b_file = p(dir.path(), "b");
    let b = candidate("B", &format!("echo $FENCEDLOCK_EPOCH > '{}'", b_file.display()));
    std::thread::sleep(Duration::from_millis(200));

    // The server stops answering for longer than the lease: A cannot renew, so it stops its
    // command before its lease could end on the server, and nobody can be elected meanwhile.
    server.pause();
    let paused = Instant::now();
    let out = a.finish_within(Duration::from_secs(10));
    let stopped_after = paused.elapsed();
    assert_eq!(out.code(), LEASE_LOST, "{out:?}");
    assert!(out.stderr.contains("leadership of \"paused\""), "{out:?}");
    assert!(!alive(&a_pid), "A's command is gone");
    assert!(stopped_after < Duration::from_millis(1500), "stopped within the lease: {stopped_after:?}");
    std::thread::sleep(Duration::from_millis(1500).saturating_sub(paused.elapsed()));
    server.resume();

    // B, still campaigning, is elected once the server answers again, with a higher epoch.
    let out = b.finish();
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(read_number(&b_file) > epoch_a);
}

#[test]
fn a_watcher_sees_a_leader_shorter_than_its_poll() {
    let server = Server::start();
    let url = server.url();
    let dir = scratch();
    let lines = p(dir.path(), "watch");
    // A poll every 2 s; the leaders below come and go within milliseconds.
    let script = format!(
        "exec '{}' leader quick --watch --interval 2s --json --redis '{url}' > '{}'",
        env!("CARGO_BIN_EXE_fencedlock"),
        lines.display()
    );
    let watcher = spawn_cmd(Command::new("sh").arg("-c").arg(&script));
    let read = || fs::read_to_string(&lines).unwrap_or_default();
    let deadline = Instant::now() + HANG;
    while read().is_empty() {
        assert!(Instant::now() < deadline, "no first line");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut epochs = Vec::new();
    for label in ["one", "two"] {
        let out = run(&["elect", "quick", "--label", label, "--json", "--redis", &url, "--", "true"]);
        assert_eq!(out.code(), 0, "{out:?}");
        let elected: Value = serde_json::from_str(out.stderr.lines().next().unwrap()).unwrap();
        epochs.push(elected["epoch"].as_u64().unwrap());
    }
    let wanted: Vec<Value> = ["one", "two"]
        .iter()
        .zip(&epochs)
        .map(|(label, epoch)| serde_json::json!({ "key": "quick", "leader": label, "epoch": epoch, "pttl_ms": null, "leading": false }))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    let seen = loop {
        let seen: Vec<Value> = read().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        if seen.len() >= 4 || Instant::now() >= deadline {
            break seen;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    watcher.signal(libc::SIGTERM);
    assert_eq!(watcher.finish().code(), 0);
    let none = serde_json::json!({ "key": "quick", "leader": null, "epoch": null, "pttl_ms": null });
    assert_eq!(seen, [none.clone(), wanted[0].clone(), wanted[1].clone(), none], "every leader, in order");
}
