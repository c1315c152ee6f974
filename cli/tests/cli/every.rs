//! `fencedlock run --every`: at most one run per period across hosts, measured on the
//! server's clock, on both engines.

use std::fs;
use std::time::{Duration, Instant};

use fencedlock_protocol::periodic::{record_key, STARTED_MS};

use crate::support::*;

/// Both engines: the module, and the Functions library on a server without it.
fn servers() -> [(&'static str, Server); 2] {
    [("module", Server::start()), ("functions", Server::builder().without_module().start())]
}

/// The server's time in milliseconds.
fn server_ms(server: &Server) -> u64 {
    let (secs, micros): (String, String) = server.cmd(&["TIME"]).expect("TIME");
    secs.parse::<u64>().unwrap() * 1000 + micros.parse::<u64>().unwrap() / 1000
}

/// Three "hosts" fire `run --every 3s` every 200 ms, out of step, for 7.5 s; each run takes
/// 1 s. Successive runs start at least a period apart (on the server's clock, which stamps
/// them), and the job does run every period.
#[test]
fn three_hosts_run_a_job_once_per_period() {
    for (engine, server) in servers() {
        let dir = scratch();
        let ran = p(dir.path(), "ran");
        let script = format!("echo $FENCEDLOCK_FENCE >> '{}'; sleep 1", ran.display());
        let url = server.url();
        let hosts: Vec<std::thread::JoinHandle<Vec<i32>>> = (0..3u64)
            .map(|host| {
                let (url, script) = (url.clone(), script.clone());
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(70 * host));
                    let until = Instant::now() + Duration::from_millis(7_500);
                    let mut codes = Vec::new();
                    while Instant::now() < until {
                        let label = format!("host-{host}");
                        let args = [
                            "run", "-q", "--redis", &url, "-k", "nightly", "--every", "3s", "--label", &label,
                        ];
                        let outcome = run(&[&args[..], &["--", "sh", "-c", &script]].concat());
                        codes.push(outcome.code());
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    codes
                })
            })
            .collect();
        let codes: Vec<i32> = hosts.into_iter().flat_map(|h| h.join().expect("host")).collect();
        assert!(codes.iter().all(|&c| c == 0 || c == SKIPPED), "{engine}: exit codes {codes:?}");
        let runs = fs::read_to_string(&ran).unwrap_or_default();
        let fences: Vec<u64> = runs.lines().map(|l| l.parse().expect("a fence")).collect();
        // Runs start at 0, ≥ 3 s and ≥ 6 s: three in 7.5 s (two if a host's turn came late).
        assert!((2..=3).contains(&fences.len()), "{engine}: runs with fences {fences:?}");
        assert!(fences.windows(2).all(|w| w[0] < w[1]), "{engine}: fences {fences:?}");
        assert_eq!(codes.iter().filter(|&&c| c == 0).count(), fences.len(), "{engine}: {codes:?}");

        // The record holds the last run, and `status` shows it.
        let status = run(&["status", "--redis", &url, "nightly"]);
        assert_eq!(status.code(), 0, "{status:?}");
        let last = fences.last().expect("a run");
        assert!(
            status.stdout.contains("last run") && status.stdout.contains(&format!("fence {last}")),
            "{engine}: {status:?}"
        );
        assert!(status.stdout.contains("label \"host-"), "{engine}: {status:?}");
    }
}

