//! Shared by the crash and failover tests: a steady acquire / renew / release load from
//! several tokio tasks that records every request, acknowledged or not, and the checks the
//! tests run over that recorded history.
//!
//! Each task has one request in flight at a time, so its own record is a sequential history:
//! we know exactly which leases it was told it holds, and which requests were cut off by a
//! crash (their effect is unknown, so no check relies on them).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencedlock_protocol::command::{ACQUIRE, RELEASE, RENEW};
use harness::redis::{self, aio::MultiplexedConnection, AsyncConnectionConfig, Value};
use harness::{epoch_of, error_text, Server};

use crate::functions::{module_less, with_aof};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinHandle;

/// Upper bound of requests per task, so a load never runs unbounded.
const MAX_OPS_PER_TASK: usize = 50_000;

/// The directory of a server's AOF files (Redis 7's multi-part AOF), under its data directory.
pub const AOF_DIR: &str = "appendonlydir";

/// Copies the files of directory `from` into `to` (created): an AOF as it stood at a moment,
/// to bring back as what a power loss left.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("create the copy's dir");
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("read {from:?}: {e}")) {
        let entry = entry.expect("dir entry");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy an AOF file");
    }
}

/// A multi-threaded runtime for the load; the test's own thread stays free to kill, pause
/// and restart servers while the tasks run.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

/// What a task asked the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Acquire,
    Renew,
    Release,
}

/// What the server answered; `Failed` means the reply never came (crash, reset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Granted(u64),
    Refused,
    /// RENEW / RELEASE: 1 or 0.
    Done(bool),
    /// An error reply: the request was answered, and refused.
    Error(String),
    /// No reply: the effect is unknown.
    Failed(String),
}

/// One request and its reply, with the client's monotonic times.
#[derive(Debug, Clone)]
pub struct Event {
    /// Which load (e.g. "before", "after") and task sent it.
    pub load: String,
    pub task: usize,
    pub key: String,
    pub token: String,
    pub op: Op,
    pub ttl_ms: u64,
    pub sent: Instant,
    /// When the reply arrived; `None` when it never did.
    pub acked: Option<Instant>,
    pub outcome: Outcome,
}

impl Event {
    pub fn fence(&self) -> Option<u64> {
        match self.outcome {
            Outcome::Granted(f) => Some(f),
            _ => None,
        }
    }
}

/// How a load behaves.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// Label of this load in the history.
    pub label: String,
    pub tasks: usize,
    pub keys: Vec<String>,
    pub ttl_ms: u64,
    pub seed: u64,
}

impl LoadSpec {
    /// `tasks` tasks over `keys` keys named `{prefix}:{i}`, leases of `ttl_ms`.
    pub fn new(label: &str, prefix: &str, tasks: usize, keys: usize, ttl_ms: u64) -> LoadSpec {
        LoadSpec {
            label: label.to_string(),
            tasks,
            keys: (0..keys).map(|i| format!("{prefix}:{i}")).collect(),
            ttl_ms,
            seed: 0x5eed ^ (tasks as u64) << 8 ^ keys as u64,
        }
    }
}

/// A running load; [`Load::stop`] ends it and returns the history.
pub struct Load {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<Vec<Event>>>,
}

/// Start `spec.tasks` tasks against `url` on `rt`. Each task repeats: pick a key, ACQUIRE it
/// with a fresh token; if granted, RENEW it, then RELEASE the lease it held before. So every
/// task holds about one lease at any moment, and grants, renewals and releases all flow.
/// A task stops at its first request without a reply (the server died).
pub fn start_load(rt: &tokio::runtime::Runtime, url: &str, spec: &LoadSpec) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = (0..spec.tasks)
        .map(|task| {
            let (url, spec, stop) = (url.to_string(), spec.clone(), stop.clone());
            rt.spawn(async move { run_task(url, spec, task, stop).await })
        })
        .collect();
    Load { stop, tasks }
}

