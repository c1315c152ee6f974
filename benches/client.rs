//! Client-side latency: one lease (acquire + release) per iteration, against the floors and
//! against the `rslock` crate, on servers this bench starts (127.0.0.1, module loaded).
//!
//! - `single_node`: two PINGs on one multiplexed connection (the floor: two round trips),
//!   the raw ACQUIRE + RELEASE commands on that connection (the server's share), and
//!   `Locker::try_acquire` + `Lease::release` (what an application pays).
//! - `managed`: one server without the module, as a managed service (the locker loads the
//!   Functions library itself): two PINGs, the `Locker` lease through the library, and
//!   `rslock` on that server alone (issue 44).
//! - `redlock_5`: five independent masters: `Redlock` plain (no raise step) and fenced (one
//!   more round trip to the granting nodes), `rslock` (SET NX PX + EVALSHA unlock) on the same
//!   five servers, and the single-node lease for scale.
//!
//! Criterion measures each operation on its own (absolute times). Because the machine is
//! shared and its load drifts within seconds, the ratios that the targets are about come from
//! a second, **paired** pass (`cargo bench` only): the operations of a group run in short
//! alternating blocks, and each ratio is the median over rounds of the per-round ratio. It is
//! written to `target/bench-results/client_paired.json`.
//!
//! On one machine the five servers share the cores with the client, so a Redlock round is
//! CPU-bound rather than round-trip-bound: compare ratios within one run.

mod support;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use fencedlock::{Fencing, LockConfig, Locker, Node, Redlock};
use futures::future::BoxFuture;
use harness::{redis, Server};

const TTL: Duration = Duration::from_secs(10);

fn config() -> LockConfig {
    LockConfig::builder().ttl(TTL).build().expect("a valid lock config")
}

/// The operations measured, each one lease (or its floor), runnable any number of times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    TwoPings,
    RawAcquireRelease,
    SingleNode,
    RedlockPlain,
    RedlockFenced,
    Rslock,
    ManagedPings,
    ManagedSingleNode,
    ManagedRslock,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::TwoPings => "two_pings",
            Op::RawAcquireRelease => "raw_acquire_release",
            Op::SingleNode => "fencedlock_single_node",
            Op::RedlockPlain => "fencedlock_redlock_plain",
            Op::RedlockFenced => "fencedlock_redlock_fenced",
            Op::Rslock => "rslock",
            Op::ManagedPings => "managed_two_pings",
            Op::ManagedSingleNode => "managed_fencedlock_single_node",
            Op::ManagedRslock => "managed_rslock",
        }
    }
}

/// Five servers and a client of every kind on them. Server 0 also serves the single-node
/// operations (on their own keys). A sixth, without the module, serves the managed ones.
struct Fixture {
    _servers: Vec<Server>,
    conn: redis::aio::MultiplexedConnection,
    single: Locker,
    plain: Redlock,
    fenced: Redlock,
    rslock: rslock::LockManager,
    managed_conn: redis::aio::MultiplexedConnection,
    managed: Locker,
    managed_rslock: rslock::LockManager,
}

impl Fixture {
    fn start(rt: &tokio::runtime::Runtime) -> Fixture {
        let mut servers = support::redis_servers(5);
        let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
        let bare = Server::builder().flavor(harness::Flavor::Redis).managed().start();
        let bare_url = bare.url();
        let nodes = || urls.iter().map(|u| Node::new(u).expect("node")).collect::<Vec<_>>();
        Fixture {
            conn: rt.block_on(servers[0].async_conn()),
            single: Locker::open(&urls[0], config()).expect("locker"),
            plain: Redlock::with_fencing(nodes(), config(), Fencing::QuorumMax).expect("redlock"),
            fenced: Redlock::with_fencing(nodes(), config(), Fencing::Raise).expect("redlock"),
            rslock: rslock::LockManager::new(urls.clone()),
            managed_conn: rt.block_on(bare.async_conn()),
            managed: Locker::open(&bare_url, config()).expect("locker"),
            managed_rslock: rslock::LockManager::new(vec![bare_url.clone()]),
            _servers: {
                servers.push(bare);
                servers
            },
        }
    }

