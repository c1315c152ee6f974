//! `--on-unavailable fail|skip|run` against servers that cannot answer (stopped, killed,
//! paused, loading, in the restart grace, short of replicas): each policy's exit code and message, and that
//! `run` runs the command with no lease in its environment. A misconfigured server fails
//! whatever the policy says.

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

/// What the command reports: the lease variables it saw ("unset" when absent).
const REPORT: &str = "echo \"fence=${FENCEDLOCK_FENCE-unset} key=${FENCEDLOCK_KEY-unset} ttl=${FENCEDLOCK_TTL_MS-unset}\" > \"$0\"; exit 3";
/// `REPORT`'s line when the command ran without a lease.
const UNLOCKED: &str = "fence=unset key=unset ttl=unset";
/// The command's own exit code in `REPORT`, which `run` passes through.
const COMMAND_EXIT: i32 = 3;

/// `fencedlock run --on-unavailable POLICY EXTRA.. -- sh -c REPORT MARKER`, with a fence
/// inherited from an outer run that an unlocked command must not see. Returns the outcome
/// and what the command reported (None: it did not run).
fn run_with(policy: &str, url: &str, extra: &[&str]) -> (Outcome, Option<String>) {
    let dir = scratch();
    let marker = p(dir.path(), "ran");
    let marker_s = marker.to_str().unwrap().to_owned();
    let mut cmd = fencedlock();
    cmd.env("FENCEDLOCK_FENCE", "99").env("FENCEDLOCK_KEY", "outer");
    cmd.args(["run", "-k", "job", "--ttl", "2s", "--redis", url, "--on-unavailable", policy]);
    cmd.args(extra);
    cmd.args(["--", "sh", "-c", REPORT, &marker_s]);
    let out = spawn_cmd(&mut cmd).finish();
    let report = fs::read_to_string(&marker).ok().map(|s| s.trim().to_owned());
    (out, report)
}

/// The three policies against a server that cannot answer; `why` names it in every message.
fn each_policy_does_what_it_says(url: &str, why: &[&str], extra: &[&str]) {
    let (out, ran) = run_with("fail", url, extra);
    assert_one_line_error(&out, UNAVAILABLE, why);
    assert_eq!(ran, None, "fail ran the command: {out:?}");

    let (out, ran) = run_with("skip", url, extra);
    assert_eq!(out.code(), SKIPPED, "{out:?}");
    assert_eq!(ran, None, "skip ran the command: {out:?}");
    let lines = out.stderr_lines();
    assert_eq!(lines.len(), 1, "one notice: {out:?}");
    assert!(lines[0].starts_with("fencedlock: skipped (--on-unavailable skip): "), "{out:?}");
    assert!(!lines[0].starts_with("fencedlock: error"), "a skip is not an error: {out:?}");
    for needle in why {
        assert!(lines[0].contains(needle), "missing {needle:?}: {out:?}");
    }
    let mut quiet = extra.to_vec();
    quiet.push("-q");
    let (out, _) = run_with("skip", url, &quiet);
    assert_eq!((out.code(), out.stderr.as_str()), (SKIPPED, ""), "-q silences the skip: {out:?}");

    let (out, ran) = run_with("run", url, extra);
    assert_eq!(out.code(), COMMAND_EXIT, "the command's own exit code: {out:?}");
    assert_eq!(ran.as_deref(), Some(UNLOCKED), "{out:?}");
    let lines = out.stderr_lines();
    assert_eq!(lines.len(), 1, "one warning: {out:?}");
    assert!(lines[0].starts_with("fencedlock: warning: running the command WITHOUT the lock"), "{out:?}");
    assert!(lines[0].contains("FENCEDLOCK_FENCE is not set"), "{out:?}");
    for needle in why {
        assert!(lines[0].contains(needle), "missing {needle:?}: {out:?}");
    }
    // The warning is not a notice: -q keeps it.
    let (out, ran) = run_with("run", url, &quiet);
    assert_eq!((out.code(), ran.as_deref()), (COMMAND_EXIT, Some(UNLOCKED)), "{out:?}");
    assert!(out.stderr.contains("WITHOUT the lock"), "{out:?}");
}

#[test]
fn a_stopped_server() {
    let mut server = Server::start();
    let url = server.url();
    server.stop();
    each_policy_does_what_it_says(&url, &["cannot reach", &server.addr()], &[]);
}

#[test]
fn a_killed_server() {
    let mut server = Server::start();
    let url = server.url();
    server.kill9();
    each_policy_does_what_it_says(&url, &["cannot reach", &server.addr()], &[]);
}

#[test]
fn a_paused_server_times_out() {
    let server = Server::start();
    server.pause();
    each_policy_does_what_it_says(&server.url(), &["no answer", &server.addr()], &["--timeout", "200ms"]);
    server.resume();
}

#[test]
fn a_server_in_its_restart_grace() {
    // The grace starts when the module loads: no grants for a minute.
    let server = Server::builder().arg("fencedlock.restart-grace-ms", "60000").start();
    each_policy_does_what_it_says(&server.url(), &["restart grace", "TRYAGAIN"], &[]);
    assert!(!server.lock_held("job"));
}

#[test]
fn a_primary_without_enough_replicas() {
    // `min-replicas-to-write 1` and no replica: every write is refused with NOREPLICAS.
    let server = Server::builder().arg("min-replicas-to-write", "1").start();
    each_policy_does_what_it_says(&server.url(), &["cannot grant leases now", "NOREPLICAS"], &[]);
    assert!(!server.lock_held("job"));
}

