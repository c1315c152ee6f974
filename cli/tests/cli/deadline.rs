//! The command never outlives its lease: after a lost lease, SIGKILL comes at the end of
//! --kill-grace or of the lease's local validity, whichever is first, even for a command
//! that ignores SIGTERM.

use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

/// Timing slack for process starts and the renewal round trip on a loaded machine.
const SLACK: Duration = Duration::from_millis(500);

/// Runs a SIGTERM-ignoring command under `--ttl TTL --kill-grace GRACE`, deletes the key as
/// soon as it runs (the first renewal, at ttl/3, is refused), and returns when its last
/// process was gone, measured from before fencedlock started (so never less than from the
/// grant), with fencedlock's outcome.
fn lose_the_lease(ttl: &str, grace: &str) -> (Duration, Outcome) {
    let server = Server::start();
    let ShellCommand { dir: _dir, started, out: pids, script } = stubborn_command();
    let spawned = Instant::now();
    let run =
        spawn_sh_under_run(&server.url(), &["-k", "deadline", "--ttl", ttl, "--kill-grace", grace], &script);
    wait_for_file(&started, HANG);
    let _: i64 = server.cmd(&["DEL", "deadline"]).unwrap();
    let gone = wait_gone(&pids, spawned);
    let out = run.finish();
    (gone, out)
}

/// Polls until every pid in `pids` is gone; the time since `since`.
fn wait_gone(pids: &Path, since: Instant) -> Duration {
    let pids = fs::read_to_string(pids).unwrap();
    let pids: Vec<&str> = pids.split_whitespace().collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    let limit = since + HANG;
    while pids.iter().any(|pid| alive(pid)) {
        assert!(Instant::now() < limit, "the command survived {HANG:?}");
        thread::sleep(Duration::from_millis(5));
    }
    since.elapsed()
}

#[test]
fn sigkill_comes_at_the_lease_validity_end_when_the_grace_is_longer() {
    // The case: a 3 s lease with the default 10 s grace used to be killed after 11 s.
    let (gone, out) = lose_the_lease("3s", "10s");
    assert_eq!(out.code(), LEASE_LOST, "{out:?}");
    assert!(gone <= Duration::from_secs(3) + SLACK, "the command outlived its lease: gone after {gone:?}");
    // SIGTERM at the failed renewal (~1 s) did not stop it; SIGKILL waited for the validity end.
    assert!(gone >= Duration::from_millis(2500), "killed before the validity ended: {gone:?}");
    assert!(out.stderr.contains("signal 9"), "{out:?}");
    assert!(out.stderr.contains("the lease's validity ends then"), "{out:?}");
    assert!(out.stderr.contains("longer --ttl"), "{out:?}");
}

#[test]
fn sigkill_comes_after_the_grace_when_it_is_shorter() {
    let (gone, out) = lose_the_lease("3s", "500ms");
    assert_eq!(out.code(), LEASE_LOST, "{out:?}");
    // The renewal falls due 1 s after the grant request; SIGKILL 500 ms after it fails.
    assert!(gone >= Duration::from_millis(1500), "killed before the grace ran out: {gone:?}");
    assert!(gone <= Duration::from_millis(1500) + SLACK, "not killed at the grace's end: {gone:?}");
    assert!(out.stderr.contains("SIGKILL in 500ms"), "{out:?}");
    assert!(!out.stderr.contains("the lease's validity ends then"), "{out:?}");
}

#[test]
fn a_lease_that_ran_out_gets_sigkill_at_once() {
    // The server freezes and the renewal hangs (the node timeout is longer than the lease):
    // the keep-alive declares the lease lost only when its validity ends, so no grace is left.
    let server = Server::start();
    let ShellCommand { dir: _dir, started, out: pids, script } = stubborn_command();
    let spawned = Instant::now();
    let run = spawn_sh_under_run(&server.url(), &["--timeout", "5s", "-k", "frozen", "--ttl", "1s"], &script);
    wait_for_file(&started, HANG);
    server.pause();
    let gone = wait_gone(&pids, spawned);
    server.resume();
    let out = run.finish();
    assert_eq!(out.code(), LEASE_LOST, "{out:?}");
    assert!(gone <= Duration::from_secs(1) + SLACK, "the command outlived its lease: gone after {gone:?}");
    assert!(out.stderr.contains("SIGKILL at once"), "{out:?}");
}
