//! Contention: 64 tasks take turns on one hot key until a fixed number of grants was handed
//! out; each holder works ~1 ms (a short critical section) and releases.
//!
//! Three ways to wait for the busy key, each on a `Locker` of its own:
//! - `fencedlock_server_wait`: `Locker::acquire` with its defaults, which waits on the server
//!   (`FENCEDLOCK.ACQUIRE … BLOCK`; the server hands the lock to the head of its queue at the
//!   release);
//! - `fencedlock_backoff`: `Locker::acquire` polling with its jittered exponential backoff
//!   (20 ms doubling to 400 ms) — what it did before `BLOCK` (`max_blocking(0)`);
//! - `fixed_20ms_poll`: a naive fixed-delay poll (`try_acquire`, sleep 20 ms, repeat).
//!
//! Next to them, the physical limit measured in the same run: one grant per (hold + one
//! ACQUIRE round trip). The round trip is the median of sequential ACQUIREs on an idle key,
//! sampled before every batch; the hold is the critical section as measured by the holders
//! (from the grant to the start of the release: the 1 ms of work and a little more). Criterion times one batch of grants per
//! iteration (grants/s = batch / time). Written to `target/bench-results/contention.json`
//! for benches/report.py, and printed, per strategy: grants/s, server commands per grant
//! (`INFO commandstats` deltas), the handoff latency (from a holder starting its release to
//! the next holder's grant, p50) and the longest wait for one grant, against what FIFO order
//! predicts (64 × (hold + round trip)).
//!
//! Reproduce: `cargo build --release -p fencedlock-module && cargo bench --bench contention`.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use fencedlock::{Error, LockConfig, Locker};
use fencedlock_protocol::command::ACQUIRE;
use harness::{redis, Server};

const TASKS: usize = 64;
const GRANTS: usize = 256;
const HOLD: Duration = Duration::from_millis(1);
const POLL: Duration = Duration::from_millis(20);
/// No task waits longer than this for one grant: a stuck run fails instead of hanging.
const MAX_WAIT: Duration = Duration::from_secs(60);
/// Round-trip samples taken before each batch.
const RTT_SAMPLES: usize = 32;

/// The goals for waiting on the server, against the same run's measurements.
const GOAL_OF_LIMIT: f64 = 0.8;
const GOAL_OVER_BACKOFF: f64 = 3.0;
const GOAL_COMMANDS_PER_GRANT: f64 = 2.1;
const GOAL_HANDOFF_RTTS: f64 = 1.5;
const GOAL_MAX_WAIT_OF_FIFO: f64 = 1.5;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Strategy {
    ServerWait,
    Backoff,
    FixedPoll,
}

impl Strategy {
    const ALL: [Strategy; 3] = [Strategy::ServerWait, Strategy::Backoff, Strategy::FixedPoll];

    fn name(self) -> &'static str {
        match self {
            Strategy::ServerWait => "fencedlock_server_wait",
            Strategy::Backoff => "fencedlock_backoff",
            Strategy::FixedPoll => "fixed_20ms_poll",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Strategy::ServerWait => "hot:wait",
            Strategy::Backoff => "hot:backoff",
            Strategy::FixedPoll => "hot:poll",
        }
    }

    fn config(self) -> LockConfig {
        let builder = LockConfig::builder().ttl(Duration::from_secs(5)).max_wait(MAX_WAIT);
        let builder = match self {
            Strategy::ServerWait | Strategy::FixedPoll => builder,
            Strategy::Backoff => builder.max_blocking(0),
        };
        builder.build().expect("config")
    }
}

