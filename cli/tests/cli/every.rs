//! `fencedlock run --every`: at most one run per period across hosts, measured on the
//! server's clock, on both engines.

use std::fs;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// `hosts` threads, 70 ms out of step, each calling `fire(host)` every 200 ms for `window`:
/// every exit code they got.
fn hosts_firing(hosts: usize, window: Duration, fire: impl Fn(usize) -> i32 + Sync) -> Vec<i32> {
    std::thread::scope(|scope| {
        let fire = &fire;
        let threads: Vec<_> = (0..hosts)
            .map(|host| {
                scope.spawn(move || {
                    std::thread::sleep(Duration::from_millis(70 * host as u64));
                    let until = Instant::now() + window;
                    let mut codes = Vec::new();
                    while Instant::now() < until {
                        codes.push(fire(host));
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    codes
                })
            })
            .collect();
        threads.into_iter().flat_map(|t| t.join().expect("host")).collect()
    })
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
        let codes = hosts_firing(3, Duration::from_millis(7_500), |host| {
            let label = format!("host-{host}");
            let args = ["run", "-q", "--redis", &url, "-k", "nightly", "--every", "3s", "--label", &label];
            run(&[&args[..], &["--", "sh", "-c", &script]].concat()).code()
        });
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

/// The hosts' clock offsets, as `faketime -f` takes them and in seconds: hours apart, far
/// more than the period, so a due rule on any host's own clock would disagree.
const SKEWS: [(&str, i64); 3] = [("-2h", -7_200), ("+0", 0), ("+47m", 2_820)];

/// `fencedlock` whose wall clock (and its command's, which inherits libfaketime's preload) is
/// off by `offset`. The monotonic clock is left alone, as on a host whose clock is wrong:
/// libfaketime would otherwise set it to the skewed wall clock.
fn skewed(offset: &str) -> Command {
    let mut cmd = fencedlock_under(&["faketime", "-f", offset]);
    cmd.env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    cmd
}

/// Seconds since the Unix epoch of `when` (RFC 3339) by GNU date, or of now.
fn unix_secs(when: Option<&str>) -> i64 {
    match when {
        None => SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs() as i64,
        Some(when) => {
            let out = Command::new("date").args(["-u", "-d", when, "+%s"]).output().expect("date");
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("date -d {when}: {out:?}"))
        }
    }
}

/// The test cannot pass by not skewing: under `faketime -f offset` the CLI's own clock (the
/// time on its log lines) and its command's (`date`) are off by `secs`.
fn assert_skewed(url: &str, offset: &str, secs: i64) {
    let args = ["-v", "run", "--redis", url, "-k", "skew-check", "--", "date", "+%s"];
    let out = spawn_cmd(skewed(offset).args(args)).finish();
    assert_eq!(out.code(), 0, "{out:?}");
    let real = unix_secs(None);
    let logged = out.stderr.split_whitespace().next().expect("a log line with its time");
    let command: i64 = out.stdout.trim().parse().expect("date +%s");
    for (whose, clock) in [("the CLI", unix_secs(Some(logged))), ("its command", command)] {
        assert!(
            (clock - real - secs).abs() <= 5,
            "faketime -f {offset} did not skew {whose}'s clock: {clock} s, the real one {real} s: {out:?}"
        );
    }
}

/// Issue #36: three hosts whose clocks are hours apart (-2 h, +0, +47 min, by libfaketime)
/// fire `run --every 4s` every 200 ms, out of step, for 11 s; the job takes 2 s. The server's
/// clock decides, so the skew changes nothing: one run per period, three in all. Each run
/// appends its host, fence, the server's `TIME`, its own clock and the previous run's record.
#[test]
fn hosts_with_skewed_clocks_run_a_job_once_per_period() {
    const PERIOD_MS: i64 = 4_000;
    // Each host fires every 200 ms, after a CLI run (~0.1 s); the rest is for a loaded machine.
    const LATEST_MS: i64 = PERIOD_MS + 200 + 1_000;
    let faketime = Command::new("faketime").args(["-f", "+0", "true"]).status();
    assert!(
        faketime.as_ref().is_ok_and(|s| s.success()),
        "`faketime -f +0 true` failed ({faketime:?}): run scripts/setup, which installs Debian's faketime"
    );
    for (engine, server) in servers() {
        let url = server.url();
        for (offset, secs) in SKEWS {
            assert_skewed(&url, offset, secs);
        }
        let dir = scratch();
        let (ran, job) = (p(dir.path(), "ran"), p(dir.path(), "job.sh"));
        let record = String::from_utf8(record_key(b"skewed")).expect("an ASCII record key");
        // redis-cli hangs under libfaketime; it reads the server's clock, which needs no skew.
        let script = format!(
            "server() {{ env -u LD_PRELOAD redis-cli -p {port} \"$@\"; }}\n\
             echo $1 $FENCEDLOCK_FENCE $(server TIME) $(date +%s) $(server HGET '{record}' started_ms) >> '{ran}'\n\
             sleep 2\n",
            port = server.port(),
            ran = ran.display()
        );
        fs::write(&job, script).expect("write the job");
        let window_start = server_ms(&server) as i64;
        let job = job.display().to_string();
        let codes = hosts_firing(SKEWS.len(), Duration::from_millis(11_000), |host| {
            let (label, host_arg) = (format!("host-{host}"), host.to_string());
            let args = [
                "run", "-q", "--redis", &url, "-k", "skewed", "--every", "4s", "--label", &label, "--", "sh",
                &job, &host_arg,
            ];
            spawn_cmd(skewed(SKEWS[host].0).args(args)).finish().code()
        });
        assert!(codes.iter().all(|&c| c == 0 || c == SKIPPED), "{engine}: exit codes {codes:?}");

        let runs = fs::read_to_string(&ran).unwrap_or_default();
        let runs: Vec<Vec<i64>> =
            runs.lines().map(|l| l.split(' ').map(|f| f.parse().expect("a number")).collect()).collect();
        let ctx = format!("{engine}: runs (host fence secs micros local_secs previous_record_ms) {runs:?}");
        // Runs start at about 0, 4 and 8 s: three in 11 s, the next due only after 12 s.
        assert_eq!(runs.len(), 3, "{ctx}");
        assert_eq!(codes.iter().filter(|&&c| c == 0).count(), runs.len(), "{ctx}; exit codes {codes:?}");
        let starts: Vec<i64> = runs.iter().map(|r| r[2] * 1000 + r[3] / 1000).collect();
        // The record of each run as the next one found it, and of the last one as it was left.
        let mut recorded: Vec<i64> =
            runs.iter().skip(1).map(|r| *r.get(5).expect("a previous run")).collect();
        let last: String = server.cmd(&["HGET", &record, STARTED_MS]).expect("the last run's record");
        recorded.push(last.parse().expect("started_ms"));
        assert_eq!(runs[0].len(), 5, "the first run finds no record: {ctx}");
        for (i, run) in runs.iter().enumerate() {
            let skew = SKEWS[run[0] as usize].1;
            assert!(
                (run[4] - run[2] - skew).abs() <= 3,
                "run {i}'s host clock is not skewed by {skew} s: {ctx}"
            );
            // The CLI stamps the run with the server's time just before it starts the job.
            assert!(
                (0..=1_000).contains(&(starts[i] - recorded[i])),
                "run {i} recorded at {}: {ctx}",
                recorded[i]
            );
        }
        assert!(runs.windows(2).all(|w| w[0][1] < w[1][1]), "fences rise: {ctx}");
        assert!(starts[0] - window_start <= LATEST_MS - PERIOD_MS, "the first run came late: {ctx}");
        for i in 1..runs.len() {
            // At most one run per period, by the rule (on the record) and as the jobs saw it.
            assert!(
                recorded[i] - recorded[i - 1] >= PERIOD_MS,
                "runs {} and {i} within a period: {ctx}",
                i - 1
            );
            let gap = starts[i] - starts[i - 1];
            assert!(
                (PERIOD_MS - 500..=LATEST_MS).contains(&gap),
                "{gap} ms from run {} to {i}: {ctx}",
                i - 1
            );
        }
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
