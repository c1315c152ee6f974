//! Issue #25: every `ACQUIRE … BLOCK` gets exactly one reply, also when its timeout passes while
//! the server is busy (a slow command, a script, a SIGSTOP) and the lease ends in the same
//! event-loop pass. On Redis 7.0 such a waiter used to be granted, then timed out by the server
//! in the same pass, which dropped the grant's reply: the client waited forever, and the lease
//! was given back behind its back.
//!
//! The rule these tests hold every server to: a waiter whose own `BLOCK` deadline has passed
//! when its turn is decided is answered nil and holds nothing; one decided before its deadline
//! gets the fence, even if the busy server delivers it late. `STATUS` and the counters agree
//! with the replies (`wait_timeouts` for nil, `handoffs` for fences, `wait_abandoned` never,
//! as nobody disconnects).

use std::time::{Duration, Instant};

use crate::support::*;
use fencedlock_protocol::command::{ACQUIRE, BLOCK, PERMITS, RELEASE};
use harness::{error_text, redis, AcquireReply, BlockedAcquire, Server};
use rand::{rngs::StdRng, Rng, SeedableRng};

/// Bound on a reply that must come: a hang fails the test, not CI.
const REPLY: Duration = Duration::from_secs(10);
/// The waiters' `BLOCK` timeout in the reproductions.
const TIMEOUT: Duration = Duration::from_millis(200);
/// How long the server is kept busy (or stopped) past that timeout.
const BUSY: Duration = Duration::from_millis(400);
/// Scheduling slack on a loaded machine for "answered within its timeout plus the busy time".
const SLACK: Duration = Duration::from_millis(300);
/// The module's own timer never answers early; rounding between clocks allows 2 ms.
const EARLY: Duration = Duration::from_millis(2);

/// A server that takes `DEBUG SLEEP`.
fn debug_server() -> Server {
    Server::builder().arg("enable-debug-command", "yes").start()
}

/// `INFO fencedlock` counter by short name.
fn c(s: &Server, name: &str) -> u64 {
    s.fencedlock_counter(&format!("fencedlock_{name}"))
}

/// The counters a wait's end moves, to compare before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts {
    grants: u64,
    handoffs: u64,
    timeouts: u64,
    abandoned: u64,
}

fn counts(s: &Server) -> Counts {
    Counts {
        grants: c(s, "grants"),
        handoffs: c(s, "handoffs"),
        timeouts: c(s, "wait_timeouts"),
        abandoned: c(s, "wait_abandoned"),
    }
}

/// A mutex key, or a semaphore key of two permits.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Mutex,
    Permits(u32),
}

impl Shape {
    fn holders(self) -> u32 {
        match self {
            Shape::Mutex => 1,
            Shape::Permits(n) => n,
        }
    }

    /// `ACQUIRE key token ttl_ms [BLOCK ms] [PERMITS n]`.
    fn cmd(self, key: &str, token: &str, ttl_ms: u64, block: Option<Duration>) -> redis::Cmd {
        let mut cmd = redis::cmd(ACQUIRE.name);
        cmd.arg(key).arg(token).arg(ttl_ms);
        if let Some(d) = block {
            cmd.arg(BLOCK).arg(d.as_millis() as u64);
        }
        if let Shape::Permits(n) = self {
            cmd.arg(PERMITS).arg(n);
        }
        cmd
    }

    /// Fills every permit of `key`: holder `h0` with `first_ttl`, the others with a long ttl.
    fn fill(self, s: &Server, key: &str, first_ttl: u64) -> Vec<u64> {
        (0..self.holders())
            .map(|i| {
                let ttl = if i == 0 { first_ttl } else { LONG_TTL };
                let granted: Option<u64> = s
                    .query(&self.cmd(key, &format!("h{i}"), ttl, None))
                    .unwrap_or_else(|e| panic!("ACQUIRE {key} h{i}: {}", error_text(&e)));
                granted.unwrap_or_else(|| panic!("ACQUIRE {key} h{i} refused"))
            })
            .collect()
    }

