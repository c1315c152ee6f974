//! `acquire` / `renew` / `release` / `status` for shell scripts, in text and JSON.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::support::*;
use serde_json::Value;

fn json(out: &Outcome) -> Value {
    assert_eq!(out.code(), 0, "{out:?}");
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out:?}"))
}

#[test]
fn a_printed_token_acquires_renews_and_releases() {
    let server = Server::start();
    let url = server.url();
    let out = run(&["acquire", "--redis", &url, "-k", "deploy", "--ttl", "2s"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let (token, fence) = printed_lease(&out);
    assert_eq!(token.len(), 32, "a 128-bit hex token");
    let st = server.lock_status("deploy").expect("lock state");
    assert_eq!((st.fence, st.held), (fence, true));
    assert!(st.remaining.is_some_and(|d| !d.is_zero() && d <= Duration::from_millis(2000)), "{st:?}");

    // The same token works from redis-cli as it is (the server stores its text).
    let still: i64 = server.cmd(&["FENCEDLOCK.RENEW", "deploy", &token, "2000"]).unwrap();
    assert_eq!(still, 1);

    let busy = run(&["acquire", "--redis", &url, "-k", "deploy"]);
    assert_eq!(busy.code(), BUSY, "{busy:?}");

    let renewed = run(&["renew", "--redis", &url, "-k", "deploy", "--ttl", "60s", "--token", &token]);
    assert_eq!(renewed.code(), 0, "{renewed:?}");
    let st = server.lock_status("deploy").expect("lock state");
    assert!(
        st.remaining.is_some_and(|d| d > Duration::from_millis(2000)),
        "renew extended the lease to 60 s: {st:?}"
    );

    let released = run(&["release", "--redis", &url, "-k", "deploy", "--token", &token]);
    assert_eq!(released.code(), 0, "{released:?}");
    assert!(!server.lock_held("deploy"));
    assert_eq!(server.lock_status("deploy").map(|st| st.fence), Some(fence), "the fence is kept");

    // A second release, or a renew after it, says the lease is gone.
    let again = run(&["release", "--redis", &url, "-k", "deploy", "--token", &token]);
    assert_one_line_error(&again, LEASE_LOST, &["no longer held"]);
    let late = run(&["renew", "--redis", &url, "-k", "deploy", "--ttl", "60s", "--token", &token]);
    assert_one_line_error(&late, LEASE_LOST, &["no longer held"]);
    // Another token never releases someone else's lease.
    let other = run(&["acquire", "--redis", &url, "-k", "deploy"]);
    assert_eq!(other.code(), 0);
    let wrong = run(&["release", "--redis", &url, "-k", "deploy", "--token", &token]);
    assert_eq!(wrong.code(), LEASE_LOST);
    assert!(server.lock_held("deploy"));
}

#[test]
fn a_token_file_is_private_and_removed_on_release() {
    let server = Server::start();
    let url = server.url();
    let dir = scratch();
    let file = p(dir.path(), "deploy.token");
    let file_s = file.to_str().unwrap();
    let out = run(&["acquire", "--redis", &url, "-k", "f", "--ttl", "5s", "--token-file", file_s]);
    assert_eq!(out.code(), 0, "{out:?}");
    let fence: u64 = out.stdout.trim().parse().expect("only the fence is printed");
    assert_eq!(fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    let token = fs::read_to_string(&file).unwrap();
    assert!(!out.stdout.contains(token.trim()));
    assert_eq!(server.lock_status("f").map(|st| st.fence), Some(fence));

    // FENCEDLOCK_TOKEN works like --token.
    let renewed = spawn_cmd(
        fencedlock()
            .args(["renew", "--redis", &url, "-k", "f", "--ttl", "5s"])
            .env("FENCEDLOCK_TOKEN", token.trim()),
    )
    .finish();
    assert_eq!(renewed.code(), 0, "{renewed:?}");

    let released = run(&["release", "--redis", &url, "-k", "f", "--token-file", file_s]);
    assert_eq!(released.code(), 0, "{released:?}");
    assert!(!file.exists(), "the token file is removed with the lease");
    assert!(!server.lock_held("f"));

    let unwritable = run(&["acquire", "--redis", &url, "-k", "g", "--token-file", "/nonexistent/dir/t"]);
    assert_one_line_error(&unwritable, 74, &["token file"]);
    assert!(!server.lock_held("g"), "a lease nobody could release is given back at once");
}

#[test]
fn json_output_is_machine_readable() {
    let server = Server::start();
    let url = server.url();
    let acquired = json(&run(&["acquire", "--json", "--redis", &url, "-k", "j", "--ttl", "3s"]));
    let token = acquired["token"].as_str().unwrap().to_owned();
    let fence = acquired["fence"].as_u64().unwrap();
    assert_eq!(acquired["key"], "j");
    assert_eq!(acquired["ttl_ms"], 3000);
    assert!(acquired["valid_ms"].as_u64().unwrap() <= 3000);

    let st = json(&run(&["status", "--json", "--redis", &url, "-k", "j"]));
    assert_eq!(st["fence"], fence);
    assert_eq!(st["held"], true);
    assert!(st["pttl_ms"].as_u64().unwrap() <= 3000);
    assert!(!st.to_string().contains(&token), "status never shows the token");

    let renewed =
        json(&run(&["renew", "--json", "--redis", &url, "-k", "j", "--ttl", "3s", "--token", &token]));
    assert_eq!(renewed["renewed"], true);
    let released = json(&run(&["release", "--json", "--redis", &url, "-k", "j", "--token", &token]));
    assert_eq!(released["released"], true);

    let st = json(&run(&["status", "--json", "--redis", &url, "-k", "j"]));
    assert_eq!((st["held"].clone(), st["pttl_ms"].clone()), (Value::Bool(false), Value::Null));
    let never = json(&run(&["status", "--json", "--redis", &url, "-k", "never-locked"]));
    // No record: no fence to show (a reclaimed key's was not 0).
    assert_eq!((never["fence"].clone(), never["held"].as_bool()), (Value::Null, Some(false)));
}

#[test]
fn renew_needs_its_ttl_and_without_it_leaves_the_lease_alone() {
    let server = Server::start();
    let url = server.url();
    let acquired = run(&["acquire", "long", "--ttl", "5m", "--redis", &url]);
    let token = acquired.stdout.split_whitespace().next().expect("TOKEN FENCE").to_owned();
    // Without --ttl: refused, with why, and nothing sent (a 30 s default used to shorten the
    // 5 m lease without a word).
    let out = run(&["renew", "long", "--token", &token, "--redis", &url]);
    assert_one_line_error(&out, USAGE, &["--ttl", "deadline"]);
    let left = server.lock_status("long").and_then(|st| st.remaining).expect("held");
    assert!(left > Duration::from_secs(270), "the 5 m lease is untouched: {left:?}");
    // With it, the lease runs that long from now.
    assert_eq!(run(&["renew", "long", "--ttl", "10m", "--token", &token, "--redis", &url]).code(), 0);
    let left = server.lock_status("long").and_then(|st| st.remaining).expect("held");
    assert!(left > Duration::from_secs(590), "{left:?}");
}

#[test]
fn status_text_shows_fence_held_and_time_left() {
    let server = Server::start();
    let url = server.url();
    let _: u64 = server.cmd(&["FENCEDLOCK.ACQUIRE", "t", "tok", "60000"]).unwrap();
    let out = run(&["status", "--redis", &url, "-k", "t"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(
        out.stdout.contains("fence 1") && out.stdout.contains("held") && out.stdout.contains("left"),
        "{out:?}"
    );
    let free = run(&["status", "--redis", &url, "-k", "nothing"]);
    assert!(free.stdout.contains("free"), "{free:?}");
}

#[test]
fn several_servers_acquire_by_majority_with_one_fence() {
    let servers = Server::start_many(3);
    let urls = servers.iter().map(Server::url).collect::<Vec<_>>().join(",");
    let acquired = json(&run(&["acquire", "--json", "--redis", &urls, "-k", "m", "--ttl", "5s"]));
    let fence = acquired["fence"].as_u64().unwrap();
    let token = acquired["token"].as_str().unwrap().to_owned();
    // A majority holds the lease with that fence. (The round ends at the second grant; the
    // third server's ACQUIRE may never be sent.)
    let holding =
        servers.iter().filter(|s| s.lock_status("m").is_some_and(|st| st.fence == fence && st.held)).count();
    assert!(holding >= 2, "only {holding} of 3 servers hold fence {fence}");
    let st = json(&run(&["status", "--json", "--redis", &urls, "-k", "m"]));
    assert_eq!(st["held"], true);
    assert_eq!(st["servers"].as_array().unwrap().len(), 3);
    assert_eq!(
        json(&run(&["renew", "--json", "--redis", &urls, "-k", "m", "--ttl", "30s", "--token", &token]))
            ["renewed"],
        true
    );
    assert_eq!(
        json(&run(&["release", "--json", "--redis", &urls, "-k", "m", "--token", &token]))["released"],
        true
    );
    for s in &servers {
        assert!(!s.lock_held("m"));
    }
}

#[test]
fn acquire_with_wait_is_handed_the_lock_when_it_is_released() {
    let server = Server::start();
    let url = server.url();
    let first = run(&["acquire", "--redis", &url, "-k", "queue", "--ttl", "10s"]);
    assert_eq!(first.code(), 0, "{first:?}");
    let (token, fence) = printed_lease(&first);

    let mut waiter = spawn(&["acquire", "--redis", &url, "-k", "queue", "--ttl", "10s", "--wait", "5s"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while server.fencedlock_counter("fencedlock_waiters") != 1 {
        assert!(std::time::Instant::now() < deadline, "acquire --wait never queued on the server");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(waiter.is_running(), "still waiting while the lease is held");
    let released = run(&["release", "--redis", &url, "-k", "queue", "--token", &token]);
    assert_eq!(released.code(), 0, "{released:?}");
    let handed = waiter.finish();
    assert_eq!(handed.code(), 0, "{handed:?}");
    let (_, next) = printed_lease(&handed);
    assert!(next > fence, "{handed:?}");
    assert_eq!(server.fencedlock_counter("fencedlock_handoffs"), 1);
    assert_eq!(server.fencedlock_counter("fencedlock_blocked_acquires"), 1);
    assert!(server.lock_held("queue"), "the waiter's lease stays held (detached)");
}
