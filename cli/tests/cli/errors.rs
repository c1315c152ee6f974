//! Every bad argument, bad server and unusable server gives one line that says what to do,
//! a documented non-zero exit code, and never starts the command.

use crate::support::*;

/// Runs `fencedlock ARGS -- touch MARKER` and checks the command did not run.
fn refused(args: &[&str]) -> Outcome {
    let dir = scratch();
    let marker = p(dir.path(), "ran");
    let mut full: Vec<&str> = args.to_vec();
    let marker_s = marker.to_str().unwrap().to_owned();
    if args.contains(&"run") && !args.contains(&"--") {
        full.extend(["--", "touch", &marker_s]);
    }
    let out = run(&full);
    assert!(!marker.exists(), "{args:?} ran the command: {out:?}");
    out
}

#[test]
fn bad_durations_name_the_option_and_the_units() {
    for (flag, value) in
        [("--ttl", "30x"), ("--ttl", "30"), ("--wait", "soon"), ("--kill-grace", "1w"), ("--timeout", "")]
    {
        let out = refused(&["run", "-k", "k", flag, value]);
        assert_one_line_error(&out, USAGE, &[flag, "invalid duration", "see `fencedlock run --help`"]);
    }
    let out = refused(&["run", "-k", "k", "--ttl", "30"]);
    assert_one_line_error(&out, USAGE, &["no unit", "30s"]);
}

#[test]
fn out_of_range_ttls_are_refused_before_any_request() {
    // No server listens on the default URL in this test, so a request would say 69.
    let out = refused(&["run", "-k", "k", "--redis", "redis://127.0.0.1:1", "--ttl", "2000000h"]);
    assert_one_line_error(&out, USAGE, &["at most", "--ttl"]);
    let out = refused(&["run", "-k", "k", "--redis", "redis://127.0.0.1:1", "--ttl", "1ms"]);
    assert_one_line_error(&out, USAGE, &["--ttl"]);
}

