//! Read leases (`ACQUIRE … SHARED`, issue #36) under faults. A failover: the primary dies with
//! readers in, a replica that had caught up is promoted; the promoted replica keeps every
//! reader with its fence, a writer still waits for them, and every grant after the failover
//! (reader or writer) is above every fence before it. And the outside check: clients read and
//! write while the server is killed (`kill -9`, `appendfsync always`) and restarted, and the
//! history they recorded must be linearizable for one read-write lock (`linearizable`); the
//! same history with one fence made stale must not be.

use std::thread;
use std::time::{Duration, Instant};

use fencedlock_protocol::command::{ACQUIRE, RELEASE, SHARED};
use fencedlock_protocol::functions;
use harness::redis;
use harness::{epoch_of, error_text, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::linearizable::{check, Call, Op, Reply};
use crate::support::{record_through_a_kill9, KilledRun, Reconnecting, Sent, Via};

const TTL_MS: u64 = 20_000;

/// `ACQUIRE key token TTL_MS`, with `SHARED` when `shared`: the fence, or `None`.
fn take(s: &Server, key: &str, token: &str, shared: bool) -> Option<u64> {
    let mut cmd = redis::cmd(ACQUIRE.name);
    cmd.arg(key).arg(token).arg(TTL_MS);
    if shared {
        cmd.arg(SHARED);
    }
    s.query(&cmd).unwrap_or_else(|e| panic!("ACQUIRE {key} {token} on {}: {}", s.addr(), error_text(&e)))
}

fn release(s: &Server, key: &str, token: &str) -> i64 {
    s.query(redis::cmd(RELEASE.name).arg(key).arg(token)).expect("RELEASE")
}

#[test]
fn a_promoted_replica_keeps_the_readers_and_fences_rise_in_both_modes() {
    let mut p = Server::start();
    let r = p.start_replica();
    let key = "frw:fo";
    let writer = take(&p, key, "w0", false).expect("the write lease");
    assert_eq!(release(&p, key, "w0"), 1);
    let readers: Vec<u64> =
        ["r1", "r2"].iter().map(|t| take(&p, key, t, true).expect("a read lease")).collect();
    assert!(writer < readers[0] && readers[0] < readers[1]);
    p.wait_caught_up(&r);
    p.kill9();
    r.promote();

    let st = r.semaphore_status(key).expect("the key survived");
    assert!(st.is_shared(), "{st:?}");
    assert_eq!(st.holders.iter().map(|h| h.fence).collect::<Vec<_>>(), readers, "the same readers");
    assert_eq!(take(&r, key, "w1", false), None, "a writer still waits for the readers");
    assert_eq!(take(&r, key, "r1", true), Some(readers[0]), "a reader re-enters with its fence");
    let top = readers[1];
    let r3 = take(&r, key, "r3", true).expect("a new reader");
    assert!(r3 > top && epoch_of(r3) > epoch_of(top), "reader {r3} after the failover, {top} before");
    for token in ["r1", "r2", "r3"] {
        assert_eq!(release(&r, key, token), 1, "{token}");
    }
    let w1 = take(&r, key, "w1", false).expect("the writer once the readers left");
    assert!(w1 > r3, "writer {w1} after reader {r3}");
}

/// Clients of the recorded run, how long they run, and the bound on each one's operations.
const CLIENTS: u32 = 3;
const RUN: Duration = Duration::from_millis(1_500);
const MAX_OPS_PER_CLIENT: u32 = 1_500;

/// One client's operations on `key` until `until`: a read or a write lease (at random) with a
/// token of its own, held for a moment, released. A request without a reply (the server died)
/// is recorded without one; once the server is back, the client releases that token, which
/// tells whether it had been granted. Error replies changed nothing and are not recorded:
/// `LOADING` (the restarted server reading its AOF) is waited out, any other (none expected: no
/// restart grace) fails the test. Between operations the client pauses 1 to 3 ms, so that its
/// operations span the run and the kill falls among them (without the pause the clients
/// reached their bound before the kill).
fn record_client(url: &str, engine: Via, key: &str, client: u32, start: Instant, until: Instant) -> Vec<Op> {
    let micros = |at: Instant| at.duration_since(start).as_micros() as u64;
    let mut rng = StdRng::seed_from_u64(u64::from(client));
    let mut ops = Vec::new();
    let mut conn = Reconnecting::new(url);
    // The token to release next: the lease held, or a grant nobody heard of.
    let mut pending: Option<u32> = None;
    for n in 0..MAX_OPS_PER_CLIENT {
        if Instant::now() >= until {
            break;
        }
        let Some(c) = conn.connected() else {
            continue;
        };
        let call = match pending.take() {
            Some(token) => Call::Release { token, key: 0 },
            None => Call::acquire_one(client * 10_000 + n, rng.random_bool(0.6)),
        };
        let token = call.token();
        let mut cmd = command(engine, &call, key);
        cmd.arg(format!("lin-{token}"));
        if let Call::Acquire { shared, .. } = call {
            cmd.arg(60_000);
            if shared {
                cmd.arg(SHARED);
            }
        }
        let sent = micros(Instant::now());
        let reply: redis::RedisResult<redis::Value> = cmd.query(c);
        let end = Some(micros(Instant::now()));
        let reply = match conn.sent(reply, format_args!("client {client}: {call:?}")) {
            Sent::Replied(reply) => reply,
            Sent::Loading => continue,
            Sent::Unanswered => {
                pending = Some(token);
                ops.push(Op { call, reply: Reply::Unknown, start: sent, end: None });
                continue;
            }
        };
        let reply = match (&call, reply) {
            (Call::Acquire { .. }, redis::Value::Int(fence)) => {
                pending = Some(token);
                thread::sleep(Duration::from_millis(rng.random_range(0..3)));
                Reply::Granted(vec![fence as u64])
            }
            (Call::Acquire { .. }, redis::Value::Nil) => Reply::Busy,
            (Call::Release { .. }, redis::Value::Int(held)) => Reply::Released(held == 1),
            (call, other) => panic!("client {client}: {call:?} was answered {other:?}"),
        };
        ops.push(Op { call, reply, start: sent, end });
        thread::sleep(Duration::from_millis(rng.random_range(1..=3)));
    }
    ops
}

/// `call`'s command through `via` up to its token: `ACQUIRE key` / `RELEASE key`, or their
/// `FCALL`.
fn command(via: Via, call: &Call, key: &str) -> redis::Cmd {
    let command = match call {
        Call::Acquire { .. } => ACQUIRE,
        Call::Release { .. } => RELEASE,
    };
    match via {
        Via::Module => {
            let mut cmd = redis::cmd(command.name);
            cmd.arg(key);
            cmd
        }
        Via::Library => {
            let function = functions::function(&command).expect("served by the library");
            let mut cmd = redis::cmd("FCALL");
            cmd.arg(function).arg(2).arg(key).arg(functions::floor_key(key.as_bytes()));
            cmd
        }
    }
}

#[test]
fn histories_through_a_kill9_are_linearizable_and_a_stale_fence_is_caught() {
    linearizable_through_a_kill9(Via::Module);
}

#[test]
fn histories_on_the_library_through_a_kill9_are_linearizable_too() {
    linearizable_through_a_kill9(Via::Library);
}

/// Three clients read and write on `s` through `engine` while it is killed and restarted;
/// one read-write lock must explain their history, and not the same history with one stale
/// fence.
fn linearizable_through_a_kill9(engine: Via) {
    let mut s = engine.durable_server();
    let (url, key) = (s.url(), "lin:rw");
    let KilledRun { history, killed, restarted } =
        record_through_a_kill9(&mut s, CLIENTS, RUN, |c, start, until| {
            record_client(&url, engine, key, c, start, until)
        });
    let grants = history.iter().filter(|op| matches!(op.reply, Reply::Granted(_))).count();
    let unknown = history.iter().filter(|op| op.reply == Reply::Unknown).count();
    let before = history.iter().filter(|op| op.end.is_some_and(|end| end < killed)).count();
    let after = history.iter().filter(|op| op.start > restarted).count();
    assert!(grants >= 30, "the clients must run: {grants} grants");
    assert!(
        before >= 50 && after >= 50,
        "the kill must fall inside the run: {before} operations before, {after} after"
    );
    let checked = Instant::now();
    check(&history, 0).unwrap_or_else(|why| panic!("{why}"));
    eprintln!(
        "read-write history via {engine:?}: {} operations, {grants} grants, {unknown} without a reply (the kill), linearizable (checked in {:?})",
        history.len(),
        checked.elapsed()
    );

    // The same history with the last grant's fence below an earlier one: a stale fence.
    let mut stale = history.clone();
    let last = stale.iter().rposition(|op| matches!(op.reply, Reply::Granted(_))).expect("a grant");
    let first = stale.iter().position(|op| matches!(op.reply, Reply::Granted(_))).expect("a grant");
    let low = stale[first].reply.clone();
    stale[last].reply = low;
    assert!(check(&stale, 0).is_err(), "a repeated fence passed the check");
}
