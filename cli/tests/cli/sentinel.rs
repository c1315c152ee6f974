//! `--redis redis+sentinel://…`: a loop of `fencedlock run --wait` jobs, as cron would start
//! them, across a `kill -9` of the primary. Every job after the failover is granted by the
//! promoted replica, and the fences the jobs saw only rise.

use std::time::{Duration, Instant};

use harness::{wait_replica_online, Sentinels, SENTINEL_FAILOVER_LIMIT};

use crate::support::*;

#[test]
fn run_jobs_follow_a_sentinel_failover_and_fences_only_rise() {
    let mut primary = Server::builder().arg("appendonly", "yes").start();
    let replica = primary.replica_builder().arg("appendonly", "yes").start();
    wait_replica_online(&primary, &replica);
    let sentinels = Sentinels::start(&primary);
    sentinels.wait_ready(1);
    let url = sentinels.url();
    let dir = scratch();
    let fences = p(dir.path(), "fences");
    let script = format!("echo $FENCEDLOCK_FENCE >> '{}'", fences.display());
    let job = || {
        run(&[
            "run",
            "-k",
            "sentinel-job",
            "--ttl",
            "5s",
            "--wait",
            "25s",
            "--redis",
            &url,
            "--",
            "sh",
            "-c",
            &script,
        ])
    };

    for _ in 0..2 {
        let out = job();
        assert_eq!(out.code(), 0, "before the failover: {out:?}");
    }
    let killed = Instant::now();
    primary.kill9();
    // The first job after the kill waits (--wait) until the promoted replica grants.
    let out = job();
    assert_eq!(out.code(), 0, "the first job after the kill: {out:?}");
    let took = killed.elapsed();
    eprintln!("kill -9 to the end of the first job after it: {took:?}");
    assert!(took < SENTINEL_FAILOVER_LIMIT, "{took:?}");
    for _ in 0..2 {
        let out = job();
        assert_eq!(out.code(), 0, "after the failover: {out:?}");
        assert!(out.elapsed < Duration::from_secs(5), "no waiting once the new primary is known: {out:?}");
    }
    let seen = fences_written(&fences);
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "fences must only rise: {seen:?}");
    let _ = replica.cmd::<String>(&["PING"]);
    assert_eq!(
        replica.info_field("replication", "role").as_deref(),
        Some("master"),
        "the replica was promoted"
    );
}
