//! What flock, `etcdctl lock` and `consul lock` users type first: the key positional, a shell
//! string with `-c`, flock's `-E` / `-w` / `-n`, durations in days, and the messages that
//! explain a missing `--` or a missing unit.

use std::fs;
use std::time::Duration;

use crate::support::*;

#[test]
fn the_key_is_positional_and_key_still_works() {
    let server = Server::start();
    let url = server.url();
    let dir = scratch();
    let fence_of = |args: &[&str], name: &str| {
        let file = p(dir.path(), name);
        let script = format!("echo $FENCEDLOCK_KEY $FENCEDLOCK_FENCE > '{}'", file.display());
        let mut full = args.to_vec();
        full.extend(["--redis", &url, "--", "sh", "-c", &script]);
        let out = run(&full);
        assert_eq!(out.code(), 0, "{out:?}");
        fs::read_to_string(&file).unwrap()
    };
    assert_eq!(fence_of(&["run", "sig"], "a"), "sig 1\n");
    assert_eq!(fence_of(&["run", "--key", "sig"], "b"), "sig 2\n");
    assert_eq!(fence_of(&["run", "-k", "sig"], "c"), "sig 3\n");
    // The other subcommands take it the same way.
    let out = run(&["status", "sig", "--redis", &url]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.starts_with("sig  fence 3  free"), "{out:?}");
    // Both at once is ambiguous.
    let out = run(&["run", "sig", "--key", "other", "--redis", &url, "--", "true"]);
    assert_one_line_error(&out, USAGE, &["--key"]);
}

#[test]
fn a_command_without_its_double_dash_gets_a_hint_and_does_not_run() {
    let dir = scratch();
    let marker = p(dir.path(), "ran");
    let marker = marker.to_str().unwrap();
    for args in [
        vec!["run", "--key", "k", "touch", marker],
        vec!["run", "k", "touch", marker],
        vec!["run", "-k", "k", "touch"],
        vec!["run", "k"],
    ] {
        let out = run(&args);
        assert_one_line_error(&out, USAGE, &["the command goes after `--`", "-c", "fencedlock run --help"]);
    }
    assert!(!std::path::Path::new(marker).exists());
    // Other mistakes with a `--` present are not blamed on it.
    let out = run(&["run", "k", "--ttl", "5x", "--", "true"]);
    assert!(!out.stderr.contains("goes after"), "{out:?}");
}

#[test]
fn c_runs_a_shell_string_under_the_lease() {
    let server = Server::start();
    let url = server.url();
    let dir = scratch();
    let file = p(dir.path(), "out");
    let script = format!("echo fence=$FENCEDLOCK_FENCE | tr a-z A-Z > '{}'; exit 3", file.display());
    let out = run(&["run", "shell", "--redis", &url, "-c", &script]);
    assert_eq!(out.code(), 3, "the shell's exit code passes through: {out:?}");
    assert_eq!(fs::read_to_string(&file).unwrap(), "FENCE=1\n");
    assert!(!server.lock_held("shell"));
    // A string and a command after `--` are one too many.
    let out = run(&["run", "shell", "--redis", &url, "-c", "true", "--", "true"]);
    assert_one_line_error(&out, USAGE, &["--command"]);
}

#[test]
fn conflict_exit_code_replaces_75_for_a_busy_lock_only() {
    let server = Server::start();
    let url = server.url();
    let held = run(&["acquire", "busy", "--ttl", "30s", "--redis", &url]);
    assert_eq!(held.code(), 0, "{held:?}");
    for (flag, code) in [("-E", "0"), ("--conflict-exit-code", "3")] {
        let out = run(&["run", "busy", flag, code, "--redis", &url, "--", "true"]);
        assert_eq!(out.code(), code.parse::<i32>().unwrap(), "{out:?}");
        assert!(out.stderr.contains("skipped"), "still says why: {out:?}");
    }
    // With --wait running out as well.
    let out = run(&["run", "busy", "-E", "9", "-w", "300ms", "--redis", &url, "--", "true"]);
    assert_eq!(out.code(), 9, "{out:?}");
    // A run that gets the lock keeps the command's code.
    let out = run(&["run", "free", "-E", "9", "--redis", &url, "--", "sh", "-c", "exit 4"]);
    assert_eq!(out.code(), 4, "{out:?}");
    let out = run(&["run", "busy", "-E", "256", "--redis", &url, "--", "true"]);
    assert_one_line_error(&out, USAGE, &["--conflict-exit-code", "0..=255"]);
}