    /// Queues `token` behind the holders with `BLOCK timeout` and waits until it is blocked.
    fn queue(self, s: &Server, key: &str, token: &str, timeout: Duration) -> BlockedAcquire {
        let w = s.send_acquire_cmd(&self.cmd(key, token, LONG_TTL, Some(timeout)));
        w.wait_blocked(s, REPLY);
        w
    }
}

/// The fences holding `key` now (empty when nobody does or the key is gone).
fn holders(s: &Server, key: &str) -> Vec<u64> {
    s.semaphore_status(key).map(|st| st.holders.iter().map(|h| h.fence).collect()).unwrap_or_default()
}

fn release_cmd(key: &str, token: &str) -> redis::Cmd {
    let mut cmd = redis::cmd(RELEASE.name);
    cmd.arg(key).arg(token);
    cmd
}

/// `RELEASE` that must answer `expected`.
fn release_is(s: &Server, key: &str, token: &str, expected: i64) {
    let got: i64 =
        s.query(&release_cmd(key, token)).unwrap_or_else(|e| panic!("RELEASE: {}", error_text(&e)));
    assert_eq!(got, expected, "RELEASE {key} {token}");
}

/// Keeps a `DEBUG`-enabled server's event loop busy: how, and whether the lease ends in it.
#[derive(Debug, Clone, Copy)]
enum Busy {
    /// `MULTI; DEBUG SLEEP; RELEASE; EXEC`: the release runs past the waiter's deadline.
    SleepThenRelease,
    /// A Lua busy loop, then the release, in one `EVAL` (no `DEBUG`).
    ScriptThenRelease,
    /// SIGSTOP across the deadline; the release was sent while stopped and runs first.
    StoppedThenRelease,
    /// `RELEASE` then `DEBUG SLEEP` in one write: the handoff is decided before the deadline and
    /// delivered after it, in the same pass.
    ReleaseThenSleep,
    /// `DEBUG SLEEP` across both the holder's expiry and the waiter's deadline; no command
    /// touches the key (the wake-up timer decides).
    SleepAcrossExpiry,
    /// SIGSTOP across both the holder's expiry and the waiter's deadline.
    StoppedAcrossExpiry,
}

impl Busy {
    const ALL: [Busy; 6] = [
        Busy::SleepThenRelease,
        Busy::ScriptThenRelease,
        Busy::StoppedThenRelease,
        Busy::ReleaseThenSleep,
        Busy::SleepAcrossExpiry,
        Busy::StoppedAcrossExpiry,
    ];

    /// Whether the holder's lease ends by expiry (else by `RELEASE`).
    fn expires(self) -> bool {
        matches!(self, Busy::SleepAcrossExpiry | Busy::StoppedAcrossExpiry)
    }

    /// Whether the handoff is decided before the waiter's deadline.
    fn in_time(self) -> bool {
        matches!(self, Busy::ReleaseThenSleep)
    }
}

/// `EVAL` that spins for `ARGV[2]` µs, then releases `KEYS[1]` for `ARGV[1]`. The clock is
/// `os.clock` (CPU time, which a spin spends as fast as wall time) where there is one: Redis
/// 7.4 and Valkey freeze `TIME` inside a script, and Redis 7.0 has no `os`.
const SPIN_THEN_RELEASE: &str = "\
local os_lib = rawget(_G, 'os')
local function now()
  if os_lib then return os_lib.clock() end
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local stop = now() + tonumber(ARGV[2]) / 1000000
repeat until now() >= stop
return redis.call('FENCEDLOCK.RELEASE', KEYS[1], ARGV[1])";