    /// One run of `op`; panics if a lease is refused or lost (nothing else contends).
    fn run(&self, op: Op) -> BoxFuture<'static, ()> {
        match op {
            Op::TwoPings | Op::ManagedPings => {
                let mut conn = if op == Op::TwoPings { self.conn.clone() } else { self.managed_conn.clone() };
                Box::pin(async move {
                    let a: String = redis::cmd("PING").query_async(&mut conn).await.expect("PING");
                    let b: String = redis::cmd("PING").query_async(&mut conn).await.expect("PING");
                    black_box((a, b));
                })
            }
            Op::RawAcquireRelease => {
                let mut conn = self.conn.clone();
                Box::pin(async move { support::raw_lease(&mut conn, "bench:raw", TTL).await })
            }
            Op::SingleNode | Op::ManagedSingleNode => {
                let locker = if op == Op::SingleNode { self.single.clone() } else { self.managed.clone() };
                Box::pin(async move {
                    let lease = locker.try_acquire("bench:single").await.expect("grant");
                    black_box(lease.fence());
                    assert!(lease.release().await.expect("release"), "lease lost");
                })
            }
            Op::RedlockPlain | Op::RedlockFenced => {
                let (redlock, key) = if op == Op::RedlockPlain {
                    (self.plain.clone(), "bench:plain")
                } else {
                    (self.fenced.clone(), "bench:fenced")
                };
                Box::pin(async move {
                    let lease = redlock.try_acquire(key).await.expect("quorum grant");
                    black_box(lease.fence());
                    assert!(lease.release().await.expect("release"), "lease lost");
                })
            }
            Op::Rslock | Op::ManagedRslock => {
                let rslock = if op == Op::Rslock { self.rslock.clone() } else { self.managed_rslock.clone() };
                Box::pin(async move {
                    let lock = rslock.lock("bench:rslock", TTL).await.expect("rslock grant");
                    rslock.unlock(&lock).await;
                })
            }
        }
    }
}

const GROUPS: [(&str, &[Op]); 3] = [
    ("single_node", &[Op::TwoPings, Op::RawAcquireRelease, Op::SingleNode]),
    ("managed", &[Op::ManagedPings, Op::ManagedSingleNode, Op::ManagedRslock]),
    ("redlock_5", &[Op::SingleNode, Op::RedlockPlain, Op::RedlockFenced, Op::Rslock]),
];

fn criterion_pass(c: &mut Criterion, rt: &tokio::runtime::Runtime, fx: &Fixture) {
    for (group_name, ops) in GROUPS {
        let mut group = c.benchmark_group(group_name);
        for &op in ops {
            group.bench_function(op.name(), |b| b.to_async(rt).iter(|| fx.run(op)));
        }
        group.finish();
    }
}

/// Alternating blocks of each group's operations: about `budget` per group.
fn paired_pass(rt: &tokio::runtime::Runtime, fx: &Fixture, budget: Duration) {
    const BLOCK: Duration = Duration::from_millis(25);
    let mut out = String::from("{\n");
    let mut groups = Vec::new();
    for (group_name, ops) in GROUPS {
        // Iterations per block: from a short calibration of each op.
        let per_block: Vec<u32> = ops
            .iter()
            .map(|&op| {
                let t0 = Instant::now();
                let mut n = 0u32;
                while t0.elapsed() < BLOCK * 4 && n < 100_000 {
                    rt.block_on(fx.run(op));
                    n += 1;
                }
                let each = t0.elapsed() / n.max(1);
                (BLOCK.as_nanos() / each.as_nanos().max(1)).clamp(5, 100_000) as u32
            })
            .collect();
        let mut samples: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        let started = Instant::now();
        let mut round = 0usize;
        while started.elapsed() < budget && round < 10_000 {
            // Alternate the order so no op always runs right after the same neighbour.
            let order: Vec<usize> =
                if round & 1 == 0 { (0..ops.len()).collect() } else { (0..ops.len()).rev().collect() };
            for i in order {
                let op = ops[i];
                let n = per_block[i];
                let t0 = Instant::now();
                rt.block_on(async {
                    for _ in 0..n {
                        fx.run(op).await;
                    }
                });
                let micros = t0.elapsed().as_secs_f64() * 1e6 / f64::from(n);
                samples.entry(op.name()).or_default().push(micros);
            }
            round += 1;
        }
        let entries: Vec<String> =
            samples.iter().map(|(name, v)| format!("  \"{name}\": [{}]", join(v))).collect();
        eprintln!("paired pass {group_name}: {round} rounds");
        groups.push(format!(" \"{group_name}\": {{\n{}\n }}", entries.join(",\n")));
    }
    out += &groups.join(",\n");
    out += "\n}\n";
    let path = support::results_file("client_paired.json");
    std::fs::write(&path, out).unwrap_or_else(|e| panic!("write {path:?}: {e}"));
    eprintln!("paired per-round times (µs per lease) written to {}", path.display());
}

fn join(v: &[f64]) -> String {
    v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(", ")
}

fn main() {
    let mut c = support::criterion();
    let rt = support::runtime();
    let fx = Fixture::start(&rt);
    criterion_pass(&mut c, &rt, &fx);
    if let Some(budget) = support::paired_budget(Duration::from_secs(15)) {
        paired_pass(&rt, &fx, budget);
    }
    c.final_summary();
}
