//! The operator settings that close the window of a returning old primary: a killed primary
//! restarted from its AOF answers as a primary until Sentinel (here: the test) makes it a
//! replica of the promoted node. Without them it grants leases in that window (with fences of
//! its own, later epoch: see `epochs.rs`); with them it grants none.

use std::time::{Duration, Instant};

use fencedlock_protocol::command::ACQUIRE;
use fencedlock_protocol::ReplyError;
use harness::{error_text, redis, wait_replica_online, Server};

const TTL_MS: &str = "30000";
/// How long the returning primary is asked for leases before it is demoted.
const WINDOW: Duration = Duration::from_millis(1500);

/// A primary with AOF and `extra` settings, its replica, a grant, `kill -9`, the replica
/// promoted, and the old primary restarted from its AOF as a primary with `extra` and
/// `on_return` (both given at start-up, as in its config file): (old, new).
fn returned_primary(extra: &[(&str, &str)], on_return: &[(&str, &str)]) -> (Server, Server) {
    let mut builder = Server::builder().arg("appendonly", "yes").arg("appendfsync", "always");
    for (name, value) in extra {
        builder = builder.arg(*name, *value);
    }
    let mut old = builder.start();
    let new = old.start_replica();
    let fence: Option<u64> = old.cmd(&[ACQUIRE.name, "job", "before", TTL_MS]).unwrap();
    assert!(fence.is_some(), "the primary grants while its replica is attached");
    old.wait_for_replicas(1, Duration::from_secs(5));
    old.kill9();
    new.promote();
    for (name, value) in on_return {
        old.set_restart_arg(name, value);
    }
    old.restart();
    assert_eq!(old.info_field("replication", "role").as_deref(), Some("master"), "it returns as a primary");
    (old, new)
}

/// Asks the returning primary for a new key every 50 ms for `WINDOW`, then
/// demotes it (what Sentinel does 8–12 s after it returns). Returns the fences it granted and
/// the error codes it answered.
fn ask_during_the_window(old: &Server, new: &Server) -> (Vec<u64>, Vec<String>) {
    let (mut granted, mut refused) = (Vec::new(), Vec::new());
    let end = Instant::now() + WINDOW;
    for i in 0.. {
        if Instant::now() >= end {
            break;
        }
        match old.cmd::<Option<u64>>(&[ACQUIRE.name, &format!("window:{i}"), "t", TTL_MS]) {
            Ok(Some(fence)) => granted.push(fence),
            Ok(None) => {}
            Err(e) => refused.push(e.code().unwrap_or("?").to_owned()),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _: () = old.cmd(&["REPLICAOF", "127.0.0.1", &new.port().to_string()]).unwrap();
    wait_replica_online(new, old);
    (granted, refused)
}

#[test]
fn without_a_setting_the_returning_primary_grants_in_its_window() {
    let (old, new) = returned_primary(&[], &[]);
    let (granted, refused) = ask_during_the_window(&old, &new);
    eprintln!("no setting: {} grant(s), refusals {refused:?}", granted.len());
    assert!(!granted.is_empty() && refused.is_empty(), "{granted:?} {refused:?}");
}

#[test]
fn min_replicas_to_write_makes_the_returning_primary_refuse_every_grant() {
    // The new primary needs a replica too: with one setting for all nodes, a failover leaves
    // the promoted node refusing writes until a replica attaches.
    let (old, new) = returned_primary(&[("min-replicas-to-write", "1"), ("min-replicas-max-lag", "10")], &[]);
    let other: redis::RedisResult<Option<u64>> = old.cmd(&[ACQUIRE.name, "other-job", "t", TTL_MS]);
    let err = other.expect_err("a primary without replicas refuses writes");
    assert_eq!(err.code(), Some("NOREPLICAS"), "{}", error_text(&err));
    let (granted, refused) = ask_during_the_window(&old, &new);
    eprintln!("min-replicas-to-write 1: {} grant(s), {} refusal(s)", granted.len(), refused.len());
    assert!(granted.is_empty(), "{granted:?}");
    assert!(!refused.is_empty() && refused.iter().all(|c| c == "NOREPLICAS"), "{refused:?}");
}

#[test]
fn a_restart_grace_longer_than_the_window_makes_the_returning_primary_refuse_every_grant() {
    // Set for the restart only: the grace also runs when a server first starts.
    let (old, new) = returned_primary(&[], &[("fencedlock.restart-grace-ms", "10000")]);
    let other: redis::RedisResult<Option<u64>> = old.cmd(&[ACQUIRE.name, "other-job", "t", TTL_MS]);
    let err = other.expect_err("the restart grace refuses grants");
    assert_eq!(err.code(), Some(ReplyError::RestartGrace.code()), "{}", error_text(&err));
    let (granted, refused) = ask_during_the_window(&old, &new);
    eprintln!("restart-grace-ms 10000: {} grant(s), {} refusal(s)", granted.len(), refused.len());
    assert!(granted.is_empty(), "{granted:?}");
    assert!(!refused.is_empty(), "the returning primary was asked");
    // Demoted, it is a replica and refuses every write; the promoted node grants.
    let after: redis::RedisResult<Option<u64>> = old.cmd(&[ACQUIRE.name, "other-job", "t", TTL_MS]);
    assert_eq!(after.expect_err("a replica refuses writes").code(), Some("READONLY"));
    let on_new: Option<u64> = new.cmd(&[ACQUIRE.name, "other-job", "t", TTL_MS]).unwrap();
    assert!(on_new.is_some());
}
