//! `--label`: who holds a lease, as `status` and `list` show it, to anyone who may read the
//! key (a user with read-only key permissions included); host name and pid by default, none
//! with `--no-label` or `--label ''`, never longer than the protocol allows.

use crate::support::*;

/// This machine's host name, as the kernel has it.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").expect("the host name").trim().to_owned()
}

fn label_of(server: &Server, key: &str) -> Option<String> {
    server.lock_label(key).map(|label| String::from_utf8(label).expect("a text label"))
}

#[test]
fn leases_are_labelled_with_host_and_pid_unless_told_otherwise() {
    let server = Server::start();
    let url = server.url();
    let acquire = |key: &str, extra: &[&str]| {
        let mut args = vec!["acquire", key, "--ttl", "30s", "--redis", &url];
        args.extend(extra);
        let out = run(&args);
        assert_eq!(out.code(), 0, "{out:?}");
    };
    acquire("lbl:default", &[]);
    let label = label_of(&server, "lbl:default").expect("a label by default");
    let (host, pid) = label.rsplit_once(':').expect("HOST:PID");
    assert_eq!(host, hostname());
    assert!(pid.parse::<u32>().is_ok_and(|pid| pid > 1), "{label}");
    acquire("lbl:given", &["--label", "deploy by ci #42"]);
    assert_eq!(label_of(&server, "lbl:given").as_deref(), Some("deploy by ci #42"));
    acquire("lbl:none", &["--no-label"]);
    acquire("lbl:empty", &["--label", ""]);
    assert_eq!((label_of(&server, "lbl:none"), label_of(&server, "lbl:empty")), (None, None));

    // `run` labels its lease too, while the command runs.
    let dir = scratch();
    let (started, go) = (p(dir.path(), "started"), p(dir.path(), "go"));
    let runner =
        spawn(&["run", "lbl:run", "--label", "nightly", "--redis", &url, "-c", &hold_until(&started, &go)]);
    wait_for_file(&started, HANG);
    assert_eq!(label_of(&server, "lbl:run").as_deref(), Some("nightly"));
    std::fs::write(&go, "").unwrap();
    assert_eq!(runner.finish().code(), 0);

    // Too long: refused before any request (nothing listens on port 1).
    let long = "x".repeat(257);
    let out = run(&["acquire", "lbl:long", "--label", &long, "--redis", "redis://127.0.0.1:1"]);
    assert_one_line_error(&out, USAGE, &["256"]);
    let out = run(&["run", "lbl:both", "--label", "a", "--no-label", "--", "true"]);
    assert_one_line_error(&out, USAGE, &["--no-label"]);
}

#[test]
fn a_read_only_user_sees_the_labels() {
    let server = Server::start();
    let url = server.url();
    for (key, label) in [("ro:report", "host-a:4711"), ("ro:export", "host-b:77")] {
        let out = run(&["acquire", key, "--ttl", "30s", "--label", label, "--redis", &url]);
        assert_eq!(out.code(), 0, "{out:?}");
    }
    // Read-only key access (`%R~`), the read commands (SCAN among them) and STATUS (a module
    // command is in no category of Redis 7.0's).
    let grant = ["ACL", "SETUSER", "viewer", "on", ">pw", "%R~ro:*", "+@read", "+fencedlock.status"];
    let _: () = server.cmd(&grant).expect("ACL SETUSER");
    let viewer = format!("redis://viewer:pw@127.0.0.1:{}", server.port());

    let out = run(&["status", "ro:report", "--redis", &viewer]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.contains("label \"host-a:4711\""), "{out:?}");
    let out = run(&["list", "ro:", "--json", "--redis", &viewer]);
    assert_eq!(out.code(), 0, "{out:?}");
    let listed: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    let labels: Vec<(&str, &str)> = listed["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .map(|lock| (lock["key"].as_str().unwrap(), lock["label"].as_str().unwrap()))
        .collect();
    assert_eq!(labels, [("ro:export", "host-b:77"), ("ro:report", "host-a:4711")]);
    // It reads; it cannot take a lease.
    let out = run(&["acquire", "ro:report", "--redis", &viewer, "--engine", "module"]);
    assert_one_line_error(&out, UNAVAILABLE, &["does not allow this user"]);
    assert_eq!(label_of(&server, "ro:report").as_deref(), Some("host-a:4711"), "unchanged");
}