/// Keeps `s` busy for `busy` as `how` says, ending `h0`'s lease on `key` by `RELEASE` (checked
/// to answer 1) unless its lease expires on its own. Returns how long that took by the wall
/// clock: at least `busy`, and more when the spin of [`SPIN_THEN_RELEASE`] counts CPU time
/// (Redis 7.4+, Valkey) on a loaded machine, where the server is descheduled mid-spin.
fn make_busy(s: &Server, how: Busy, key: &str, busy: Duration) -> Duration {
    let secs = format!("{:.3}", busy.as_secs_f64());
    let mut conn = s.conn();
    let started = Instant::now();
    let released: i64 = match how {
        Busy::SleepThenRelease => {
            let (released,): (i64,) = redis::pipe()
                .atomic()
                .cmd("DEBUG")
                .arg("SLEEP")
                .arg(&secs)
                .ignore()
                .add_command(release_cmd(key, "h0"))
                .query(&mut conn)
                .unwrap_or_else(|e| panic!("MULTI DEBUG SLEEP RELEASE: {}", error_text(&e)));
            released
        }
        Busy::ScriptThenRelease => redis::cmd("EVAL")
            .arg(SPIN_THEN_RELEASE)
            .arg(1)
            .arg(key)
            .arg("h0")
            .arg(busy.as_micros() as u64)
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("EVAL spin + RELEASE: {}", error_text(&e))),
        Busy::StoppedThenRelease => {
            s.pause();
            std::thread::sleep(busy);
            // Sent while stopped: on SIGCONT it is read before anything else runs.
            conn.send_packed_command(&release_cmd(key, "h0").get_packed_command()).expect("send RELEASE");
            s.resume();
            match conn.recv_response().expect("RELEASE reply") {
                redis::Value::Int(n) => n,
                other => panic!("RELEASE replied {other:?}"),
            }
        }
        Busy::ReleaseThenSleep => {
            let (released, ok): (i64, String) = redis::pipe()
                .add_command(release_cmd(key, "h0"))
                .cmd("DEBUG")
                .arg("SLEEP")
                .arg(&secs)
                .query(&mut conn)
                .unwrap_or_else(|e| panic!("RELEASE + DEBUG SLEEP: {}", error_text(&e)));
            assert_eq!(ok, "OK");
            released
        }
        Busy::SleepAcrossExpiry => {
            let _: String = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg(&secs)
                .query(&mut conn)
                .unwrap_or_else(|e| panic!("DEBUG SLEEP: {}", error_text(&e)));
            1
        }
        Busy::StoppedAcrossExpiry => {
            s.pause();
            std::thread::sleep(busy);
            s.resume();
            1
        }
    };
    let busy_for = started.elapsed();
    assert_eq!(released, 1, "{how:?}: h0's RELEASE");
    busy_for
}

/// The sequence, for each way of keeping the server busy and each key shape: the waiter
/// is answered within its timeout plus the busy time, and `STATUS` and the counters agree.
fn reproduce(shape: Shape) {
    let s = debug_server();
    for (n, how) in Busy::ALL.into_iter().enumerate() {
        let key = format!("late:{n}");
        // An expiring holder's lease ends during the busy time, after the waiter is queued.
        let first_ttl = if how.expires() { TIMEOUT.as_millis() as u64 / 2 } else { LONG_TTL };
        let fences = shape.fill(&s, &key, first_ttl);
        let last = *fences.iter().max().expect("a holder");
        let before = counts(&s);
        let mut w = shape.queue(&s, &key, "w", TIMEOUT);
        let busy_for = make_busy(&s, how, &key, BUSY);
        let reply: AcquireReply = w.reply(REPLY);
        let took = reply.latency();
        eprintln!("{shape:?} {how:?}: {:?} after {:.0} ms", reply.outcome, took.as_secs_f64() * 1000.0);
        assert!(
            took <= TIMEOUT + busy_for.max(BUSY) + SLACK,
            "{shape:?} {how:?}: answered after {took:?} (busy for {busy_for:?})"
        );
        let others: Vec<u64> = fences[1..].to_vec();
        let after = counts(&s);
        if how.in_time() {
            let fence = reply.fence();
            assert_eq!(fence, last + 1, "{shape:?} {how:?}: the handoff's fence");
            let mut expected = others.clone();
            expected.push(fence);
            assert_eq!(holders(&s, &key), expected, "{shape:?} {how:?}: STATUS shows the waiter holding");
            let one_more = Counts { grants: before.grants + 1, handoffs: before.handoffs + 1, ..before };
            assert_eq!(after, one_more, "{shape:?} {how:?}");
            release_is(&s, &key, "w", 1);
        } else {
            assert!(reply.is_nil(), "{shape:?} {how:?}: past its deadline, nil: {reply:?}");
            assert!(took + EARLY >= TIMEOUT, "{shape:?} {how:?}: nil before its timeout: {took:?}");
            assert_eq!(holders(&s, &key), others, "{shape:?} {how:?}: nobody took h0's place");
            assert_eq!(
                s.semaphore_status(&key).map(|st| st.fence),
                Some(last),
                "{shape:?} {how:?}: no fence issued"
            );
            assert_eq!(after, Counts { timeouts: before.timeouts + 1, ..before }, "{shape:?} {how:?}");
            release_is(&s, &key, "w", 0);
        }
        assert_eq!(s.waiters(), 0, "{shape:?} {how:?}: nobody left queued");
    }
}