#[test]
fn the_longest_ttl_is_the_servers_max_ttl_setting() {
    let server = Server::start();
    let url = server.url();
    // The default day: a longer lease is the server's usage error, naming its setting.
    let out = refused(&["run", "-k", "long", "--redis", &url, "--ttl", "25h"]);
    assert_one_line_error(&out, USAGE, &["max-ttl-ms"]);
    assert_eq!(server.lock_status("long"), None, "the refusal changed nothing");
    // Raised, the same ttl is granted.
    let _: () = server.cmd(&["CONFIG", "SET", "fencedlock.max-ttl-ms", "172800000"]).unwrap();
    let out = run(&["acquire", "-k", "long", "--redis", &url, "--ttl", "25h"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(server
        .lock_status("long")
        .is_some_and(|s| s.remaining > Some(std::time::Duration::from_secs(86_400))));
}

#[test]
fn bad_urls_say_what_a_url_looks_like() {
    for url in ["foo://bar", "localhost:6379", "redis://", "redis://host:notaport"] {
        let out = refused(&["run", "-k", "k", "--redis", url]);
        assert_one_line_error(&out, USAGE, &["redis://HOST:PORT"]);
    }
    let twice = "redis://127.0.0.1:1,redis://127.0.0.1:1";
    let out = refused(&["run", "-k", "k", "--redis", twice]);
    assert_one_line_error(&out, USAGE, &["given twice"]);
}

#[test]
fn a_zero_timeout_names_the_timeout() {
    let out = run(&["run", "k", "--timeout", "0s", "--", "true"]);
    assert_one_line_error(&out, USAGE, &["--timeout", "positive"]);
    assert!(!out.stderr.contains("--ttl"), "not the ttl's hint: {out:?}");
}

#[test]
fn a_refused_login_blames_the_given_credentials_or_asks_for_them() {
    let server = Server::start();
    let port = server.port();
    // From now on every connection must log in (the harness's own stays logged in).
    let _: () = server.cmd(&["CONFIG", "SET", "requirepass", "secret"]).unwrap();
    let wrong = run(&["status", "k", "--redis", &format!("redis://:nope@127.0.0.1:{port}")]);
    assert_one_line_error(&wrong, UNAVAILABLE, &["refused the user or password in the URL"]);
    assert!(!wrong.stderr.contains("give the credentials") && !wrong.stderr.contains("nope"), "{wrong:?}");
    let missing = run(&["status", "k", "--redis", &format!("redis://127.0.0.1:{port}")]);
    assert_one_line_error(&missing, UNAVAILABLE, &["requires a login", "redis://USER:PASSWORD@HOST:PORT"]);
    let right = run(&["status", "k", "--redis", &format!("redis://:secret@127.0.0.1:{port}")]);
    assert_eq!(right.code(), 0, "{right:?}");
}

#[test]
fn missing_arguments_are_named() {
    let out = refused(&["run", "--ttl", "1s", "--", "true"]);
    assert_one_line_error(&out, USAGE, &["--key"]);
    let out = run(&["run", "-k", "k"]);
    assert_one_line_error(&out, USAGE, &["<COMMAND>"]);
    let out = run(&["release", "-k", "k"]);
    assert_one_line_error(&out, USAGE, &["--token", "--token-file"]);
    let out = run(&["bogus"]);
    assert_one_line_error(&out, USAGE, &["bogus", "fencedlock --help"]);
    let out = refused(&["run", "-k", "k", "--no-such-flag"]);
    assert_one_line_error(&out, USAGE, &["--no-such-flag"]);
}

#[test]
fn an_unreachable_server_is_named_with_what_to_do() {
    let port = harness::pick_port(false);
    let url = format!("redis://127.0.0.1:{port}");
    let out = refused(&["run", "-k", "k", "--redis", &url]);
    assert_one_line_error(&out, UNAVAILABLE, &[&format!("127.0.0.1:{port}"), "cannot reach", "--redis"]);
    let mut subcommands = vec![
        vec!["status", "-k", "k", "--redis", &url],
        vec!["acquire", "-k", "k", "--redis", &url],
        vec!["release", "-k", "k", "--token", "abc", "--redis", &url],
        vec!["renew", "-k", "k", "--ttl", "30s", "--token", "abc", "--redis", &url],
    ];
    if cfg!(feature = "demo") {
        subcommands.push(vec!["demo", "--redis", &url]);
    }
    for args in subcommands {
        let out = run(&args);
        assert_one_line_error(&out, UNAVAILABLE, &["cannot reach"]);
    }
}

#[test]
fn a_server_without_the_module_says_to_load_it() {
    let plain = Server::builder().without_module().start();
    let url = plain.url();
    // Only the module asked for (without --engine, the Functions library would serve it).
    let out = refused(&["run", "-k", "k", "--engine", "module", "--redis", &url]);
    assert_one_line_error(&out, UNAVAILABLE, &["does not have the fencedlock module", "loadmodule"]);
    let mut subcommands = vec![
        vec!["status", "-k", "k", "--redis", &url],
        vec!["acquire", "-k", "k", "--redis", &url],
        vec!["renew", "-k", "k", "--ttl", "30s", "--token", "abc", "--redis", &url],
        vec!["release", "-k", "k", "--token", "abc", "--redis", &url],
    ];
    if cfg!(feature = "demo") {
        subcommands.push(vec!["demo", "--redis", &url]);
    }
    for mut args in subcommands {
        args.extend(["--engine", "module"]);
        let out = run(&args);
        assert_one_line_error(&out, UNAVAILABLE, &["does not have the fencedlock module"]);
        assert!(!out.stderr.contains("abc"), "tokens are never echoed: {out:?}");
    }
}

#[test]
fn a_key_of_another_type_is_a_usage_error() {
    let server = Server::start();
    let _: () = server.cmd(&["SET", "plain", "value"]).unwrap();
    let out = refused(&["run", "-k", "plain", "--redis", &server.url()]);
    assert_one_line_error(&out, USAGE, &["another kind of data", "--key"]);
}

#[test]
fn errors_are_json_with_json() {
    let out = run(&["run", "--json", "-k", "k", "--ttl", "5x", "--", "true"]);
    assert_eq!(out.code(), USAGE);
    let err: serde_json::Value = serde_json::from_str(out.stderr.trim()).expect("one JSON object");
    assert_eq!(err["error"], "usage");
    assert_eq!(err["exit_code"], USAGE);
    assert!(err["message"].as_str().unwrap().contains("5x"));
}

#[test]
fn help_documents_examples_and_exit_codes() {
    for sub in ["run", "acquire", "renew", "release", "status", "demo"] {
        let out = run(&[sub, "--help"]);
        assert_eq!(out.code(), 0, "{out:?}");
        assert!(out.stdout.contains("Examples:"), "{sub} --help has no examples");
        for code in ["64", "69", "75", "76"] {
            assert!(out.stdout.contains(code), "{sub} --help misses exit code {code}");
        }
    }
    let out = run(&["--help"]);
    assert!(out.stdout.contains("fencedlock run") && out.stdout.contains("Exit codes:"));
}

#[test]
fn empty_blank_and_control_character_keys_are_refused_before_any_request() {
    // A crontab's `fencedlock run "$JOB" -- …` with JOB unset: every such job would share one
    // lock. No server is given: the refusal comes before any connection.
    let nowhere = "redis://127.0.0.1:1";
    for key in ["", "   "] {
        let out = run(&["run", "--redis", nowhere, key, "--", "true"]);
        assert_one_line_error(&out, USAGE, &["the lock key"]);
    }
    let empty = run(&["run", "--redis", nowhere, "", "--", "true"]);
    assert!(empty.stderr.contains("unset"), "names the likely source: {empty:?}");
    let out = run(&["acquire", "--redis", nowhere, "--key", "job\n"]);
    assert_one_line_error(&out, USAGE, &["control character"]);
    for sub in [
        &["status", ""][..],
        &["release", "", "--token", "t"],
        &["renew", "", "--ttl", "30s", "--token", "t"],
    ] {
        let mut args = sub.to_vec();
        args.extend(["--redis", nowhere]);
        assert_eq!(run(&args).code(), USAGE, "{args:?}");
    }
}
