//! The CLI on servers without the module: `fencedlock functions` prints the library that
//! `redis-cli -x FUNCTION LOAD REPLACE` takes, `run` and `status` work on the Functions engine
//! (the library loaded by the client when missing), `status --json` names each server's
//! engine, and `--engine module` refuses a server without the module.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::support::*;

#[test]
fn functions_prints_the_library_that_redis_cli_loads() {
    let out = run(&["functions"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.starts_with("#!lua name=fencedlock\n"), "{out:?}");
    assert_eq!(out.stdout, fencedlock_protocol::functions::LIBRARY);

    let server = Server::builder().without_module().start();
    let mut cli = Command::new(harness::redis_cli())
        .args(["-p", &server.port().to_string(), "-x", "FUNCTION", "LOAD", "REPLACE"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("redis-cli");
    cli.stdin.take().expect("stdin").write_all(out.stdout.as_bytes()).expect("write");
    let loaded = cli.wait_with_output().expect("redis-cli ran");
    assert_eq!(String::from_utf8_lossy(&loaded.stdout).trim(), "fencedlock");
    let fence: u64 = server.cmd(&["FCALL", "fencedlock_acquire", "1", "k", "t", "2000"]).expect("FCALL");
    assert!(fence > 0);
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
        .cmd(&["ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-function"])
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
