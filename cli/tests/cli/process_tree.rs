//! The command never outlives the lease, whoever dies first (issue 30): a `fencedlock run`
//! killed by any signal takes its command's whole process tree with it (three deep, one process
//! ignoring SIGTERM, one that left the process group with `setsid`) before another host could
//! be granted the lease; a command that exits leaves nothing running after the release; and
//! fencedlock stops the tree itself when its guardian is killed.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::*;

/// The lease of these runs: long enough that "before the ttl ends" means something.
const TTL: &str = "5s";

/// A tree three deep, every process writing its pid to `dir/pids`, the deepest ignoring
/// SIGTERM, and a `setsid` sleeper beside it (out of the command's process group and session):
/// `sh` → `sh` → `sleep`, and `sh` → `setsid sleep`.
fn tree_script(dir: &Path) -> String {
    let pids = p(dir, "pids").display().to_string();
    let ready = p(dir, "ready").display().to_string();
    format!(
        r#"echo $$ >> '{pids}'
sh -c 'echo $$ >> "{pids}"; trap "" TERM; sh -c "echo \$\$ >> \"{pids}\"; trap \"\" TERM; exec sleep 60" & setsid sh -c "echo \$\$ >> \"{pids}\"; exec sleep 61" & wait' &
while [ "$(wc -l < '{pids}')" -lt 4 ]; do sleep 0.01; done
touch '{ready}'
wait"#
    )
}

/// The pids the tree wrote, once all four are there.
fn tree_pids(dir: &Path) -> Vec<String> {
    wait_for_file(&p(dir, "ready"), HANG);
    let pids: Vec<String> =
        fs::read_to_string(p(dir, "pids")).expect("pids").lines().map(str::to_owned).collect();
    assert_eq!(pids.len(), 4, "{pids:?}");
    assert!(pids.iter().all(|pid| alive(pid)), "the tree runs: {pids:?}");
    pids
}

/// `fencedlock run` of the tree on a fresh server, with `extra` options, once the tree runs:
/// the server, the run, the tree's pids and the scratch directory (kept while the test runs).
fn run_tree(extra: &[&str]) -> (Server, Running, Vec<String>, tempfile::TempDir) {
    let server = Server::start();
    let dir = scratch();
    let url = server.url();
    let script = tree_script(dir.path());
    let mut args = vec!["run", "--redis", &url, "--ttl", TTL];
    args.extend_from_slice(extra);
    args.extend(["tree", "--", "sh", "-c", &script]);
    let run = spawn(&args);
    let pids = tree_pids(dir.path());
    (server, run, pids, dir)
}

/// How long until every pid is gone (at most `limit`, else a panic naming the survivors).
fn gone_within(pids: &[String], limit: Duration) -> Duration {
    let start = Instant::now();
    while pids.iter().any(|pid| alive(pid)) {
        let left: Vec<&String> = pids.iter().filter(|pid| alive(pid)).collect();
        assert!(start.elapsed() < limit, "still running after {limit:?}: {left:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    start.elapsed()
}

#[test]
fn a_sigkilled_fencedlock_takes_the_whole_tree_with_it_before_the_lease_could_pass() {
    let (server, run, pids, _dir) = run_tree(&[]);
    run.signal(libc::SIGKILL);
    let took = gone_within(&pids, Duration::from_secs(1));
    // The dead CLI's lease still holds the key: nobody else could have been granted it yet.
    assert!(server.lock_held("tree"), "every process was gone {took:?} after the kill, inside the lease");
    eprintln!("the tree was gone {took:?} after SIGKILL of fencedlock");
    let out = run.finish();
    assert_eq!(out.code, None, "fencedlock was killed: {out:?}");
}

#[test]
fn sigterm_and_sigint_are_forwarded_and_nothing_of_the_tree_outlives_the_release() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let (server, run, pids, _dir) = run_tree(&["--kill-grace", "300ms"]);
        run.signal(sig);
        let out = run.finish_within(HANG);
        // The shell at the top died of the forwarded signal; the SIGTERM-ignoring sleeper and
        // the setsid one were stopped before the release.
        assert_eq!(out.code(), 128 + sig, "{out:?}");
        assert!(pids.iter().all(|pid| !alive(pid)), "signal {sig}: all gone when fencedlock exits: {out:?}");
        assert!(out.stderr.contains("left 3 process(es) running; they were stopped"), "{out:?}");
        assert!(!server.lock_held("tree"), "released");
    }
}

#[test]
fn a_command_that_exits_leaves_nothing_running_after_the_release() {
    let server = Server::start();
    let dir = scratch();
    let pid_file = p(dir.path(), "pid");
    let script = format!("sleep 60 & echo $! > '{}'; exit 0", pid_file.display());
    let out =
        run(&["run", "--redis", &server.url(), "--kill-grace", "200ms", "bg", "--", "sh", "-c", &script]);
    assert_eq!(out.code(), 0, "{out:?}");
    let pid = fs::read_to_string(&pid_file).expect("pid").trim().to_owned();
    assert!(!alive(&pid), "the background sleeper was stopped before the release");
    assert!(out.stderr.contains("left 1 process(es) running"), "{out:?}");
    assert!(!server.lock_held("bg"), "released");
}

#[test]
fn a_killed_guardian_takes_the_command_and_fencedlock_stops_the_rest_and_releases() {
    let (server, run, pids, _dir) = run_tree(&[]);
    let guardian = fs::read_to_string(format!("/proc/{}/stat", pids[0]))
        .expect("the top shell's stat")
        .rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().nth(1).map(str::to_owned))
        .expect("ppid");
    let cmdline = fs::read(format!("/proc/{guardian}/cmdline")).expect("the guardian's cmdline");
    assert!(
        cmdline.split(|&b| b == 0).any(|arg| arg == b"__guardian"),
        "the command's parent is the guardian"
    );
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(guardian.parse().expect("pid"), libc::SIGKILL) };
    let out = run.finish_within(HANG);
    assert_ne!(out.code(), 0, "{out:?}");
    assert!(out.stderr.contains("lost track of the command"), "{out:?}");
    // The command died with its guardian; what it started (the setsid sleeper too) came to
    // fencedlock, which killed it before releasing.
    assert!(pids.iter().all(|pid| !alive(pid)), "all gone when fencedlock exits: {out:?}");
    assert!(!server.lock_held("tree"), "released");
}
