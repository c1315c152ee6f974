//! `fencedlock run` against a real server: exclusion, waiting, lost leases, fences in the
//! environment, exit codes and signals.

use std::fs;
use std::time::Duration;

use crate::support::*;

#[test]
fn two_concurrent_runs_on_one_key_one_runs_and_one_skips() {
    let server = Server::start();
    let dir = scratch();
    let (ran, go) = (p(dir.path(), "ran"), p(dir.path(), "go"));
    // Both children append to `ran` and then wait for `go`: whichever got the lease holds it.
    let script = format!(
        "echo $$ >> '{}'; i=0; while [ ! -e '{}' ] && [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done",
        ran.display(),
        go.display()
    );
    let args = ["run", "--redis", &server.url(), "--key", "job", "--ttl", "5s", "--", "sh", "-c", &script];
    let mut a = spawn(&args);
    let mut b = spawn(&args);
    // One of them must give up quickly with the documented code; the other keeps running.
    let deadline = std::time::Instant::now() + HANG;
    while a.is_running() && b.is_running() {
        assert!(std::time::Instant::now() < deadline, "neither run skipped");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (skipped, runner) = if a.is_running() { (b, a) } else { (a, b) };
    let skipped = skipped.finish();
    assert_eq!(skipped.code(), SKIPPED, "{skipped:?}");
    let lines = skipped.stderr_lines();
    assert_eq!(lines.len(), 1, "{skipped:?}");
    assert!(lines[0].contains("held by another owner") && lines[0].contains("skipped"), "{lines:?}");
    assert!(server.lock_held("job"));

    fs::write(&go, "").unwrap();
    let runner = runner.finish();
    assert_eq!(runner.code(), 0, "{runner:?}");
    assert_eq!(runner.stderr, "", "a successful run prints nothing");
    let ran = fs::read_to_string(&ran).unwrap();
    assert_eq!(ran.lines().count(), 1, "exactly one command ran: {ran:?}");
    assert!(!server.lock_held("job"), "the lease is released when the command exits");
}

#[test]
fn a_skip_is_silent_with_quiet_and_a_record_with_json() {
    let server = Server::start();
    let dir = scratch();
    let (started, go, other) = (p(dir.path(), "started"), p(dir.path(), "go"), p(dir.path(), "other"));
    let holder =
        spawn(&["run", "--redis", &server.url(), "-k", "q", "--", "sh", "-c", &hold_until(&started, &go)]);
    wait_for_file(&started, HANG);
    let touch = format!("touch '{}'", other.display());

    let quiet = run(&["run", "-q", "--redis", &server.url(), "-k", "q", "--", "sh", "-c", &touch]);
    assert_eq!(quiet.code(), SKIPPED, "{quiet:?}");
    assert_eq!(quiet.stderr, "", "-q silences the skip notice");

    let json = run(&["run", "--json", "--redis", &server.url(), "-k", "q", "--", "sh", "-c", &touch]);
    assert_eq!(json.code(), SKIPPED, "{json:?}");
    let record: serde_json::Value = serde_json::from_str(json.stderr.trim()).expect("one JSON record");
    assert_eq!(record["outcome"], "skipped");
    assert_eq!(record["exit_code"], SKIPPED);
    assert!(!other.exists(), "a skipped run must not start its command");

    fs::write(&go, "").unwrap();
    assert_eq!(holder.finish().code(), 0);
}

#[test]
fn wait_succeeds_once_the_holder_finishes_and_gives_up_when_it_runs_out() {
    let server = Server::start();
    let dir = scratch();
    let (started, go) = (p(dir.path(), "started"), p(dir.path(), "go"));
    let fences = p(dir.path(), "fences");
    let record = format!("echo $FENCEDLOCK_FENCE >> '{}'", fences.display());
    let holder_script = format!("{record}; {}", hold_until(&started, &go));
    let url = server.url();
    let holder = spawn(&["run", "--redis", &url, "-k", "w", "--ttl", "3s", "--", "sh", "-c", &holder_script]);
    wait_for_file(&started, HANG);

    // A short wait runs out while the holder still runs.
    let gave_up = run(&["run", "--redis", &url, "-k", "w", "--wait", "300ms", "--", "sh", "-c", &record]);
    assert_eq!(gave_up.code(), SKIPPED, "{gave_up:?}");
    assert!(gave_up.stderr.contains("after waiting 300ms"), "{gave_up:?}");
    assert!(gave_up.elapsed >= Duration::from_millis(300), "{gave_up:?}");

    // A long wait is still waiting when the holder finishes, then runs.
    let mut waiter = spawn(&["run", "--redis", &url, "-k", "w", "--wait", "20s", "--", "sh", "-c", &record]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(waiter.is_running(), "--wait must wait while the lock is held");
    fs::write(&go, "").unwrap();
    assert_eq!(holder.finish().code(), 0);
    let waited = waiter.finish();
    assert_eq!(waited.code(), 0, "{waited:?}");
    let fences = fences_written(&fences);
    assert_eq!(fences.len(), 2, "holder and waiter ran, the one that gave up did not: {fences:?}");
    assert!(fences[1] > fences[0], "{fences:?}");
}

/// `date +%s%N`'s reading in `path`, in ns since the epoch.
fn stamp(path: &std::path::Path) -> u128 {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.trim().parse().unwrap_or_else(|e| panic!("{}: {text:?}: {e}", path.display()))
}

#[test]
fn a_waiting_run_waits_on_the_server_and_starts_when_the_holder_exits() {
    let server = Server::start();
    let dir = scratch();
    let (started, go, ended, began) =
        (p(dir.path(), "started"), p(dir.path(), "go"), p(dir.path(), "ended"), p(dir.path(), "began"));
    let url = server.url();
    let holder_script = format!("{}; date +%s%N > '{}'", hold_until(&started, &go), ended.display());
    let holder =
        spawn(&["run", "--redis", &url, "-k", "turn", "--ttl", "5s", "--", "sh", "-c", &holder_script]);
    wait_for_file(&started, HANG);

    let blocked_before = server.fencedlock_counter("fencedlock_blocked_acquires");
    let waiter_script = format!("date +%s%N > '{}'", began.display());
    let mut waiter =
        spawn(&["run", "--redis", &url, "-k", "turn", "--wait", "5s", "--", "sh", "-c", &waiter_script]);
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while server.fencedlock_counter("fencedlock_waiters") != 1 {
        assert!(std::time::Instant::now() < deadline, "the waiting run never queued on the server");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(server.fencedlock_counter("fencedlock_blocked_acquires"), blocked_before + 1);
    // Long enough that polling would have backed off to hundreds of milliseconds.
    std::thread::sleep(Duration::from_millis(1_500));
    assert!(waiter.is_running(), "--wait waits while the lock is held");

    fs::write(&go, "").unwrap();
    assert_eq!(holder.finish().code(), 0);
    let waited = waiter.finish();
    assert_eq!(waited.code(), 0, "{waited:?}");
    assert_eq!(server.fencedlock_counter("fencedlock_handoffs"), 1, "the lock was handed to the waiting run");
    // From the holder's command exiting to the waiter's command starting: the holder's
    // release, the handoff and a process start, not a backoff poll.
    let gap_ms = stamp(&began).saturating_sub(stamp(&ended)) / 1_000_000;
    assert!(gap_ms < 200, "the waiting run started {gap_ms} ms after the holder's command ended");
    assert!(!server.lock_held("turn"));
}

#[test]
fn a_lost_lease_terminates_the_command_and_exits_76() {
    let server = Server::start();
    let recording = term_recording_command(9);
    let run = started_under_run(&server, &["-k", "lost", "--ttl", "900ms", "--kill-grace", "5s"], &recording);
    let st = server.lock_status("lost").expect("lock state");
    assert!(st.held);
    let fence = st.fence;
    // Another owner takes the lock: the next renewal (every ttl/3) is refused.
    let _: i64 = server.cmd(&["DEL", "lost"]).unwrap();
    let taken: u64 = server.cmd(&["FENCEDLOCK.ACQUIRE", "lost", "intruder", "60000"]).unwrap();
    assert!(taken > fence);

    let out = run.finish();
    assert_eq!(out.code(), LEASE_LOST, "{out:?}");
    assert_eq!(fs::read_to_string(&recording.out).unwrap().trim(), "TERM", "the command got SIGTERM");
    assert!(out.stderr.contains("lost"), "{out:?}");
    assert!(out.stderr.contains("terminated"), "{out:?}");
    assert!(out.elapsed < Duration::from_secs(15), "the command was stopped, not waited for: {out:?}");
    // The intruder's lease is untouched by our release attempt.
    let now = server.lock_status("lost").expect("lock state");
    assert_eq!((now.fence, now.held), (taken, true));
}

#[test]
fn a_command_ignoring_sigterm_is_killed_after_the_grace_period() {
    let server = Server::start();
    let stubborn = stubborn_command();
    let run =
        started_under_run(&server, &["-k", "stubborn", "--ttl", "600ms", "--kill-grace", "300ms"], &stubborn);
    let _: i64 = server.cmd(&["DEL", "stubborn"]).unwrap();
    let out = run.finish();
    assert_eq!(out.code(), LEASE_LOST, "{out:?}");
    assert!(out.stderr.contains("signal 9"), "{out:?}");
    for pid in fs::read_to_string(&stubborn.out).unwrap().split_whitespace() {
        assert!(!alive(pid), "process {pid} of the command survived");
    }
}

#[test]
fn the_fence_in_the_environment_strictly_increases_across_runs() {
    let server = Server::start();
    let dir = scratch();
    let env = p(dir.path(), "env");
    let script = format!("echo $FENCEDLOCK_KEY $FENCEDLOCK_FENCE $FENCEDLOCK_TTL_MS >> '{}'", env.display());
    for _ in 0..4 {
        let out = run(&[
            "run",
            "--redis",
            &server.url(),
            "-k",
            "report",
            "--ttl",
            "1.5s",
            "--",
            "sh",
            "-c",
            &script,
        ]);
        assert_eq!(out.code(), 0, "{out:?}");
    }
    // Another key's grants in between push the server's high-water mark, never back.
    let _: u64 = server.cmd(&["FENCEDLOCK.ACQUIRE", "other", "t", "1000"]).unwrap();
    let out =
        run(&["run", "--redis", &server.url(), "-k", "report", "--ttl", "1.5s", "--", "sh", "-c", &script]);
    assert_eq!(out.code(), 0, "{out:?}");

    let text = fs::read_to_string(&env).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(rows.len(), 5);
    let fences: Vec<u64> = rows.iter().map(|r| r[1].parse().unwrap()).collect();
    assert!(fences.windows(2).all(|w| w[1] > w[0]), "{fences:?}");
    assert!(rows.iter().all(|r| r[0] == "report" && r[2] == "1500"), "{rows:?}");
    assert_eq!(server.lock_status("report").map(|st| st.fence), fences.last().copied());
}

#[test]
fn exit_codes_pass_through_and_the_lease_is_always_released() {
    let server = Server::start();
    let url = server.url();
    let cases: [(&[&str], i32); 5] = [
        (&["sh", "-c", "exit 0"], 0),
        (&["sh", "-c", "exit 7"], 7),
        (&["sh", "-c", "kill -TERM $$"], 128 + 15),
        (&["sh", "-c", "kill -KILL $$"], 128 + 9),
        (&["/nonexistent/command"], 127),
    ];
    for (command, expected) in cases {
        let mut args = vec!["run", "--redis", &url, "-k", "codes", "--"];
        args.extend_from_slice(command);
        let out = run(&args);
        assert_eq!(out.code(), expected, "{command:?}: {out:?}");
        assert!(!server.lock_held("codes"), "{command:?} left the lease held");
    }
    let dir = scratch();
    let plain = p(dir.path(), "not-executable");
    fs::write(&plain, "echo should not run\n").unwrap();
    let not_exec = run(&["run", "--redis", &url, "-k", "codes", "--", plain.to_str().unwrap()]);
    assert_one_line_error(&not_exec, 126, &["not executable"]);
    assert!(!server.lock_held("codes"));
}

#[test]
fn sigterm_is_forwarded_to_the_command_and_the_lease_released() {
    let server = Server::start();
    let recording = term_recording_command(0);
    let run = started_under_run(&server, &["-k", "sig", "--ttl", "2s"], &recording);
    assert!(server.lock_held("sig"));
    run.signal(libc::SIGTERM);
    let out = run.finish_within(Duration::from_secs(10));
    assert_eq!(out.code(), 0, "the command's own exit code after handling SIGTERM: {out:?}");
    assert_eq!(fs::read_to_string(&recording.out).unwrap().trim(), "TERM");
    assert!(!server.lock_held("sig"), "the lease is released after the forwarded signal");
}

#[test]
fn sigint_kills_a_plain_command_and_the_exit_code_says_so() {
    let server = Server::start();
    let sleeping = sleeping_command();
    let run = started_under_run(&server, &["-k", "int"], &sleeping);
    run.signal(libc::SIGINT);
    let out = run.finish_within(Duration::from_secs(10));
    assert_eq!(out.code(), 128 + 2, "{out:?}");
    assert!(!alive(fs::read_to_string(&sleeping.out).unwrap().trim()));
    assert!(!server.lock_held("int"));
}

#[test]
fn several_servers_mean_fenced_redlock_that_survives_a_minority() {
    let servers = Server::start_many(3);
    let urls = servers.iter().map(Server::url).collect::<Vec<_>>().join(",");
    let dir = scratch();
    let fences = p(dir.path(), "fences");
    let script = format!("echo $FENCEDLOCK_FENCE >> '{}'", fences.display());
    let first = run(&["run", "--redis", &urls, "-k", "quorum", "--", "sh", "-c", &script]);
    assert_eq!(first.code(), 0, "{first:?}");
    // A majority was raised to the fence the command saw, and no server has a larger one.
    // (The round ends at the second grant: the third server's ACQUIRE may never be sent.)
    let fence: u64 = fs::read_to_string(&fences).unwrap().trim().parse().unwrap();
    let fences_seen: Vec<u64> =
        servers.iter().filter_map(|s| s.lock_status("quorum").map(|st| st.fence)).collect();
    assert!(fences_seen.iter().filter(|&&f| f == fence).count() >= 2, "{fences_seen:?} vs {fence}");
    assert!(fences_seen.iter().all(|&f| f <= fence), "{fences_seen:?} vs {fence}");

    let mut servers = servers;
    servers[2].kill9();
    let second = run(&["run", "--redis", &urls, "-k", "quorum", "--", "sh", "-c", &script]);
    assert_eq!(second.code(), 0, "{second:?}");
    assert!(second.stderr.contains("1 of 3 servers failed"), "the degraded quorum is reported: {second:?}");
    servers[1].kill9();
    let third = run(&["run", "--redis", &urls, "-k", "quorum", "--", "sh", "-c", &script]);
    assert_eq!(third.code(), 69, "no majority, no run: {third:?}");
    let seen = fences_written(&fences);
    assert_eq!(seen.len(), 2);
    assert!(seen[1] > seen[0], "{seen:?}");
}

#[test]
fn min_hold_keeps_the_lock_after_a_short_command_so_late_hosts_skip() {
    let server = Server::start();
    let url = server.url();
    let first = spawn(&["run", "--redis", &url, "-k", "period", "--min-hold", "1500ms", "--", "true"]);
    let deadline = std::time::Instant::now() + HANG;
    while !server.lock_held("period") {
        assert!(std::time::Instant::now() < deadline, "the first run never took the lock");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The command is long done, but a late host still skips.
    std::thread::sleep(Duration::from_millis(200));
    let late = run(&["run", "--redis", &url, "-k", "period", "--", "true"]);
    assert_eq!(late.code(), SKIPPED, "{late:?}");
    let first = first.finish();
    assert_eq!(first.code(), 0, "{first:?}");
    assert!(first.elapsed >= Duration::from_millis(1500), "{first:?}");
    assert!(!server.lock_held("period"), "released after the hold");
}

#[test]
fn the_command_dies_with_a_killed_fencedlock_since_nobody_renews_its_lease() {
    let server = Server::start();
    let sleeping = sleeping_command();
    let run = started_under_run(&server, &["-k", "orphan"], &sleeping);
    let pid = fs::read_to_string(&sleeping.out).unwrap().trim().to_owned();
    assert!(alive(&pid));
    run.signal(libc::SIGKILL);
    let out = run.finish();
    assert_eq!(out.code, None, "fencedlock was killed");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while alive(&pid) {
        assert!(std::time::Instant::now() < deadline, "the command outlived fencedlock");
        std::thread::sleep(Duration::from_millis(10));
    }
}