#[test]
fn a_loading_server() {
    let server = Server::start();
    // A dataset that takes seconds to load: every key delays the load, and the server
    // answers (LOADING) between keys. Cut short below once the runs are done.
    let _: () = server.cmd(&["DEBUG", "POPULATE", "20000", "fill", "64"]).unwrap();
    let _: () = server.cmd(&["SAVE"]).unwrap();
    server.config_set("loading-process-events-interval-bytes", "1024");
    server.config_set("key-load-delay", "1000");
    let mut reload_conn = server.client().get_connection().expect("connection for DEBUG RELOAD");
    let reload = thread::spawn(move || redis::cmd("DEBUG").arg("RELOAD").query::<()>(&mut reload_conn));
    let deadline = Instant::now() + HANG;
    loop {
        match server.cmd::<String>(&["PING"]) {
            Err(e) if e.code() == Some("LOADING") => break,
            _ => {
                assert!(Instant::now() < deadline, "the server never reported LOADING");
                thread::sleep(Duration::from_millis(5));
            }
        }
    }
    each_policy_does_what_it_says(&server.url(), &["not ready", "LOADING"], &[]);
    let still: redis::RedisResult<String> = server.cmd(&["PING"]);
    assert_eq!(still.err().and_then(|e| e.code().map(str::to_owned)).as_deref(), Some("LOADING"));
    // CONFIG is served while loading: finish the load now.
    server.config_set("key-load-delay", "0");
    reload.join().expect("reload thread").expect("DEBUG RELOAD");
    assert!(!server.lock_held("job"));
}

#[test]
fn with_wait_the_policy_applies_once_the_wait_ends_unavailable() {
    let server = Server::builder().arg("fencedlock.restart-grace-ms", "60000").start();
    let (out, ran) = run_with("skip", &server.url(), &["--wait", "1s"]);
    assert_eq!((out.code(), ran), (SKIPPED, None), "{out:?}");
    assert!(out.elapsed >= Duration::from_secs(1), "it waited first: {out:?}");
    let (out, ran) = run_with("run", &server.url(), &["--wait", "500ms"]);
    assert_eq!((out.code(), ran.as_deref()), (COMMAND_EXIT, Some(UNLOCKED)), "{out:?}");
    assert!(out.elapsed >= Duration::from_millis(500), "it waited first: {out:?}");
}

#[test]
fn a_misconfiguration_fails_whatever_the_policy() {
    let plain = Server::builder().without_module().start();
    let server = Server::start();
    let _: () = server.cmd(&["SET", "job", "not a lock"]).unwrap();
    for policy in ["skip", "run"] {
        let (out, ran) = run_with(policy, &plain.url(), &["--engine", "module"]);
        assert_one_line_error(&out, UNAVAILABLE, &["does not have the fencedlock module"]);
        assert_eq!(ran, None, "{policy}: {out:?}");
        let (out, ran) = run_with(policy, &server.url(), &[]);
        assert_one_line_error(&out, USAGE, &["another kind of data"]);
        assert_eq!(ran, None, "{policy}: {out:?}");
    }
}

#[test]
fn a_busy_lock_is_not_subject_to_the_policy() {
    let server = Server::start();
    let _: u64 = server.cmd(&["FENCEDLOCK.ACQUIRE", "job", "other", "60000"]).unwrap();
    let (out, ran) = run_with("run", &server.url(), &[]);
    assert_eq!((out.code(), ran), (SKIPPED, None), "{out:?}");
    assert!(out.stderr.contains("held by another owner"), "{out:?}");
}

#[test]
fn acquire_fails_or_skips_and_never_prints_a_lease() {
    let mut server = Server::start();
    let url = server.url();
    server.kill9();
    let out = run(&["acquire", "-k", "job", "--redis", &url]);
    assert_one_line_error(&out, UNAVAILABLE, &["cannot reach"]);
    let out = run(&["acquire", "-k", "job", "--redis", &url, "--on-unavailable", "skip"]);
    assert_eq!((out.code(), out.stdout.as_str()), (SKIPPED, ""), "{out:?}");
    assert!(out.stderr.starts_with("fencedlock: skipped (--on-unavailable skip): cannot reach"), "{out:?}");
    let out = run(&["acquire", "-k", "job", "--redis", &url, "--on-unavailable", "run"]);
    assert_one_line_error(&out, USAGE, &["--on-unavailable", "fail, skip"]);
}

#[test]
fn json_records_say_skipped_or_unlocked() {
    let mut server = Server::start();
    let url = server.url();
    server.kill9();
    let (out, _) = run_with("skip", &url, &["--json"]);
    let record: serde_json::Value = serde_json::from_str(out.stderr.trim()).expect("one JSON record");
    assert_eq!(record["outcome"], "skipped");
    assert_eq!(record["reason"], "unavailable");
    assert_eq!(record["exit_code"], SKIPPED);
    let (out, _) = run_with("run", &url, &["--json"]);
    let lines: Vec<serde_json::Value> =
        out.stderr.lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect();
    assert_eq!(lines.len(), 2, "{out:?}");
    assert!(lines[0]["warning"].as_str().unwrap().contains("WITHOUT the lock"));
    assert_eq!(lines[1]["outcome"], "unlocked");
    assert_eq!(lines[1]["exit_code"], COMMAND_EXIT);
}

#[test]
fn help_documents_the_policy_and_its_exit_codes() {
    let out = run(&["run", "--help"]);
    for needle in
        ["--on-unavailable", "fail", "skip", "exit 69", "exit 75", "WITHOUT the lock", "misconfiguration"]
    {
        assert!(out.stdout.contains(needle), "run --help lacks {needle:?}");
    }
    let out = run(&["acquire", "--help"]);
    assert!(out.stdout.contains("--on-unavailable"), "{out:?}");
}
