//! All-or-nothing leases on several keys (`ACQUIREALL`, issue #36) under faults, checked from
//! outside: three clients take random sets of three keys (one hash slot), readers' or
//! writers', hold them for a moment and release them key by key, while the server is killed
//! (`kill -9`, `appendfsync always`) and restarted. The history they recorded must be
//! linearizable for read-write locks on those keys where each set is taken whole or not at all
//! (`linearizable`); the same history with a refused set's key held after all, or with a stale
//! fence on one key of a set, must not be.

use std::thread;
use std::time::{Duration, Instant};

use fencedlock_protocol::command::{ACQUIREALL, RELEASE, SHARED};
use fencedlock_protocol::functions;
use harness::redis;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::linearizable::{check, Call, Op, Reply};
use crate::support::{record_through_a_kill9, KilledRun, Reconnecting, Sent, Via};

/// The keys, in one hash slot; a call names them by index.
const KEYS: [&str; 3] = ["lin:{s}:a", "lin:{s}:b", "lin:{s}:c"];

/// Leases outlive the run: the model has no expiry.
const TTL_MS: u64 = 60_000;

/// Clients of the recorded run, how long they run, and the bound on each one's operations
/// (well above what a client that pauses between operations reaches in the run: the kill
/// must fall inside it).
const CLIENTS: u32 = 3;
const RUN: Duration = Duration::from_millis(1_500);
const MAX_OPS_PER_CLIENT: u32 = 1_500;

/// `call`'s whole command through `via`: `ACQUIREALL n key… token ttl [SHARED]` or `RELEASE
/// key token`, or their `FCALL` (the set's floor key after its keys; a release's floor and
/// wake-up list after its key).
fn command(via: Via, call: &Call) -> redis::Cmd {
    let token = format!("set-{}", call.token());
    match (via, call) {
        (_, Call::Acquire { keys, shared, .. }) => {
            let names: Vec<&str> = keys.iter().map(|k| KEYS[*k]).collect();
            let mut cmd = match via {
                Via::Module => {
                    let mut cmd = redis::cmd(ACQUIREALL.name);
                    cmd.arg(names.len()).arg(&names);
                    cmd
                }
                Via::Library => {
                    let function = functions::function(&ACQUIREALL).expect("served by the library");
                    let bytes: Vec<&[u8]> = names.iter().map(|name| name.as_bytes()).collect();
                    let keys = functions::call_keys_all(&bytes);
                    let mut cmd = redis::cmd("FCALL");
                    cmd.arg(function).arg(keys.len()).arg(keys);
                    cmd
                }
            };
            cmd.arg(token).arg(TTL_MS);
            if *shared {
                cmd.arg(SHARED);
            }
            cmd
        }
        (Via::Module, Call::Release { key, .. }) => {
            let mut cmd = redis::cmd(RELEASE.name);
            cmd.arg(KEYS[*key]).arg(token);
            cmd
        }
        (Via::Library, Call::Release { key, .. }) => {
            let function = functions::function(&RELEASE).expect("served by the library");
            let keys = functions::call_keys(&RELEASE, KEYS[*key].as_bytes(), false);
            let mut cmd = redis::cmd("FCALL");
            cmd.arg(function).arg(keys.len()).arg(keys).arg(token);
            cmd
        }
    }
}

/// A random non-empty set of the keys, in a random order.
fn random_set(rng: &mut StdRng) -> Vec<usize> {
    let mask = rng.random_range(1..1usize << KEYS.len());
    let mut keys: Vec<usize> = (0..KEYS.len()).filter(|k| mask & (1 << k) != 0).collect();
    keys.shuffle(rng);
    keys
}

/// One client's operations until `until`: a set of keys (a reader's or a writer's, at random)
/// with a token of its own, held for a moment, then released key by key. A request without a
/// reply (the server died) is recorded without one; once the server is back, the client
/// releases every key that token may hold (the replies tell whether the set had been granted),
/// and sends a release that went unanswered again. Error replies changed nothing and are not
/// recorded: `LOADING` (the restarted server reading its AOF) is waited out, any other (none
/// expected: no restart grace) fails the test. Between operations the client pauses 1 to
/// 3 ms, so that its operations span the run.
fn record_client(url: &str, engine: Via, client: u32, start: Instant, until: Instant) -> Vec<Op> {
    let micros = |at: Instant| at.duration_since(start).as_micros() as u64;
    let mut rng = StdRng::seed_from_u64(u64::from(client) + 36);
    let mut ops = Vec::new();
    let mut conn = Reconnecting::new(url);
    // The (token, key) pairs to release, last first: a set held, or one nobody heard of.
    let mut to_release: Vec<(u32, usize)> = Vec::new();
    for n in 0..MAX_OPS_PER_CLIENT {
        if Instant::now() >= until {
            break;
        }
        let Some(c) = conn.connected() else {
            continue;
        };
        let call = match to_release.last() {
            Some(&(token, key)) => Call::Release { token, key },
            None => Call::Acquire {
                token: client * 10_000 + n,
                keys: random_set(&mut rng),
                shared: rng.random_bool(0.5),
            },
        };
        let sent = micros(Instant::now());
        let reply: redis::RedisResult<redis::Value> = command(engine, &call).query(c);
        let end = Some(micros(Instant::now()));
        let reply = match conn.sent(reply, format_args!("client {client}: {call:?}")) {
            Sent::Replied(reply) => reply,
            Sent::Loading => continue,
            Sent::Unanswered => {
                if let Call::Acquire { token, keys, .. } = &call {
                    to_release = keys.iter().map(|k| (*token, *k)).collect();
                }
                ops.push(Op { call, reply: Reply::Unknown, start: sent, end: None });
                continue;
            }
        };
        let reply = match (&call, reply) {
            (Call::Acquire { token, keys, .. }, redis::Value::Array(fences)) => {
                to_release = keys.iter().map(|k| (*token, *k)).collect();
                thread::sleep(Duration::from_millis(rng.random_range(0..3)));
                let fences = fences.iter().map(|f| match f {
                    redis::Value::Int(f) if *f > 0 => *f as u64,
                    other => panic!("client {client}: {call:?}: not a fence: {other:?}"),
                });
                Reply::Granted(fences.collect())
            }
            (Call::Acquire { .. }, redis::Value::Nil) => Reply::Busy,
            (Call::Release { .. }, redis::Value::Int(held)) => {
                to_release.pop();
                Reply::Released(held == 1)
            }
            (call, other) => panic!("client {client}: {call:?} was answered {other:?}"),
        };
        ops.push(Op { call, reply, start: sent, end });
        thread::sleep(Duration::from_millis(rng.random_range(1..=3)));
    }
    ops
}

