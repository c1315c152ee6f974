//! What the criterion benches share: servers started for the run, a runtime, and where
//! results that criterion does not record (e.g. commands per grant) are written.
#![allow(dead_code)] // each bench target uses a different part of this module

use std::path::PathBuf;
use std::time::Duration;

use harness::{Flavor, Server};

/// One lease by the raw module commands on `conn` (`ACQUIRE` then `RELEASE` of `key` for a
/// fixed token): what the server alone costs a `Locker` lease, its floor in the comparisons.
pub async fn raw_lease(conn: &mut harness::redis::aio::MultiplexedConnection, key: &str, ttl: Duration) {
    use fencedlock_protocol::command::{ACQUIRE, RELEASE};
    const TOKEN: &[u8] = b"0123456789abcdef";
    let fence: Option<u64> = harness::redis::cmd(ACQUIRE.name)
        .arg(key)
        .arg(TOKEN)
        .arg(ttl.as_millis() as u64)
        .query_async(conn)
        .await
        .expect("ACQUIRE");
    let released: i64 =
        harness::redis::cmd(RELEASE.name).arg(key).arg(TOKEN).query_async(conn).await.expect("RELEASE");
    assert!(fence.is_some() && released == 1, "raw lease not granted/released");
}

/// Redis servers with the module, quiet logs, no persistence (the harness default).
/// Started when the bench runs, never when it is only built (`cargo bench --no-run`).
pub fn redis_servers(n: usize) -> Vec<Server> {
    (0..n).map(|_| Server::builder().flavor(Flavor::Redis).arg("loglevel", "notice").start()).collect()
}

/// The runtime every bench runs on: tokio's default multi-threaded one, as applications use.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime")
}

/// `target/bench-results/<name>` (honouring `CARGO_TARGET_DIR`), read by benches/report.py.
pub fn results_file(name: &str) -> PathBuf {
    let dir = harness::target_dir().join("bench-results");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {dir:?}: {e}"));
    dir.join(name)
}

/// Short criterion runs: the ratios within one run are what count, and a full run of every
/// bench must fit in a few minutes on a 2-core machine.
pub fn criterion() -> criterion::Criterion {
    criterion::Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .sample_size(40)
        .configure_from_args()
}

/// The time budget of a paired pass: `FENCEDLOCK_BENCH_PAIRED_SECS`, else `default`. `None`
/// unless `cargo bench` runs this (it passes `--bench`): `cargo test --benches` runs each
/// bench once and must stay quick, so it measures nothing paired.
pub fn paired_budget(default: Duration) -> Option<Duration> {
    if !std::env::args().any(|a| a == "--bench") {
        return None;
    }
    let secs = std::env::var("FENCEDLOCK_BENCH_PAIRED_SECS").ok().and_then(|s| s.parse().ok());
    Some(secs.map_or(default, Duration::from_secs))
}