/// The record's start is the server's time: a run stamped 2 s ago by the server's clock leaves
/// a 3 s job not due for at most another second, whatever the host's clock says.
#[test]
fn the_period_is_measured_on_the_servers_clock() {
    for (engine, server) in servers() {
        let url = server.url();
        let job = ["run", "--json", "--redis", &url, "-k", "clocked", "--every", "3s", "--", "true"];
        assert_eq!(run(&job).code(), 0, "{engine}: the first run is due");
        let record = record_key(b"clocked");
        let stamped = (server_ms(&server) - 2_000).to_string();
        let _: i64 =
            server.cmd(&[&b"HSET"[..], &record, STARTED_MS.as_bytes(), stamped.as_bytes()]).expect("HSET");
        let skipped = run(&job);
        assert_eq!(skipped.code(), SKIPPED, "{engine}: {skipped:?}");
        let record: serde_json::Value = serde_json::from_str(skipped.stderr.trim()).expect("one JSON record");
        assert_eq!(record["reason"], "not_due", "{engine}: {record}");
        let due_in = record["due_in_ms"].as_u64().expect("due_in_ms");
        // Less than the second left when it was stamped: the CLI took some of it to start.
        assert!((1..=1_000).contains(&due_in), "{engine}: due in {due_in} ms");
        std::thread::sleep(Duration::from_millis(due_in + 50));
        assert_eq!(run(&job).code(), 0, "{engine}: due once the server's clock says so");
    }
}

/// A failed run does not count (the next host tries again) unless --count-failures; a
/// counted failure shows its exit code in `status`.
#[test]
fn a_failed_run_counts_only_when_asked() {
    let server = Server::start();
    let url = server.url();
    let every = |key: &'static str, extra: &'static [&'static str], cmd: &'static str| {
        let mut args = vec!["run", "-q", "--redis", &url, "-k", key, "--every", "1h"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "sh", "-c", cmd]);
        run(&args).code()
    };
    assert_eq!(every("flaky", &[], "exit 3"), 3);
    assert_eq!(every("flaky", &[], "true"), 0, "a failed run is tried again");
    assert_eq!(every("flaky", &[], "true"), SKIPPED, "a successful run counts");

    assert_eq!(every("counted", &["--count-failures"], "exit 3"), 3);
    assert_eq!(every("counted", &[], "true"), SKIPPED, "a counted failure counts");
    let status = run(&["status", "--redis", &url, "counted"]);
    assert!(status.stdout.contains("exit 3"), "{status:?}");
}

#[test]
fn every_is_refused_where_no_single_clock_measures_it() {
    let (a, b) = (Server::start(), Server::start());
    let both = format!("{},{}", a.url(), b.url());
    let redlock = run(&["run", "--redis", &both, "-k", "k", "--every", "1m", "--", "true"]);
    assert_one_line_error(&redlock, USAGE, &["--every needs one server"]);
    let permits =
        run(&["run", "--redis", &a.url(), "-k", "k", "--every", "1m", "--permits", "2", "--", "true"]);
    assert_one_line_error(&permits, USAGE, &["--permits"]);
    let zero = run(&["run", "--redis", &a.url(), "-k", "k", "--every", "0s", "--", "true"]);
    assert_eq!(zero.code(), USAGE, "{zero:?}");
    let stray = run(&["run", "--redis", &a.url(), "-k", "k", "--count-failures", "--", "true"]);
    assert_eq!(stray.code(), USAGE, "--count-failures needs --every: {stray:?}");
    assert!(!a.lock_held("k") && !b.lock_held("k"));
}

/// A user allowed the lock commands but not `EVAL` cannot keep the record: the command does
/// not run, and the error names what to grant.
#[test]
fn a_user_denied_eval_is_told_before_the_command_runs() {
    let server = Server::start();
    let _: String = server
        .cmd(&["ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-eval", "-evalsha"])
        .expect("ACL SETUSER");
    let url = format!("redis://app:pw@127.0.0.1:{}", server.port());
    let dir = scratch();
    let ran = p(dir.path(), "ran");
    let touch = format!("touch '{}'", ran.display());
    let denied = run(&["run", "--redis", &url, "-k", "k", "--every", "1m", "--", "sh", "-c", &touch]);
    assert_one_line_error(&denied, UNAVAILABLE, &["--every", "EVAL", "+eval ~fencedlock:last-run:*"]);
    assert!(!ran.exists(), "the command ran without a record");
    assert!(!server.lock_held("k"), "the lease was released");
}