impl Load {
    /// Stop the tasks (each finishes its request in flight) and collect their histories.
    pub fn stop(self, rt: &tokio::runtime::Runtime) -> Vec<Event> {
        self.stop.store(true, Ordering::SeqCst);
        rt.block_on(async move {
            let mut all = Vec::new();
            for t in self.tasks {
                let events = tokio::time::timeout(Duration::from_secs(20), t)
                    .await
                    .expect("a load task did not stop within 20 s")
                    .expect("a load task panicked");
                all.extend(events);
            }
            all
        })
    }
}

async fn connect(url: &str) -> redis::RedisResult<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(10)));
    redis::Client::open(url)?.get_multiplexed_async_connection_with_config(&config).await
}

async fn request(conn: &mut MultiplexedConnection, args: &[&[u8]]) -> Result<Value, redis::RedisError> {
    let mut cmd = redis::Cmd::new();
    for a in args {
        cmd.arg(*a);
    }
    cmd.query_async(conn).await
}

fn outcome(op: Op, reply: Result<Value, redis::RedisError>) -> Outcome {
    match reply {
        Ok(Value::Int(n)) if op == Op::Acquire => Outcome::Granted(n as u64),
        Ok(Value::Nil) if op == Op::Acquire => Outcome::Refused,
        Ok(Value::Int(n)) if op != Op::Acquire && (n == 0 || n == 1) => Outcome::Done(n == 1),
        Ok(other) => panic!("{op:?} replied {other:?}"),
        Err(e) if e.code().is_some() => Outcome::Error(error_text(&e)),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

async fn run_task(url: String, spec: LoadSpec, task: usize, stop: Arc<AtomicBool>) -> Vec<Event> {
    let mut events = Vec::new();
    let Ok(mut conn) = connect(&url).await else { return events };
    let mut rng = StdRng::seed_from_u64(spec.seed.wrapping_add(task as u64 * 7919));
    let ttl = spec.ttl_ms.to_string();
    let mut held: Option<(String, String)> = None;
    let send = |conn: &mut MultiplexedConnection, key: &str, token: &str, op: Op| {
        let args: Vec<Vec<u8>> = match op {
            Op::Acquire => vec![ACQUIRE.name.into(), key.into(), token.into(), ttl.clone().into()],
            Op::Renew => vec![RENEW.name.into(), key.into(), token.into(), ttl.clone().into()],
            Op::Release => vec![RELEASE.name.into(), key.into(), token.into()],
        };
        let mut conn = conn.clone();
        let (key, token, label, ttl_ms) =
            (key.to_string(), token.to_string(), spec.label.clone(), spec.ttl_ms);
        async move {
            let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            let sent = Instant::now();
            let reply = request(&mut conn, &refs).await;
            let acked = Instant::now();
            let outcome = outcome(op, reply);
            let acked = (!matches!(outcome, Outcome::Failed(_))).then_some(acked);
            Event { load: label, task, key, token, op, ttl_ms, sent, acked, outcome }
        }
    };
    for n in 0..MAX_OPS_PER_TASK {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let key = spec.keys[rng.random_range(0..spec.keys.len())].clone();
        if held.as_ref().is_some_and(|(k, _)| *k == key) {
            continue;
        }
        let token = format!("{}-t{task}-{n}", spec.label);
        let grant = send(&mut conn, &key, &token, Op::Acquire).await;
        let granted = grant.fence().is_some();
        let failed = grant.acked.is_none();
        events.push(grant);
        if failed {
            break;
        }
        if !granted {
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        let renew = send(&mut conn, &key, &token, Op::Renew).await;
        let failed = renew.acked.is_none();
        events.push(renew);
        if failed {
            break;
        }
        if let Some((old_key, old_token)) = held.replace((key, token)) {
            let release = send(&mut conn, &old_key, &old_token, Op::Release).await;
            let failed = release.acked.is_none();
            events.push(release);
            if failed {
                break;
            }
        }
    }
    events
}

/// Acknowledged grants.
pub fn grants(events: &[Event]) -> Vec<&Event> {
    events.iter().filter(|e| e.fence().is_some()).collect()
}

/// The largest acknowledged fence (0 if none).
pub fn max_fence(events: &[Event]) -> u64 {
    events.iter().filter_map(Event::fence).max().unwrap_or(0)
}

/// How many of `keys` lost an acknowledged grant on `server`: their fence there is below the
/// highest one `history` saw granted. Asynchronous persistence or replication may lose those;
/// the tests count them for the log, and their fence checks must not depend on them.
pub fn lost_grants(server: &Server, keys: &[String], history: &[Event]) -> usize {
    keys.iter()
        .filter(|k| {
            let acked = history.iter().filter(|e| e.key == **k).filter_map(Event::fence).max();
            acked.is_some_and(|a| server.lock_status(k).is_none_or(|st| st.fence < a))
        })
        .count()
}

/// Replies that were errors: the load must produce none (it sends only valid requests).
pub fn assert_no_error_replies(events: &[Event]) {
    let errors: Vec<&Event> = events.iter().filter(|e| matches!(e.outcome, Outcome::Error(_))).collect();
    assert!(errors.is_empty(), "error replies to valid requests: {:?}", &errors[..errors.len().min(5)]);
}

/// The fence order follows real time, across keys, crashes and failovers: if grant A was
/// acknowledged before grant B was sent, A's fence is smaller. (Each grant takes
/// `max(key fence, high-water mark) + 1`, and restarts / promotions jump the mark.) This
/// also means no fence ever repeats between such grants.
pub fn assert_fences_follow_real_time(events: &[Event]) {
    let mut by_ack: Vec<(Instant, u64, &Event)> =
        grants(events).into_iter().map(|e| (e.acked.expect("acked"), e.fence().expect("grant"), e)).collect();
    by_ack.sort_by_key(|(t, _, _)| *t);
    let mut by_sent: Vec<&Event> = grants(events);
    by_sent.sort_by_key(|e| e.sent);
    let mut i = 0;
    let mut max_before: Option<(u64, &Event)> = None;
    for b in by_sent {
        while i < by_ack.len() && by_ack[i].0 < b.sent {
            if max_before.is_none_or(|(f, _)| by_ack[i].1 > f) {
                max_before = Some((by_ack[i].1, by_ack[i].2));
            }
            i += 1;
        }
        if let Some((f, a)) = max_before {
            let fb = b.fence().expect("grant");
            assert!(fb > f, "fence went backwards or repeated: {b:?} (fence {fb}) was sent after {a:?} (fence {f}) was acknowledged");
        }
    }
    // Distinct grants never share a fence (each token is used for one lease only).
    let mut seen: HashMap<u64, &Event> = HashMap::new();
    for g in grants(events) {
        if let Some(prev) = seen.insert(g.fence().expect("grant"), g) {
            assert_eq!(
                prev.token,
                g.token,
                "fence {} issued twice: {prev:?} and {g:?}",
                g.fence().unwrap_or(0)
            );
        }
    }
}

/// A lease a task was told it holds, and until when (client clock: sent + ttl of the last
/// acknowledged ACQUIRE / RENEW, which is later than the server's own deadline).
#[derive(Debug, Clone)]
pub struct HeldLease {
    pub key: String,
    pub token: String,
    pub fence: u64,
    pub until: Instant,
}

/// The leases that, by the tasks' own acknowledged records, are held and unexpired at `now`.
/// A lease whose RELEASE was cut off by a crash is left out (it may or may not have ended).
pub fn certainly_held(events: &[Event], now: Instant) -> Vec<HeldLease> {
    let mut per_task: BTreeMap<(String, usize), Vec<&Event>> = BTreeMap::new();
    for e in events {
        per_task.entry((e.load.clone(), e.task)).or_default().push(e);
    }
    let mut out = Vec::new();
    for (_, mut history) in per_task {
        history.sort_by_key(|e| e.sent);
        let mut held: BTreeMap<(String, String), HeldLease> = BTreeMap::new();
        for e in history {
            let id = (e.key.clone(), e.token.clone());
            match (&e.op, &e.outcome) {
                (Op::Acquire, Outcome::Granted(f)) => {
                    let until = e.sent + Duration::from_millis(e.ttl_ms);
                    held.insert(
                        id,
                        HeldLease { key: e.key.clone(), token: e.token.clone(), fence: *f, until },
                    );
                }
                (Op::Renew, Outcome::Done(true)) => {
                    if let Some(l) = held.get_mut(&id) {
                        l.until = e.sent + Duration::from_millis(e.ttl_ms);
                    }
                }
                (Op::Renew, Outcome::Done(false)) => {
                    held.remove(&id);
                }
                // A release that was answered, or cut off: either way not certainly held.
                (Op::Release, _) => {
                    held.remove(&id);
                }
                _ => {}
            }
        }
        out.extend(held.into_values().filter(|l| l.until > now));
    }
    out
}

/// After a crash or failover, `server` must still hold every lease in `leases` for the same
/// token with the same fence: another token is refused, and the holder's own RELEASE works.
pub fn assert_leases_survived(server: &Server, leases: &[HeldLease]) {
    for l in leases {
        let intruder: Option<u64> = server
            .cmd(&[ACQUIRE.name, &l.key, "intruder", "60000"])
            .unwrap_or_else(|e| panic!("ACQUIRE {} by an intruder: {}", l.key, error_text(&e)));
        assert_eq!(intruder, None, "an acknowledged, unexpired lease was lost: {l:?}");
        let status = server.lock_status(&l.key);
        assert_eq!(
            status.as_ref().map(|st| (st.fence, st.held)),
            Some((l.fence, true)),
            "{l:?}: STATUS {status:?}"
        );
        let released: i64 = server.cmd(&[RELEASE.name, &l.key, &l.token]).expect("RELEASE");
        assert_eq!(released, 1, "the holder's token no longer holds {l:?}");
    }
}

/// A grant on every key (and a fresh one) by a new token: each must be above `max_before`
/// and, after a restart or promotion (`new_epoch`), in a later 2^32 block. Held keys are
/// skipped (they are refused). Returns the largest fence granted.
pub fn assert_new_grants_above(server: &Server, keys: &[String], max_before: u64, new_epoch: bool) -> u64 {
    let mut top = 0;
    let fresh = "fresh-after-fault".to_string();
    for key in keys.iter().chain([&fresh]) {
        let fence: Option<u64> = server
            .cmd(&[ACQUIRE.name, key, "checker", "60000"])
            .unwrap_or_else(|e| panic!("ACQUIRE {key}: {}", error_text(&e)));
        let Some(fence) = fence else { continue };
        assert!(
            fence > max_before,
            "{key}: fence {fence} is not above {max_before}, issued before the fault"
        );
        assert!(
            !new_epoch || epoch_of(fence) > epoch_of(max_before),
            "{key}: fence {fence} is in the epoch of {max_before}: no new epoch"
        );
        let _: i64 = server.cmd(&[RELEASE.name, key, "checker"]).expect("RELEASE");
        top = top.max(fence);
    }
    top
}

/// Let a load run for `d` (a plain sleep on the test thread; the load runs on the runtime).
pub fn run_for(d: Duration) {
    std::thread::sleep(d);
}

/// A summary line for the test log: how many requests of each kind were answered.
pub fn summary(events: &[Event]) -> String {
    let count = |f: &dyn Fn(&Event) -> bool| events.iter().filter(|e| f(e)).count();
    format!(
        "{} requests: {} grants, {} refused, {} renewals, {} releases, {} cut off",
        events.len(),
        count(&|e| e.fence().is_some()),
        count(&|e| e.outcome == Outcome::Refused),
        count(&|e| e.op == Op::Renew && e.outcome == Outcome::Done(true)),
        count(&|e| e.op == Op::Release && e.outcome == Outcome::Done(true)),
        count(&|e| e.acked.is_none()),
    )
}

/// A history recorded by clients around a `kill -9` of their server, and when the kill and the
/// restart happened (µs after the recording started, the unit of the clients' timestamps).
pub struct KilledRun<T> {
    pub history: Vec<T>,
    pub killed: u64,
    pub restarted: u64,
}

/// Runs `record(client, start, until)` on `clients` threads for `run`, kills `s` (`kill -9`) a
/// third of the way in and restarts it 100 ms later; what the clients recorded, all together.
pub fn record_through_a_kill9<T: Send>(
    s: &mut Server,
    clients: u32,
    run: Duration,
    record: impl Fn(u32, Instant, Instant) -> Vec<T> + Sync,
) -> KilledRun<T> {
    let start = Instant::now();
    let until = start + run;
    let micros = |at: Instant| at.duration_since(start).as_micros() as u64;
    std::thread::scope(|scope| {
        let record = &record;
        let recorders: Vec<_> = (0..clients).map(|c| scope.spawn(move || record(c, start, until))).collect();
        std::thread::sleep(run / 3);
        let killed = micros(Instant::now());
        s.kill9();
        std::thread::sleep(Duration::from_millis(100));
        s.restart();
        let restarted = micros(Instant::now());
        let history = recorders.into_iter().flat_map(|r| r.join().expect("a client panicked")).collect();
        KilledRun { history, killed, restarted }
    })
}

/// Which engine the clients of a recorded history talk to.
#[derive(Debug, Clone, Copy)]
pub enum Via {
    Module,
    /// The Functions library on a server without the module, with the keys' floor.
    Library,
}

impl Via {
    /// A server on this engine that keeps every write through a `kill -9` (`appendfsync
    /// always`); the module's without a restart grace, whose refusals the models do not know.
    pub fn durable_server(self) -> Server {
        match self {
            Via::Module => {
                with_aof(Server::builder().arg("fencedlock.restart-grace-ms", "0"), "always").start()
            }
            Via::Library => module_less(with_aof(Server::builder(), "always")),
        }
    }
}

/// A recording client's connection to a server the test kills and restarts: opened again while
/// the server is down, each reply waited for at most 2 s (a kill shows as a request without a
/// reply, not as a hang).
pub struct Reconnecting<'u> {
    url: &'u str,
    conn: Option<redis::Connection>,
}

/// What became of a request a recording client sent.
pub enum Sent {
    /// Answered, with this reply.
    Replied(redis::Value),
    /// Refused with `LOADING` (the restarted server reading its AOF): it changed nothing, and
    /// the client tries again 10 ms later.
    Loading,
    /// No reply (the server died): its effect is unknown, and the connection is dropped.
    Unanswered,
}

impl<'u> Reconnecting<'u> {
    pub fn new(url: &'u str) -> Self {
        Reconnecting { url, conn: None }
    }

    /// The connection; `None` where there was none, after trying to open one (and pausing
    /// 20 ms if the server does not answer yet), so the client's loop comes round again.
    pub fn connected(&mut self) -> Option<&mut redis::Connection> {
        if self.conn.is_none() {
            let client = redis::Client::open(self.url).expect("a URL");
            self.conn = client.get_connection_with_timeout(Duration::from_millis(200)).ok();
            match &self.conn {
                Some(c) => c.set_read_timeout(Some(Duration::from_secs(2))).expect("read timeout"),
                None => std::thread::sleep(Duration::from_millis(20)),
            }
            return None;
        }
        self.conn.as_mut()
    }

    /// What `reply`, to the request `what` sent on [`connected`](Self::connected), means. Any
    /// error reply but `LOADING` fails the test: the clients send only valid requests.
    pub fn sent(&mut self, reply: redis::RedisResult<redis::Value>, what: impl std::fmt::Display) -> Sent {
        match reply {
            Ok(value) => Sent::Replied(value),
            Err(e) if e.code() == Some("LOADING") => {
                std::thread::sleep(Duration::from_millis(10));
                Sent::Loading
            }
            Err(e) if e.code().is_some() => panic!("{what}: {}", error_text(&e)),
            Err(_) => {
                self.conn = None;
                Sent::Unanswered
            }
        }
    }
}