/// What the tasks of a batch saw, in time order.
#[derive(Default)]
struct Recorder {
    /// When the current holder started its release (`None` after the next grant took it).
    release_started: Mutex<Option<Instant>>,
    /// Release start to the next grant.
    handoffs: Mutex<Vec<Duration>>,
    /// Call to grant, per acquisition.
    waits: Mutex<Vec<Duration>>,
    /// The critical sections as they lasted.
    holds: Mutex<Vec<Duration>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Totals over every batch of a strategy (warm-up included: every batch is a valid sample).
#[derive(Default, Debug)]
struct Totals {
    grants: usize,
    elapsed: Duration,
    commands: BTreeMap<String, u64>,
    handoffs: Vec<Duration>,
    waits: Vec<Duration>,
    holds: Vec<Duration>,
}

async fn one_grant(locker: &Locker, key: &str, strategy: Strategy, rec: &Recorder) {
    let asked = Instant::now();
    let give_up = asked + MAX_WAIT;
    let lease = match strategy {
        Strategy::ServerWait | Strategy::Backoff => locker.acquire(key).await.expect("grant within max_wait"),
        Strategy::FixedPoll => loop {
            match locker.try_acquire(key).await {
                Ok(lease) => break lease,
                Err(Error::Contended { .. }) if Instant::now() < give_up => tokio::time::sleep(POLL).await,
                Err(e) => panic!("fixed poll: {e}"),
            }
        },
    };
    let granted = Instant::now();
    lock(&rec.waits).push(granted - asked);
    if let Some(released) = lock(&rec.release_started).take() {
        lock(&rec.handoffs).push(granted.saturating_duration_since(released));
    }
    work(HOLD).await;
    lock(&rec.holds).push(granted.elapsed());
    *lock(&rec.release_started) = Some(Instant::now());
    assert!(lease.release().await.expect("release"), "lease lost while holding it");
}

/// The critical section: ~`d` of work. A thread's sleep lasts `d` plus a few microseconds
/// (`block_in_place` hands the worker's other tasks to another thread meanwhile); a Tokio
/// sleep would round up to the timer wheel's next millisecond tick and make a "1 ms" section
/// last about 2 ms, and `spawn_blocking` adds two thread wakeups (~0.5 ms here).
async fn work(d: Duration) {
    tokio::task::block_in_place(|| std::thread::sleep(d));
}

/// Hands out exactly `GRANTS` grants among `TASKS` tasks; returns the wall time.
async fn batch(locker: &Locker, strategy: Strategy, rec: &Arc<Recorder>) -> Duration {
    let issued = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (locker, issued, rec) = (locker.clone(), Arc::clone(&issued), Arc::clone(rec));
            tokio::spawn(async move {
                while issued.fetch_add(1, Ordering::Relaxed) < GRANTS {
                    one_grant(&locker, strategy.key(), strategy, &rec).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("contending task panicked");
    }
    started.elapsed()
}

/// Sequential `FENCEDLOCK.ACQUIRE`s (the holder re-entering) on an idle key: one round trip
/// each, command included.
async fn round_trips(conn: &mut redis::aio::MultiplexedConnection, n: usize) -> Vec<Duration> {
    let mut cmd = redis::cmd(ACQUIRE.name);
    cmd.arg("rtt:probe").arg("rtt-token").arg(60_000);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let sent = Instant::now();
        let fence: Option<u64> = cmd.query_async(conn).await.expect("probe ACQUIRE");
        out.push(sent.elapsed());
        assert!(fence.is_some(), "the probe key is ours");
    }
    out
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
    let rtts: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
    let probe = Mutex::new(rt.block_on(server.async_conn()));

    let mut group = c.benchmark_group("contention_64_tasks");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4));
    for strategy in Strategy::ALL {
        let locker = Locker::open(&server.url(), strategy.config()).expect("locker");
        group.bench_function(strategy.name(), |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let locker = locker.clone();
                let (totals, rtts, probe) = (&totals, &rtts, &probe);
                async move {
                    let mut elapsed = Duration::ZERO;
                    for _ in 0..iters {
                        let mut conn = lock(probe).clone();
                        let sampled = round_trips(&mut conn, RTT_SAMPLES).await;
                        lock(rtts).extend(sampled);
                        let rec = Arc::new(Recorder::default());
                        let before = command_calls(server);
                        let took = batch(&locker, strategy, &rec).await;
                        let after = command_calls(server);
                        elapsed += took;
                        let mut all = lock(totals);
                        let t = all.entry(strategy.name()).or_default();
                        t.grants += GRANTS;
                        t.elapsed += took;
                        for (name, calls) in after {
                            let delta = calls - before.get(&name).copied().unwrap_or(0);
                            if delta > 0 && name != "info" {
                                *t.commands.entry(name).or_default() += delta;
                            }
                        }
                        t.handoffs.extend(lock(&rec.handoffs).iter());
                        t.waits.extend(lock(&rec.waits).iter());
                        t.holds.extend(lock(&rec.holds).iter());
                    }
                    elapsed
                }
            })
        });
    }
    group.finish();
    let rtt = quantile(&mut lock(&rtts).clone(), 0.5);
    write_results(&lock(&totals), rtt);
}

/// The `q` quantile (0..=1) of `xs` (sorted in place); zero for none.
fn quantile(xs: &mut [Duration], q: f64) -> Duration {
    if xs.is_empty() {
        return Duration::ZERO;
    }
    xs.sort_unstable();
    let at = ((xs.len() - 1) as f64 * q).round() as usize;
    xs[at.min(xs.len() - 1)]
}

