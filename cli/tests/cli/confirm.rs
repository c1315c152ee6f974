//! `--confirm-replicas N`: a grant is used only once N replicas confirmed it; otherwise it is
//! released and the lock service counts as not answering (69, or `--on-unavailable`).

use crate::support::*;

#[test]
fn a_confirmed_grant_is_on_the_replica_before_it_is_handed_out() {
    let primary = Server::start();
    let replica = primary.start_replica();
    let out =
        run(&["acquire", "-k", "conf", "--ttl", "30s", "--redis", &primary.url(), "--confirm-replicas", "1"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let fence: u64 = out.stdout.split_whitespace().nth(1).and_then(|f| f.parse().ok()).expect("TOKEN FENCE");
    // No waiting for replication here: the CLI already did, before printing the lease.
    let on_replica = replica.lock_status("conf").expect("the lease is on the replica");
    assert_eq!((on_replica.fence, on_replica.held), (fence, true));

    let dir = scratch();
    let marker = p(dir.path(), "ran");
    let script = format!("echo $FENCEDLOCK_FENCE > '{}'", marker.display());
    let out = run(&[
        "run",
        "-k",
        "conf2",
        "--redis",
        &primary.url(),
        "--confirm-replicas",
        "1",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(std::fs::read_to_string(&marker).unwrap().trim().parse::<u64>().is_ok(), "ran with a fence");
}

#[test]
fn with_a_replica_stopped_the_grant_is_released_not_handed_out() {
    let primary = Server::start();
    let mut replica = primary.start_replica();
    replica.stop();
    let url = primary.url();
    let confirm = ["--confirm-replicas", "1", "--confirm-timeout", "300ms"];

    let mut args = vec!["acquire", "-k", "conf", "--redis", &url];
    args.extend(confirm);
    let out = run(&args);
    assert_one_line_error(&out, UNAVAILABLE, &["confirmed by 0 of 1 replicas", "released"]);
    assert_eq!(out.stdout, "", "no lease printed");
    assert!(!primary.lock_held("conf"), "the unconfirmed grant was released");

    let dir = scratch();
    let marker = p(dir.path(), "ran");
    let script = format!("echo \"${{FENCEDLOCK_FENCE-unset}}\" > '{}'", marker.display());
    for (policy, code, ran) in
        [("fail", UNAVAILABLE, None), ("skip", SKIPPED, None), ("run", 0, Some("unset"))]
    {
        let _ = std::fs::remove_file(&marker);
        let mut args = vec!["run", "-k", "conf", "--redis", &url, "--on-unavailable", policy];
        args.extend(confirm);
        args.extend(["--", "sh", "-c", &script]);
        let out = run(&args);
        assert_eq!(out.code(), code, "{policy}: {out:?}");
        let got = std::fs::read_to_string(&marker).ok();
        assert_eq!(got.as_deref().map(str::trim), ran, "{policy}: {out:?}");
        assert!(out.stderr.contains("confirmed by 0 of 1"), "{policy}: {out:?}");
        assert!(!primary.lock_held("conf"), "{policy}: the unconfirmed grant was released");
    }
}

#[test]
fn confirm_options_are_checked() {
    for args in [
        vec!["run", "-k", "k", "--confirm-replicas", "1", "--confirm-timeout", "0s", "--", "true"],
        vec!["acquire", "-k", "k", "--confirm-replicas=-1"],
        vec!["acquire", "-k", "k", "--confirm-replicas", "x"],
        vec!["run", "-k", "k", "--confirm-timeout", "1", "--", "true"],
    ] {
        let out = run(&args);
        assert_one_line_error(&out, USAGE, &["--confirm-"]);
    }
    let three = "redis://127.0.0.1:1,redis://127.0.0.1:2,redis://127.0.0.1:3";
    let out = run(&["acquire", "-k", "k", "--redis", three, "--confirm-replicas", "1"]);
    assert_one_line_error(&out, USAGE, &["replica confirmation needs a single server"]);
    let out = run(&["run", "--help"]);
    assert!(out.stdout.contains("--confirm-replicas <N>"), "{out:?}");
    assert!(out.stdout.contains("[default: 1s]"), "the client's default confirm timeout: {out:?}");
}
