//! Redlock over 3, 5, 7 and 9 masters against the `rslock` crate on the same masters (issue 24):
//! time per lease (acquire + release, nothing contending) as the quorum grows.
//!
//! Paired only, as `client.rs`'s paired pass: for each master count, `Redlock` (plain: no raise
//! step) and `rslock` run in alternating ~25 ms blocks for about `FENCEDLOCK_BENCH_PAIRED_SECS`
//! (default 10) and the ratio is the median of the per-round ratios. All masters are local Redis
//! processes with the module, sharing the machine's cores with the client, so a round is
//! CPU-bound rather than round-trip-bound: compare ratios within one run. Writes
//! `target/bench-results/redlock_scale.json`, read by benches/report.py (report_growth.py).

mod support;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use fencedlock::{Fencing, LockConfig, Node, Redlock};

const TTL: Duration = Duration::from_secs(10);
/// The master counts measured; the servers of the largest are started once and shared.
const MASTERS: [usize; 4] = [3, 5, 7, 9];
const BLOCK: Duration = Duration::from_millis(25);
const MAX_ROUNDS: usize = 10_000;

fn config() -> LockConfig {
    LockConfig::builder().ttl(TTL).build().expect("a valid lock config")
}

/// One Redlock and one rslock manager over the same `m` masters.
struct Pair {
    redlock: Redlock,
    rslock: rslock::LockManager,
    key: String,
    rslock_key: String,
}

impl Pair {
    fn new(urls: &[String]) -> Pair {
        let nodes = urls.iter().map(|u| Node::new(u).expect("node")).collect();
        Pair {
            redlock: Redlock::with_fencing(nodes, config(), Fencing::QuorumMax).expect("redlock"),
            rslock: rslock::LockManager::new(urls.to_vec()),
            key: format!("bench:scale:{}", urls.len()),
            rslock_key: format!("bench:scale:{}:rslock", urls.len()),
        }
    }

    /// `n` leases, `Redlock`'s (`ours`) or `rslock`'s; panics if one is refused or lost (nothing else contends).
    async fn leases(&self, ours: bool, n: u32) {
        for _ in 0..n {
            if ours {
                let lease = self.redlock.try_acquire(&self.key).await.expect("quorum grant");
                black_box(lease.fence());
                assert!(lease.release().await.expect("release"), "lease lost");
            } else {
                let lock = self.rslock.lock(self.rslock_key.as_str(), TTL).await.expect("rslock grant");
                self.rslock.unlock(&lock).await;
            }
        }
    }
}

/// Leases per ~25 ms block, from a short calibration.
fn per_block(rt: &tokio::runtime::Runtime, pair: &Pair, ours: bool) -> u32 {
    let t0 = Instant::now();
    let mut n = 0u32;
    while t0.elapsed() < BLOCK * 4 && n < 100_000 {
        rt.block_on(pair.leases(ours, 1));
        n += 1;
    }
    let each = t0.elapsed() / n.max(1);
    (BLOCK.as_nanos() / each.as_nanos().max(1)).clamp(5, 100_000) as u32
}

/// µs per lease of each kind, one sample per round, alternating which goes first.
fn paired(rt: &tokio::runtime::Runtime, pair: &Pair, budget: Duration) -> BTreeMap<&'static str, Vec<f64>> {
    let kinds = [("fencedlock_redlock_plain", true), ("rslock", false)];
    let blocks: Vec<u32> = kinds.iter().map(|&(_, ours)| per_block(rt, pair, ours)).collect();
    let mut samples: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let started = Instant::now();
    let mut round = 0usize;
    while started.elapsed() < budget && round < MAX_ROUNDS {
        let order: [usize; 2] = if round & 1 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let (name, ours) = kinds[i];
            let t0 = Instant::now();
            rt.block_on(pair.leases(ours, blocks[i]));
            samples.entry(name).or_default().push(t0.elapsed().as_secs_f64() * 1e6 / f64::from(blocks[i]));
        }
        round += 1;
    }
    samples
}

fn main() {
    let Some(budget) = support::paired_budget(Duration::from_secs(10)) else { return };
    let rt = support::runtime();
    let servers = support::redis_servers(MASTERS[MASTERS.len() - 1]);
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let mut groups = Vec::new();
    for m in MASTERS {
        let pair = Pair::new(&urls[..m]);
        let samples = paired(&rt, &pair, budget);
        let rounds = samples.values().map(Vec::len).max().unwrap_or(0);
        eprintln!("redlock_scale {m} masters: {rounds} rounds");
        let entries: Vec<String> = samples
            .iter()
            .map(|(name, v)| {
                format!(
                    "  \"{name}\": [{}]",
                    v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(", ")
                )
            })
            .collect();
        groups.push(format!(" \"{m}\": {{\n{}\n }}", entries.join(",\n")));
    }
    let path = support::results_file("redlock_scale.json");
    std::fs::write(&path, format!("{{\n{}\n}}\n", groups.join(",\n")))
        .unwrap_or_else(|e| panic!("write {path:?}: {e}"));
    eprintln!("per-round times (µs per lease) written to {}", path.display());
    drop(servers);
}
