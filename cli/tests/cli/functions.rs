//! The CLI on servers without the module: `fencedlock functions` prints the library that
//! `redis-cli -x FUNCTION LOAD REPLACE` takes (`--script`: the script `SCRIPT LOAD` takes), `run` and `status` work on the Functions engine
//! (the library loaded by the client when missing), `status --json` names each server's
//! engine, and `--engine module` refuses a server without the module.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::support::*;

/// `redis-cli -x ARGS` on `server` with `input` as its last argument: its reply, trimmed.
fn redis_cli_x(server: &Server, args: &[&str], input: &str) -> String {
    let mut cli = Command::new(harness::redis_cli())
        .args(["-p", &server.port().to_string(), "-x"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("redis-cli");
    cli.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write");
    let out = cli.wait_with_output().expect("redis-cli ran");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn functions_prints_the_library_that_redis_cli_loads() {
    let out = run(&["functions"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.starts_with("#!lua name=fencedlock\n"), "{out:?}");
    assert_eq!(out.stdout, fencedlock_protocol::functions::LIBRARY);

    let server = Server::builder().without_module().start();
    assert_eq!(redis_cli_x(&server, &["FUNCTION", "LOAD", "REPLACE"], &out.stdout), "fencedlock");
    let fence: u64 = server.cmd(&["FCALL", "fencedlock_acquire", "1", "k", "t", "2000"]).expect("FCALL");
    assert!(fence > 0);
}

#[test]
fn functions_script_prints_the_script_that_redis_cli_loads_and_engine_script_runs_on() {
    let out = run(&["functions", "--script"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(out.stdout, fencedlock_protocol::functions::eval_script());

    let server = Server::builder().without_module().start();
    let sha = redis_cli_x(&server, &["SCRIPT", "LOAD"], &out.stdout);
    let fence: u64 =
        server.cmd(&["EVALSHA", &sha, "1", "k", "fencedlock_acquire", "t", "2000"]).expect("EVALSHA");
    assert!(fence > 0);

    let url = server.url();
    let out = run(&["run", "script:job", "--engine", "script", "--redis", &url, "--", "true"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let out = run(&["status", "script:job", "--engine", "script", "--redis", &url, "--json"]);
    let status: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
    assert_eq!(status["servers"][0]["engine"], "script", "{status}");
    assert!(status["fence"].as_u64().is_some_and(|f| f > 0), "{status}");
}

#[test]
fn functions_floor_key_prints_the_keys_a_raw_call_names_and_the_library_takes_them() {
    let out = run(&["functions", "--floor-key", "invoice:inv_72"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let floor =
        String::from_utf8(fencedlock_protocol::functions::floor_key(b"invoice:inv_72")).expect("ascii");
    let wake = String::from_utf8(fencedlock_protocol::functions::wake_key(b"invoice:inv_72")).expect("ascii");
    assert_eq!(out.stdout, format!("floor {floor}\nwake  {wake}\n"));
    let json = run(&["functions", "--floor-key", "invoice:inv_72", "--json"]);
    let keys: serde_json::Value = serde_json::from_str(json.stdout.trim()).expect("JSON");
    assert_eq!((keys["floor"].as_str(), keys["wake"].as_str()), (Some(floor.as_str()), Some(wake.as_str())));

    let server = Server::builder().without_module().start();
    let _: String = server
        .cmd(&["FUNCTION", "LOAD", "REPLACE", fencedlock_protocol::functions::LIBRARY])
        .expect("loaded");
    let fence: u64 = server
        .cmd(&["FCALL", "fencedlock_acquire", "2", "invoice:inv_72", &floor, "t", "2000"])
        .expect("taken");
    assert!(fence > 0);
    let released: i64 = server
        .cmd(&["FCALL", "fencedlock_release", "3", "invoice:inv_72", &floor, &wake, "t"])
        .expect("taken");
    assert_eq!(released, 1);
    let refused = run(&["functions", "--floor-key", ""]);
    assert_one_line_error(&refused, USAGE, &["the lock key is empty"]);
}

#[test]
fn run_and_status_work_on_the_functions_engine() {
    let server = Server::builder().without_module().start();
    let url = server.url();
    for _ in 0..2 {
        let out = run(&["run", "fn:job", "--redis", &url, "--", "true"]);
        assert_eq!(out.code(), 0, "{out:?}");
    }
    let out = run(&["status", "fn:job", "--redis", &url, "--json"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let status: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
    assert_eq!(status["servers"][0]["engine"], "functions", "{status}");
    assert_eq!(status["held"], false, "{status}");
    assert!(status["fence"].as_u64().is_some_and(|f| f > 0), "{status}");

    let module = Server::start();
    let out = run(&["status", "k", "--redis", &module.url(), "--json"]);
    let status: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
    assert_eq!(status["servers"][0]["engine"], "module", "{status}");

    // Only the module, where there is none: the server's refusal, not a silent fallback.
    let out = run(&["run", "fn:job", "--engine", "module", "--redis", &url, "--", "true"]);
    assert_ne!(out.code(), 0, "{out:?}");
    assert!(
        out.stderr.contains("does not have the fencedlock module") && out.stderr.contains("--engine"),
        "{out:?}"
    );
}

#[test]
fn a_user_who_may_not_load_the_library_is_told_both_ways_out() {
    let server = Server::builder().without_module().start();
    let _: String = server
        .cmd(&["ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-function", "-script"])
        .expect("ACL SETUSER");
    let url = format!("redis://app:pw@127.0.0.1:{}", server.port());
    let out = run(&["run", "k", "--redis", &url, "--on-unavailable", "run", "--", "true"]);
    // A misconfiguration, whatever the failure policy says.
    assert_one_line_error(
        &out,
        CONFIG,
        &["--loadmodule", "fencedlock functions | redis-cli -x FUNCTION LOAD REPLACE"],
    );
}

/// On a managed server (no module; the default user may not run MODULE, CONFIG or DEBUG):
/// two `run --wait 5s` of the same key at once, the second waits for the first and then runs
/// with a higher fence; `status --json` names the engine.
#[test]
fn two_waiting_runs_take_turns_on_a_managed_server() {
    let server = Server::builder().managed().start();
    let url = server.url();
    let dir = scratch();
    let (started, go) = (p(dir.path(), "started"), p(dir.path(), "go"));
    let fences = p(dir.path(), "fences");
    let record = format!("echo $FENCEDLOCK_FENCE >> '{}'", fences.display());
    let first_script = format!("{record}; {}", hold_until(&started, &go));
    let first = spawn(&["run", "--wait", "5s", "fn:turns", "--redis", &url, "--", "sh", "-c", &first_script]);
    wait_for_file(&started, HANG);
    let mut second = spawn(&["run", "--wait", "5s", "fn:turns", "--redis", &url, "--", "sh", "-c", &record]);
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert!(second.is_running(), "the second run must wait while the first holds the lock");
    let held = run(&["status", "fn:turns", "--redis", &url, "--json"]);
    let status: serde_json::Value = serde_json::from_str(held.stdout.trim()).expect("JSON");
    assert_eq!(status["servers"][0]["engine"], "functions", "{status}");
    assert_eq!(status["held"], true, "{status}");

    std::fs::write(&go, "").expect("go");
    assert_eq!(first.finish().code(), 0);
    let waited = second.finish();
    assert_eq!(waited.code(), 0, "{waited:?}");
    let fences = fences_written(&fences);
    assert_eq!(fences.len(), 2, "both ran: {fences:?}");
    assert!(fences[1] > fences[0], "{fences:?}");
}