fn mean(xs: &[Duration]) -> Duration {
    if xs.is_empty() {
        return Duration::ZERO;
    }
    xs.iter().sum::<Duration>() / xs.len() as u32
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// JSON by hand: the limit, then one object per strategy; and a summary with the goals on
/// stderr.
fn write_results(totals: &BTreeMap<&'static str, Totals>, rtt: Duration) {
    let wait = totals.get(Strategy::ServerWait.name());
    // The limit uses the critical section as the waiting strategy's holders measured it.
    let hold = wait.map_or(HOLD, |t| mean(&t.holds));
    let cycle = hold + rtt;
    let limit = 1.0 / cycle.as_secs_f64();
    let fifo = cycle * TASKS as u32;

    let mut out = String::from("{\n");
    out += &format!(
        " \"settings\": {{\"tasks\": {TASKS}, \"grants_per_batch\": {GRANTS}, \"hold_ms\": {}, \"poll_ms\": {}}},\n",
        HOLD.as_millis(),
        POLL.as_millis()
    );
    out += &format!(
        " \"limit\": {{\"rtt_ms\": {:.4}, \"hold_ms_measured\": {:.4}, \"grants_per_s\": {limit:.1}, \"fifo_max_wait_ms\": {:.2}}},\n",
        ms(rtt),
        ms(hold),
        ms(fifo)
    );
    let mut lines = vec![format!(
        "contention: limit 1 / (hold {:.3} ms + ACQUIRE round trip {:.3} ms) = {limit:.0} grants/s; FIFO max wait {TASKS} x {:.3} ms = {:.1} ms",
        ms(hold),
        ms(rtt),
        ms(cycle),
        ms(fifo)
    )];
    let entries: Vec<String> = totals
        .iter()
        .map(|(name, t)| {
            let total: u64 = t.commands.values().sum();
            let per_grant = |n: u64| n as f64 / t.grants as f64;
            let cmds: Vec<String> =
                t.commands.iter().map(|(c, n)| format!("\"{c}\": {:.3}", per_grant(*n))).collect();
            let rate = t.grants as f64 / t.elapsed.as_secs_f64();
            let handoff_p50 = quantile(&mut t.handoffs.clone(), 0.5);
            let wait_p99 = quantile(&mut t.waits.clone(), 0.99);
            let wait_max = t.waits.iter().copied().max().unwrap_or_default();
            lines.push(format!(
                "  {name:24} {rate:7.0} grants/s ({:.2}x limit), {:.2} commands/grant, handoff p50 {:.3} ms ({:.2}x rtt), max wait {:.1} ms ({:.2}x FIFO)",
                rate / limit,
                per_grant(total),
                ms(handoff_p50),
                handoff_p50.as_secs_f64() / rtt.as_secs_f64(),
                ms(wait_max),
                wait_max.as_secs_f64() / fifo.as_secs_f64()
            ));
            format!(
                " \"{name}\": {{\"grants\": {}, \"seconds\": {:.3}, \"grants_per_s\": {rate:.1}, \"of_limit\": {:.3}, \"commands_per_grant\": {:.3}, \"handoff_p50_ms\": {:.4}, \"wait_p99_ms\": {:.2}, \"wait_max_ms\": {:.2}, \"hold_ms_mean\": {:.4}, \"by_command\": {{{}}}}}",
                t.grants,
                t.elapsed.as_secs_f64(),
                rate / limit,
                per_grant(total),
                ms(handoff_p50),
                ms(wait_p99),
                ms(wait_max),
                ms(mean(&t.holds)),
                cmds.join(", ")
            )
        })
        .collect();
    out += &entries.join(",\n");
    out += "\n}\n";
    let path = support::results_file("contention.json");
    std::fs::write(&path, out).unwrap_or_else(|e| panic!("write {path:?}: {e}"));

    if let (Some(w), Some(b)) = (wait, totals.get(Strategy::Backoff.name())) {
        let rate = |t: &Totals| t.grants as f64 / t.elapsed.as_secs_f64();
        let commands = w.commands.values().sum::<u64>() as f64 / w.grants as f64;
        let handoff = quantile(&mut w.handoffs.clone(), 0.5);
        let max_wait = w.waits.iter().copied().max().unwrap_or_default();
        let goals = [
            ("grants/s >= 0.8x limit", rate(w) / limit, GOAL_OF_LIMIT, true),
            ("grants/s >= 3x backoff", rate(w) / rate(b), GOAL_OVER_BACKOFF, true),
            ("commands/grant <= 2.1", commands, GOAL_COMMANDS_PER_GRANT, false),
            ("handoff p50 <= 1.5x rtt", handoff.as_secs_f64() / rtt.as_secs_f64(), GOAL_HANDOFF_RTTS, false),
            (
                "max wait <= 1.5x FIFO",
                max_wait.as_secs_f64() / fifo.as_secs_f64(),
                GOAL_MAX_WAIT_OF_FIFO,
                false,
            ),
        ];
        lines.push("  goals for fencedlock_server_wait:".into());
        for (what, value, goal, at_least) in goals {
            let met = if at_least { value >= goal } else { value <= goal };
            lines.push(format!("    {what:26} {value:6.2} {}", if met { "met" } else { "NOT MET" }));
        }
    }
    eprintln!("{}", lines.join("\n"));
    eprintln!("contention results written to {}", path.display());
}

criterion_group! {
    name = benches;
    config = support::criterion();
    targets = contention
}
criterion_main!(benches);