#[test]
fn a_busy_server_answers_a_mutex_waiter_past_its_timeout_once() {
    reproduce(Shape::Mutex);
}

#[test]
fn a_busy_server_answers_a_permits_waiter_past_its_timeout_once() {
    reproduce(Shape::Permits(2));
}

/// A waiter behind one whose deadline passed while the server was busy gets the lease: the
/// timed-out one is skipped, not granted and given back.
#[test]
fn a_late_handoff_skips_the_timed_out_head_for_the_next_waiter() {
    let s = debug_server();
    let key = "late:skip";
    let last = Shape::Mutex.fill(&s, key, LONG_TTL)[0];
    let before = counts(&s);
    let mut short = Shape::Mutex.queue(&s, key, "short", TIMEOUT);
    let mut patient = Shape::Mutex.queue(&s, key, "patient", Duration::from_secs(30));
    make_busy(&s, Busy::SleepThenRelease, key, BUSY);
    assert!(short.reply(REPLY).is_nil(), "the head's deadline had passed");
    assert_eq!(patient.reply(REPLY).fence(), last + 1, "the next waiter is served");
    assert_eq!(holders(&s, key), [last + 1]);
    let expected = Counts {
        grants: before.grants + 1,
        handoffs: before.handoffs + 1,
        timeouts: before.timeouts + 1,
        ..before
    };
    assert_eq!(counts(&s), expected);
    release_is(&s, key, "patient", 1);
}

// ---------------------------------------------------------------------------------------
// Randomized: short timeouts racing releases, expiries and server pauses
// ---------------------------------------------------------------------------------------

/// What ends the holder's lease in a round, and what keeps the server busy meanwhile.
#[derive(Debug, Clone, Copy)]
enum Act {
    Release,
    ReleaseThenSleep(Duration),
    SleepThenRelease(Duration),
    PauseThenRelease(Duration),
    Pause(Duration),
    Sleep(Duration),
}

fn random_act(rng: &mut StdRng) -> Act {
    let d = Duration::from_millis(rng.random_range(0..=60));
    match rng.random_range(0..6) {
        0 => Act::Release,
        1 => Act::ReleaseThenSleep(d),
        2 => Act::SleepThenRelease(d),
        3 => Act::PauseThenRelease(d),
        4 => Act::Pause(d),
        _ => Act::Sleep(d),
    }
}

/// Runs `act` on `key` (whose first holder is `h0`).
fn run_act(s: &Server, key: &str, act: Act) {
    let mut conn = s.conn();
    let secs = |d: Duration| format!("{:.3}", d.as_secs_f64());
    let ok = |r: redis::RedisResult<redis::Value>| {
        r.unwrap_or_else(|e| panic!("{act:?}: {}", error_text(&e)));
    };
    match act {
        Act::Release => ok(release_cmd(key, "h0").query(&mut conn)),
        Act::ReleaseThenSleep(d) => ok(redis::pipe()
            .add_command(release_cmd(key, "h0"))
            .cmd("DEBUG")
            .arg("SLEEP")
            .arg(secs(d))
            .query(&mut conn)),
        Act::SleepThenRelease(d) => ok(redis::pipe()
            .atomic()
            .cmd("DEBUG")
            .arg("SLEEP")
            .arg(secs(d))
            .add_command(release_cmd(key, "h0"))
            .query(&mut conn)),
        Act::PauseThenRelease(d) => {
            s.pause();
            std::thread::sleep(d);
            conn.send_packed_command(&release_cmd(key, "h0").get_packed_command()).expect("send RELEASE");
            s.resume();
            ok(conn.recv_response());
        }
        Act::Pause(d) => {
            s.pause();
            std::thread::sleep(d);
            s.resume();
        }
        Act::Sleep(d) => ok(redis::cmd("DEBUG").arg("SLEEP").arg(secs(d)).query(&mut conn)),
    }
}

