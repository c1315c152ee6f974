//! `fencedlock hold KEY`: a lease for the rest of a shell script, kept alive past its ttl,
//! given back when the script closes the descriptor or its shell exits (released, not left to
//! expire), and a loss reported to the script by a signal and exit code 76.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

/// Runs `script` with bash (`$FL` is the binary, `$URL` the server), to completion. Each hold
/// in it writes its stderr to a file: one that outlived the script (a broken build) must not
/// keep the test's pipes open.
fn bash(script: &str, url: &str, dir: &Path) -> Outcome {
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(script).current_dir(dir).env("FL", env!("CARGO_BIN_EXE_fencedlock")).env("URL", url);
    spawn_cmd(&mut cmd).finish()
}

/// Waits until `key` is no longer held on `server` (bounded), then says whether its lease was
/// released (not left to expire): the module counts each end once, by kind.
fn released_not_expired(server: &Server, key: &str, released_before: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.lock_held(key) {
        assert!(Instant::now() < deadline, "{key} still held");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.fencedlock_counter("fencedlock_leases_released") > released_before
}

#[test]
fn the_lease_lives_past_its_ttl_until_the_descriptor_is_closed_or_the_shell_exits() {
    let server = Server::start();
    let url = server.url();
    let dir = scratch();
    // flock's idiom with a lease: kept while fd 9 is open, renewed past its 1.5 s ttl, given
    // back at `exec 9<&-`.
    let released = server.fencedlock_counter("fencedlock_leases_released");
    let out = bash(
        r#"exec 9< <("$FL" hold script:k --ttl 1500ms --label step --redis "$URL" 2>>hold.log)
           read -r fence <&9 || exit 75
           echo "fence $fence"
           sleep 2.5
           "$FL" status script:k --redis "$URL"
           exec 9<&-
           for i in $(seq 1 150); do
             "$FL" status script:k --redis "$URL" | grep -q '  free' && { echo "free while the shell runs"; break; }
             sleep 0.02
           done"#,
        &url,
        dir.path(),
    );
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.contains("free while the shell runs"), "{out:?}");
    let fence: u64 =
        out.stdout.lines().next().and_then(|l| l.strip_prefix("fence ")).unwrap().parse().unwrap();
    assert!(out.stdout.contains(&format!("script:k  fence {fence}  held")), "held after 2.5 s: {out:?}");
    assert!(out.stdout.contains("label \"step\""), "{out:?}");
    assert!(released_not_expired(&server, "script:k", released), "given back at exec 9<&-");

    // The shell exits without closing anything: released, long before the 30 s ttl.
    let released = server.fencedlock_counter("fencedlock_leases_released");
    let started = Instant::now();
    let out = bash(
        r#""$FL" hold script:bg --ttl 30s --redis "$URL" > fence 2>>hold.log &
           until [ -s fence ]; do sleep 0.02; done
           "$FL" status script:bg --redis "$URL""#,
        &url,
        dir.path(),
    );
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.contains("held"), "{out:?}");
    assert!(released_not_expired(&server, "script:bg", released), "given back when its shell exited");
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
}

#[test]
fn a_lost_lease_signals_the_shell_and_exits_76() {
    let server = Server::start();
    let url = server.url();
    let dir = scratch();
    // The script traps the signal, then reads hold's exit code.
    let script = r#"
        trap 'wait "$holder"; echo "hold exited $?" > outcome; exit 9' TERM
        exec 9< <("$FL" hold lost:k --ttl 1500ms --redis "$URL")
        holder=$!
        read -r fence <&9 || exit 75
        touch started
        for i in $(seq 1 300); do sleep 0.02; done
        echo "never signalled" > outcome"#;
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(script)
        .current_dir(dir.path())
        .env("FL", env!("CARGO_BIN_EXE_fencedlock"))
        .env("URL", &url);
    let shell = spawn_cmd(&mut cmd);
    wait_for_file(&dir.path().join("started"), HANG);
    // Another party takes the key away: the next renewal fails.
    let _: i64 = server.cmd(&["DEL", "lost:k"]).unwrap();
    let out = shell.finish();
    assert_eq!(out.code(), 9, "the shell got the signal and ran its trap: {out:?}");
    assert_eq!(fs::read_to_string(dir.path().join("outcome")).unwrap(), "hold exited 76\n");
    assert!(out.stderr.contains("was lost") && out.stderr.contains("sent signal 15"), "{out:?}");
}

#[test]
fn a_busy_lock_prints_nothing_and_a_watched_process_ends_the_hold() {
    let server = Server::start();
    let url = server.url();
    assert_eq!(run(&["acquire", "busy:k", "--ttl", "30s", "--redis", &url]).code(), 0);
    let out = run(&["hold", "busy:k", "--redis", &url]);
    assert_eq!((out.code(), out.stdout.as_str()), (BUSY, ""), "{out:?}");

    // --pid: the lease lasts as long as that process, and --json says who holds it.
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let holder = spawn(&["hold", "pid:k", "--pid", &pid, "--json", "--redis", &url]);
    let deadline = Instant::now() + HANG;
    while !server.lock_held("pid:k") {
        assert!(Instant::now() < deadline, "never held");
        std::thread::sleep(Duration::from_millis(20));
    }
    let released = server.fencedlock_counter("fencedlock_leases_released");
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let out = holder.finish();
    assert_eq!(out.code(), 0, "{out:?}");
    let record: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("one JSON line");
    assert_eq!((record["key"].as_str(), record["watching"].to_string()), (Some("pid:k"), pid));
    assert!(released_not_expired(&server, "pid:k", released));
}