#[test]
fn flock_short_options_wait_and_nonblock() {
    let server = Server::start();
    let url = server.url();
    let held = run(&["acquire", "w", "--ttl", "700ms", "--redis", &url]);
    assert_eq!(held.code(), 0, "{held:?}");
    // -n: skip at once, as by default.
    let out = run(&["run", "w", "-n", "--redis", &url, "--", "true"]);
    assert_eq!(out.code(), SKIPPED, "{out:?}");
    // -w: wait for the lease to run out, then run.
    let out = run(&["run", "w", "-w", "10s", "--redis", &url, "--", "true"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.elapsed >= Duration::from_millis(300), "it waited: {out:?}");
    let out = run(&["run", "w", "-n", "-w", "1s", "--redis", &url, "--", "true"]);
    assert_one_line_error(&out, USAGE, &["--nonblock", "--wait"]);
    // acquire takes -w as run does.
    assert_eq!(run(&["acquire", "w2", "--ttl", "700ms", "--redis", &url]).code(), 0);
    let out = run(&["acquire", "w2", "-w", "10s", "--redis", &url]);
    assert_eq!(out.code(), 0, "granted once the first lease ran out: {out:?}");
    assert!(out.elapsed >= Duration::from_millis(300), "it waited: {out:?}");
}

#[test]
fn flock_shared_runs_read_together_and_exclusive_runs_alone() {
    let server = Server::start();
    let url = server.url();
    let dir = scratch();
    let (started, go) = (p(dir.path(), "started"), p(dir.path(), "go"));
    let fence_file = p(dir.path(), "fences");
    // A reader holds the key while the others try.
    let sh = format!("echo $FENCEDLOCK_FENCE >> '{}'; {}", fence_file.display(), hold_until(&started, &go));
    let reader = spawn(&["run", "prices", "-s", "--redis", &url, "--", "sh", "-c", &sh]);
    wait_for_file(&started, HANG);
    let echo = format!("echo $FENCEDLOCK_FENCE >> '{}'", fence_file.display());
    for shared in ["-s", "--shared"] {
        let out = run(&["run", "prices", shared, "--redis", &url, "--", "sh", "-c", &echo]);
        assert_eq!(out.code(), 0, "a second reader runs beside the first: {out:?}");
    }
    let writer = run(&["run", "prices", "-x", "--redis", &url, "--", "sh", "-c", &echo]);
    assert_eq!(writer.code(), SKIPPED, "the writer waits for the reader: {writer:?}");
    // A waiting writer gets in once the reader leaves, with a fence above every reader's.
    let waiting = spawn(&["run", "prices", "--wait", "20s", "--redis", &url, "--", "sh", "-c", &echo]);
    harness::poll("the writer to queue", HANG, || server.waiters() == 1);
    let late = run(&["run", "prices", "-s", "--redis", &url, "--", "sh", "-c", &echo]);
    assert_eq!(late.code(), SKIPPED, "a reader does not pass a waiting writer: {late:?}");
    fs::write(&go, "").unwrap();
    assert_eq!(reader.finish().code(), 0);
    assert_eq!(waiting.finish().code(), 0);
    let fences = fences_written(&fence_file);
    assert_eq!(fences.len(), 4, "three readers and the writer ran: {fences:?}");
    assert!(
        fences[..3].iter().all(|f| *f < fences[3]),
        "the writer's fence is above the readers': {fences:?}"
    );
}

#[test]
fn shared_runs_need_one_server_and_exclude_permits_and_every() {
    let (a, b) = (Server::start(), Server::start());
    let (url, other) = (a.url(), b.url());
    for (args, needles) in [
        (&["--shared", "--permits", "2", "--redis", &url][..], &["--shared and --permits"][..]),
        (&["--shared", "--every", "1h", "--redis", &url], &["--every", "--shared"]),
        (&["--shared", "--redis", &url, "--redis", &other], &["--shared needs a single --redis server"]),
    ] {
        let mut argv = vec!["run", "k"];
        argv.extend_from_slice(args);
        argv.extend_from_slice(&["--", "true"]);
        assert_one_line_error(&run(&argv), USAGE, needles);
    }
    assert!(a.lock_status("k").is_none() && b.lock_status("k").is_none(), "nothing was taken");
}

#[test]
fn durations_take_days_and_say_why_a_unit_is_needed() {
    let out = run(&["plan", "--ttl", "1d", "--json"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let plan: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(plan["ttl_ms"], 86_400_000, "{plan}");
    let out = run(&["run", "k", "--wait", "10", "--", "true"]);
    assert_one_line_error(&out, USAGE, &["--wait", "no unit", "seconds", "10s", "10ms"]);
    for zero in ["0s", "0"] {
        let out = run(&["run", "k", "--ttl", zero, "--", "true"]);
        assert_one_line_error(&out, USAGE, &["--ttl", "at least 1ms"]);
        assert!(!out.stderr.contains("0ns"), "{out:?}");
    }
    let out = run(&["acquire", "k", "--ttl", "0ms"]);
    assert_one_line_error(&out, USAGE, &["at least 1ms"]);
}

#[test]
fn status_of_a_reclaimed_key_says_only_what_is_known() {
    let server = Server::start();
    server.config_set("fencedlock.reclaim-after-ms", "0");
    let url = server.url();
    for _ in 0..2 {
        assert_eq!(run(&["acquire", "gone", "--ttl", "50ms", "--redis", &url]).code(), 0);
        std::thread::sleep(Duration::from_millis(120));
    }
    // The module's sweep deletes it shortly after the lease ended.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while server.lock_status("gone").is_some() {
        assert!(std::time::Instant::now() < deadline, "never reclaimed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = run(&["status", "gone", "--redis", &url]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(!out.stdout.contains("(never locked)"), "{out:?}");
    assert!(out.stdout.contains("no record") && out.stdout.contains("reclaimed"), "{out:?}");
    // And it is true: the next fence is above the two granted before.
    let out = run(&["acquire", "gone", "--ttl", "1s", "--redis", &url]);
    let fence: u64 = out.stdout.split_whitespace().nth(1).and_then(|f| f.parse().ok()).expect("TOKEN FENCE");
    assert!(fence > 2, "{out:?}");
}

#[test]
fn status_json_of_a_semaphore_has_the_lock_fields_too() {
    let server = Server::start();
    let url = server.url();
    let out = run(&["acquire", "pool", "--permits", "3", "--ttl", "20s", "--redis", &url]);
    assert_eq!(out.code(), 0, "{out:?}");
    let lock = run(&["status", "plain", "--json", "--redis", &url]);
    let sem = run(&["status", "pool", "--json", "--redis", &url]);
    let lock: serde_json::Value = serde_json::from_str(&lock.stdout).expect("json");
    let sem: serde_json::Value = serde_json::from_str(&sem.stdout).expect("json");
    for field in lock.as_object().unwrap().keys() {
        assert!(sem.get(field).is_some(), "semaphore status lacks {field:?}: {sem}");
    }
    assert_eq!(sem["permits"], 3);
    assert_eq!(sem["held"], true);
    assert!(sem["pttl_ms"].as_u64().is_some_and(|ms| ms > 10_000 && ms <= 20_000), "{sem}");
    assert_eq!(sem["servers"].as_array().map(Vec::len), Some(1), "{sem}");
}

#[test]
fn permits_over_two_servers_claim_no_overrun() {
    let servers = "redis://127.0.0.1:1,redis://127.0.0.1:2";
    let out = run(&["run", "--redis", servers, "--permits", "3", "k", "--", "true"]);
    assert_one_line_error(&out, USAGE, &["--permits 3", "single --redis", "kept on one server"]);
    assert!(!out.stderr.contains("holders could run"), "{out:?}");
}

#[test]
fn completions_and_man_pages_come_from_the_argument_definitions() {
    for (shell, needle) in
        [("bash", "complete -F"), ("zsh", "#compdef fencedlock"), ("fish", "complete -c fencedlock")]
    {
        let out = run(&["completions", shell]);
        assert_eq!(out.code(), 0, "{out:?}");
        assert!(out.stdout.contains(needle), "{shell}: {}", &out.stdout[..200.min(out.stdout.len())]);
        assert!(out.stdout.contains("conflict-exit-code"), "{shell} completes run's options");
    }
    let out = run(&["completions", "tcsh"]);
    assert_one_line_error(&out, USAGE, &["tcsh"]);

    let out = run(&["man"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.contains(".TH fencedlock 1"), "{}", &out.stdout[..200]);
    assert!(out.stdout.contains("fencedlock\\-run(1)"), "lists the subcommands' pages");
    let out = run(&["man", "run"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.contains(".TH fencedlock-run 1"), "{}", &out.stdout[..200]);
    assert!(out.stdout.contains("conflict\\-exit\\-code"), "run's options are on its page");
    assert!(out.stdout.contains("Exit codes"), "and its exit codes");
    let out = run(&["man", "nope"]);
    assert_one_line_error(&out, USAGE, &["nope", "run"]);
}

#[cfg(not(feature = "demo"))]
#[test]
fn a_build_without_the_demo_says_how_to_run_it() {
    let out = run(&["demo"]);
    assert_one_line_error(&out, USAGE, &["--features demo"]);
    let out = run(&["--help"]);
    assert!(!out.stdout.contains("  demo "), "no demo among the subcommands of a build without it: {out:?}");
}