/// Many short `BLOCK` timeouts racing releases, expiries, slow commands and SIGSTOPs, on mutex
/// and `PERMITS` keys: every call is answered, never before its timeout when nil; a nil waiter
/// holds nothing; `STATUS` shows exactly the granted ones; the counters match the replies.
/// Bounded: at most 60 rounds and about 4 s.
#[test]
fn short_timeouts_racing_releases_and_pauses_always_get_one_true_answer() {
    let s = debug_server();
    let seed: u64 = rand::random();
    eprintln!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let start = Instant::now();
    let (mut grants, mut nils, mut rounds, mut filled) = (0u64, 0u64, 0u32, 0u64);
    let before = counts(&s);
    while rounds < 60 && start.elapsed() < Duration::from_secs(4) {
        rounds += 1;
        let key = format!("race:{rounds}");
        let shape = if rng.random_bool(0.5) { Shape::Mutex } else { Shape::Permits(2) };
        let holder_ttl = if rng.random_bool(0.5) { rng.random_range(5..=60) } else { LONG_TTL };
        let fences = shape.fill(&s, &key, holder_ttl);
        filled += fences.len() as u64;
        let n = rng.random_range(1..=4);
        let mut waiters: Vec<(String, Duration, BlockedAcquire)> = (0..n)
            .map(|i| {
                let token = format!("w{i}");
                let timeout = Duration::from_millis(rng.random_range(5..=80));
                let w = s.send_acquire_cmd(&shape.cmd(&key, &token, LONG_TTL, Some(timeout)));
                (token, timeout, w)
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.random_range(0..=40)));
        let act = random_act(&mut rng);
        run_act(&s, &key, act);
        let mut granted = Vec::new();
        for (token, timeout, w) in &mut waiters {
            let reply = w.reply(REPLY);
            let ctx = format!("seed {seed} round {rounds} {shape:?} ttl {holder_ttl} {act:?} {token}");
            match reply.outcome {
                Ok(Some(fence)) => granted.push((token.clone(), fence)),
                Ok(None) => {
                    assert!(reply.latency() + EARLY >= *timeout, "{ctx}: nil after {:?}", reply.latency());
                    release_is(&s, &key, token, 0);
                    nils += 1;
                }
                Err(e) => panic!("{ctx}: {}", error_text(&e)),
            }
        }
        grants += granted.len() as u64;
        // STATUS: the holders that are left, plus exactly the granted waiters.
        let mut expected: Vec<u64> = granted.iter().map(|(_, f)| *f).collect();
        expected.extend(fences.iter().skip(1).copied());
        if holder_ttl == LONG_TTL && !matches!(act, Act::Pause(_) | Act::Sleep(_)) {
            // h0 released; a long-lived h0 that was not released still holds.
        } else if holder_ttl == LONG_TTL {
            expected.push(fences[0]);
        }
        let mut shown = holders(&s, &key);
        shown.retain(|f| *f != fences[0] || holder_ttl == LONG_TTL);
        expected.sort_unstable();
        shown.sort_unstable();
        assert_eq!(shown, expected, "seed {seed} round {rounds} {shape:?} ttl {holder_ttl} {act:?}: STATUS");
        for (token, _) in &granted {
            release_is(&s, &key, token, 1);
        }
        assert_eq!(s.waiters(), 0, "seed {seed} round {rounds}: nobody left queued");
    }
    let after = counts(&s);
    eprintln!("{rounds} rounds, {grants} granted, {nils} nil, in {:?}", start.elapsed());
    // A waiter that arrived after the lease had ended was granted at once, not handed over.
    assert_eq!(after.grants - before.grants, filled + grants, "seed {seed}: one grant per fence replied");
    assert!(after.handoffs - before.handoffs <= grants, "seed {seed}: a handoff nobody heard of");
    assert_eq!(after.timeouts - before.timeouts, nils, "seed {seed}: one wait_timeout per nil replied");
    assert_eq!(after.abandoned, before.abandoned, "seed {seed}: nobody went away");
}