#[test]
fn histories_of_sets_through_a_kill9_are_linearizable_and_a_partial_grant_is_caught() {
    linearizable_through_a_kill9(Via::Module);
}

#[test]
fn histories_of_sets_on_the_library_through_a_kill9_are_linearizable_too() {
    linearizable_through_a_kill9(Via::Library);
}

/// Three clients take sets of keys on `s` through `engine` while it is killed and restarted;
/// all-or-nothing read-write locks must explain their history, and not the same history made
/// to show a partial grant or a stale fence.
fn linearizable_through_a_kill9(engine: Via) {
    let mut s = engine.durable_server();
    let url = s.url();
    let KilledRun { history, killed, restarted } =
        record_through_a_kill9(&mut s, CLIENTS, RUN, |c, start, until| {
            record_client(&url, engine, c, start, until)
        });
    let granted = |op: &Op| matches!(op.reply, Reply::Granted(_));
    let grants = history.iter().filter(|op| granted(op)).count();
    let several = history.iter().filter(|op| granted(op) && keys_of(op).len() > 1).count();
    let busy = history.iter().filter(|op| op.reply == Reply::Busy).count();
    let unknown = history.iter().filter(|op| op.reply == Reply::Unknown).count();
    let before = history.iter().filter(|op| op.end.is_some_and(|end| end < killed)).count();
    let after = history.iter().filter(|op| op.start > restarted).count();
    let summary = format!(
        "{} operations ({before} before the kill, {after} after the restart), {grants} grants ({several} of several keys), {busy} refused, {unknown} without a reply",
        history.len()
    );
    let checked = Instant::now();
    check(&history, 0).unwrap_or_else(|why| panic!("ACQUIREALL history via {engine:?}: {summary}: {why}"));
    let took = checked.elapsed();
    assert!(before >= 50 && after >= 50, "the kill must fall inside the run: {summary}");
    assert!(grants >= 30 && several >= 10 && busy >= 10, "the clients must run and meet: {summary}");
    eprintln!("ACQUIREALL history via {engine:?}: {summary}, linearizable (checked in {took:?})");

    let checked = Instant::now();
    let partial = with_a_partial_grant(&history);
    assert!(check(&partial, 0).is_err(), "a refused set's key held after all passed the check");
    let partial_took = checked.elapsed();
    let checked = Instant::now();
    let stale = with_a_stale_fence(&history);
    assert!(check(&stale, 0).is_err(), "a repeated fence on one key of a set passed the check");
    eprintln!(
        "caught: a refused set's key held (in {partial_took:?}), a stale fence in a set (in {:?})",
        checked.elapsed()
    );
}

fn keys_of(op: &Op) -> &[usize] {
    match &op.call {
        Call::Acquire { keys, .. } => keys,
        Call::Release { key, .. } => std::slice::from_ref(key),
    }
}

/// `history` as a server that stored part of a refused set would have it: after everything,
/// the token of a set that was refused (one of several keys where there is one) releases one
/// of its keys, and is told it held it.
fn with_a_partial_grant(history: &[Op]) -> Vec<Op> {
    let refused = |op: &&Op| op.reply == Reply::Busy;
    let set = (history.iter().filter(refused).find(|op| keys_of(op).len() > 1))
        .or_else(|| history.iter().find(refused))
        .expect("a refused set");
    let after = history.iter().filter_map(|op| op.end).max().unwrap_or(0) + 1;
    let mut partial = history.to_vec();
    partial.push(Op {
        call: Call::Release { token: set.call.token(), key: keys_of(set)[0] },
        reply: Reply::Released(true),
        start: after,
        end: Some(after + 1),
    });
    partial
}

/// `history` with the last grant of several keys given, on one of them, the fence of the
/// first grant there (which returned before it was asked).
fn with_a_stale_fence(history: &[Op]) -> Vec<Op> {
    let mut stale = history.to_vec();
    let last = (stale.iter())
        .rposition(|op| matches!(op.reply, Reply::Granted(_)) && keys_of(op).len() > 1)
        .expect("a grant of several keys");
    let key = *keys_of(&stale[last]).last().expect("keys");
    let fence_on = |op: &Op| match &op.reply {
        Reply::Granted(fences) => keys_of(op).iter().position(|k| *k == key).map(|i| (fences[i], op.end)),
        _ => None,
    };
    let (low, low_end) = stale
        .iter()
        .filter(|op| op.start < stale[last].start)
        .find_map(fence_on)
        .expect("an earlier grant of the key");
    assert!(
        low_end.is_some_and(|end| end < stale[last].start),
        "the first grant returned before the last was asked"
    );
    if let Reply::Granted(fences) = &mut stale[last].reply {
        *fences.last_mut().expect("fences") = low;
    }
    stale
}
