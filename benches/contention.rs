//! Contention: 64 tasks take turns on one hot key until a fixed number of grants was handed
//! out; each holder works ~1 ms (a short critical section) and releases.
//!
//! Compares `Locker::acquire`'s jittered exponential backoff (the default, 20 ms doubling to
//! 400 ms) with a naive fixed-delay poll (`try_acquire`, sleep 20 ms, repeat). Criterion times
//! one batch of grants per iteration (grants/s = batch / time); the server's own count of
//! commands (INFO commandstats) per grant is written to
//! `target/bench-results/contention.json` for benches/report.py.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use fencedlock::{Error, LockConfig, Locker};
use harness::Server;

const TASKS: usize = 64;
const GRANTS: usize = 256;
const HOLD: Duration = Duration::from_millis(1);
const POLL: Duration = Duration::from_millis(20);
/// No task waits longer than this for one grant: a stuck run fails instead of hanging.
const MAX_WAIT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug)]
enum Strategy {
    Backoff,
    FixedPoll,
}

impl Strategy {
    fn name(self) -> &'static str {
        match self {
            Strategy::Backoff => "fencedlock_backoff",
            Strategy::FixedPoll => "fixed_20ms_poll",
        }
    }
}

/// Totals over every batch of a strategy (warm-up included: every batch is a valid sample).
#[derive(Default, Debug)]
struct Totals {
    grants: usize,
    elapsed: Duration,
    commands: BTreeMap<String, u64>,
}

async fn one_grant(locker: &Locker, key: &str, strategy: Strategy) {
    let give_up = Instant::now() + MAX_WAIT;
    let lease = match strategy {
        Strategy::Backoff => locker.acquire(key).await.expect("grant within max_wait"),
        Strategy::FixedPoll => loop {
            match locker.try_acquire(key).await {
                Ok(lease) => break lease,
                Err(Error::Contended { .. }) if Instant::now() < give_up => tokio::time::sleep(POLL).await,
                Err(e) => panic!("fixed poll: {e}"),
            }
        },
    };
    tokio::time::sleep(HOLD).await;
    assert!(lease.release().await.expect("release"), "lease lost while holding it");
}

/// Hands out exactly `GRANTS` grants among `TASKS` tasks; returns the wall time.
async fn batch(locker: &Locker, key: &'static str, strategy: Strategy) -> Duration {
    let issued = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let locker = locker.clone();
            let issued = Arc::clone(&issued);
            tokio::spawn(async move {
                while issued.fetch_add(1, Ordering::Relaxed) < GRANTS {
                    one_grant(&locker, key, strategy).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("contending task panicked");
    }
    started.elapsed()
}

/// `cmdstat_<name>` → calls, from `INFO commandstats`.
fn command_calls(server: &Server) -> BTreeMap<String, u64> {
    server
        .info("commandstats")
        .into_iter()
        .filter_map(|(k, v)| {
            let name = k.strip_prefix("cmdstat_")?.to_owned();
            let calls = v.split(',').find_map(|f| f.strip_prefix("calls="))?.parse().ok()?;
            Some((name, calls))
        })
        .collect()
}

fn contention(c: &mut Criterion) {
    let rt = support::runtime();
    let servers = support::redis_servers(1);
    let server = &servers[0];
    let totals: Mutex<BTreeMap<&'static str, Totals>> = Mutex::new(BTreeMap::new());

    let mut group = c.benchmark_group("contention_64_tasks");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4));
    for strategy in [Strategy::Backoff, Strategy::FixedPoll] {
        let config =
            LockConfig::builder().ttl(Duration::from_secs(5)).max_wait(MAX_WAIT).build().expect("config");
        let locker = Locker::open(&server.url(), config).expect("locker");
        let key: &'static str = match strategy {
            Strategy::Backoff => "hot:backoff",
            Strategy::FixedPoll => "hot:poll",
        };
        group.bench_function(strategy.name(), |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let locker = locker.clone();
                let totals = &totals;
                async move {
                    let mut elapsed = Duration::ZERO;
                    for _ in 0..iters {
                        let before = command_calls(server);
                        let took = batch(&locker, key, strategy).await;
                        let after = command_calls(server);
                        elapsed += took;
                        let mut all = totals.lock().unwrap_or_else(|p| p.into_inner());
                        let t = all.entry(strategy.name()).or_default();
                        t.grants += GRANTS;
                        t.elapsed += took;
                        for (name, calls) in after {
                            let delta = calls - before.get(&name).copied().unwrap_or(0);
                            if delta > 0 && name != "info" {
                                *t.commands.entry(name).or_default() += delta;
                            }
                        }
                    }
                    elapsed
                }
            })
        });
    }
    group.finish();
    write_results(&totals.lock().unwrap_or_else(|p| p.into_inner()));
}

/// JSON by hand: one object per strategy with grants/s and commands per grant.
fn write_results(totals: &BTreeMap<&'static str, Totals>) {
    let mut out = String::from("{\n");
    out += &format!(
        " \"settings\": {{\"tasks\": {TASKS}, \"grants_per_batch\": {GRANTS}, \"hold_ms\": {}, \"poll_ms\": {}}},\n",
        HOLD.as_millis(),
        POLL.as_millis()
    );
    let entries: Vec<String> = totals
        .iter()
        .map(|(name, t)| {
            let total: u64 = t.commands.values().sum();
            let per_grant = |n: u64| n as f64 / t.grants as f64;
            let cmds: Vec<String> = t
                .commands
                .iter()
                .map(|(c, n)| format!("\"{c}\": {:.3}", per_grant(*n)))
                .collect();
            format!(
                " \"{name}\": {{\"grants\": {}, \"seconds\": {:.3}, \"grants_per_s\": {:.1}, \"commands_per_grant\": {:.3}, \"by_command\": {{{}}}}}",
                t.grants,
                t.elapsed.as_secs_f64(),
                t.grants as f64 / t.elapsed.as_secs_f64(),
                per_grant(total),
                cmds.join(", ")
            )
        })
        .collect();
    out += &entries.join(",\n");
    out += "\n}\n";
    let path = support::results_file("contention.json");
    std::fs::write(&path, out).unwrap_or_else(|e| panic!("write {path:?}: {e}"));
    eprintln!("contention results written to {}", path.display());
}

criterion_group! {
    name = benches;
    config = support::criterion();
    targets = contention
}
criterion_main!(benches);
