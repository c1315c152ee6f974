//! Server-side waiting (issue #11): `FENCEDLOCK.ACQUIRE key token ttl_ms BLOCK timeout_ms`
//! against a real server of the flavor in `FENCEDLOCK_FLAVOR`.
//!
//! Every waiter has its own connection and is queued one at a time (the next is sent only once
//! the server has blocked the previous one), so the arrival order a test asserts is certain.
//! Timing checks use the client's monotonic clock, which is the server's too (same machine):
//! a lease granted by a command *sent* at `t` with ttl `d` cannot end before `t + d`, and one
//! *acknowledged* at `t'` ends by `t' + d`; so "never early" needs no slack beyond rounding,
//! and "not late" is bounded from the acknowledgement.
//!
//! Cases: FIFO order over 100 waiters; handoff at RELEASE and at expiry (measured); timeouts,
//! disconnects, `CLIENT KILL` and `CLIENT UNBLOCK` (never granted); no barging; re-entry by the
//! holder; two waiters with one token; bad `BLOCK` arguments; MULTI, scripts and functions;
//! replica and AOF restart; `DEL` / `UNLINK` / `FLUSHALL` / key expiry; other clients while 50
//! wait; the `INFO` counters; reclaim; the restart grace.

use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;
use fencedlock_protocol::command::{ACQUIRE, BLOCK, RELEASE, RENEW};
use fencedlock_protocol::config::{RECLAIM_AFTER_MS, RESTART_GRACE_MS};
use fencedlock_protocol::limits::MAX_BLOCK_MS;
use fencedlock_protocol::ReplyError;
use harness::{acquire_cmd, epoch_of, error_text, poll, redis, BlockedAcquire, LockStatus, Server};
use redis::Value;

/// Bound on a reply that must come (a hang fails the test instead of CI).
const REPLY: Duration = Duration::from_secs(10);
/// Bound on a handoff reply after the command that ended the lease (RELEASE, DEL, ...), on a
/// loaded CI machine; the measured values are printed.
const PROMPT: Duration = Duration::from_millis(200);
/// Bound on how late an expired lease is handed over after its deadline.
const LATE: Duration = Duration::from_millis(100);
/// Rounding between the server's clocks (µs, ms) and the client's.
const SLACK: Duration = Duration::from_millis(1);
/// Redis's block timeouts run on a millisecond clock: one may fire up to 1 ms early.
const TIMEOUT_SLACK: Duration = Duration::from_millis(2);

/// One `INFO fencedlock` counter by its short name, e.g. `c(&s, "handoffs")`.
fn c(s: &Server, name: &str) -> u64 {
    s.fencedlock_counter(&format!("fencedlock_{name}"))
}

/// `RELEASE` on a granted waiter's own connection.
fn release_on(w: &mut BlockedAcquire, key: &str, token: &[u8]) -> i64 {
    redis::cmd(RELEASE.name)
        .arg(key)
        .arg(token)
        .query(w.conn())
        .unwrap_or_else(|e| panic!("RELEASE {key}: {}", error_text(&e)))
}

/// `(fence, held)` of a key that must exist.
fn state(s: &Server, key: &str) -> (u64, bool) {
    let st = status_of(s, key);
    (st.fence, st.held)
}

fn free(fence: u64) -> LockStatus {
    LockStatus { fence, held: false, remaining: None, label: None }
}

/// The `p`-th percentile (0..=100) of sorted durations.
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() - 1) * p / 100]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

// ---------------------------------------------------------------------------------------
// Order and handoff
// ---------------------------------------------------------------------------------------

#[test]
fn grants_follow_arrival_order_over_100_waiters() {
    const WAITERS: usize = 100;
    const HOLD: Duration = Duration::from_millis(2);
    let token = |i: usize| format!("waiter-{i}");
    let s = Server::start();
    let key = "fifo:lock";
    let first = grant(&s, key, b"holder", LONG_TTL);
    let (handoffs, blocked, contended) = (c(&s, "handoffs"), c(&s, "blocked_acquires"), c(&s, "contended"));

    let mut queued = Vec::with_capacity(WAITERS);
    for i in 0..WAITERS {
        // The next waiter is sent only once the server has blocked this one: arrival order is i.
        queued.push(s.queue_acquire(key, token(i).as_bytes(), LONG_TTL, 0));
        assert_eq!(s.waiters(), i as u64 + 1, "fencedlock_waiters after queuing waiter {i}");
    }
    assert_eq!(c(&s, "blocked_acquires"), blocked + WAITERS as u64);

    // Each waiter, once granted, holds briefly and releases on its own connection.
    let start = Instant::now();
    let grants: Vec<(u64, Instant)> = thread::scope(|scope| {
        let threads: Vec<_> = queued
            .into_iter()
            .enumerate()
            .map(|(i, mut w)| {
                scope.spawn(move || {
                    let reply = w.reply(Duration::from_secs(30));
                    let fence = reply.fence();
                    thread::sleep(HOLD);
                    assert_eq!(release_on(&mut w, key, token(i).as_bytes()), 1, "waiter {i} held its lease");
                    (fence, reply.at)
                })
            })
            .collect();
        assert_eq!(release(&s, key, b"holder"), 1);
        threads.into_iter().map(|t| t.join().expect("a waiter thread panicked")).collect()
    });
    let elapsed = start.elapsed();

    let fences: Vec<u64> = grants.iter().map(|(f, _)| *f).collect();
    let expected: Vec<u64> = (1..=WAITERS as u64).map(|i| first + i).collect();
    assert_eq!(fences, expected, "the i-th waiter to arrive must get the i-th grant after the holder's");
    assert!(grants.windows(2).all(|w| w[0].1 < w[1].1), "replies arrive in arrival order");
    assert_eq!(c(&s, "handoffs"), handoffs + WAITERS as u64);
    assert_eq!(c(&s, "contended"), contended, "a waiter that was granted is not a contended refusal");
    assert_eq!(s.waiters(), 0);
    assert_eq!(status_of(&s, key), free(first + WAITERS as u64));
    eprintln!(
        "FIFO: {WAITERS} waiters granted in arrival order in {:.1} ms ({:.2} ms per grant with a {HOLD:?} hold)",
        ms(elapsed),
        ms(elapsed) / WAITERS as f64
    );
}

#[test]
fn a_release_hands_over_at_once() {
    const ROUNDS: usize = 20;
    let s = Server::start();
    let key = "prompt:lock";
    let mut holder = b"holder-0".to_vec();
    let mut last = grant(&s, key, &holder, LONG_TTL);
    let (mut gaps, mut rtts) = (Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        let token = format!("holder-{round}").into_bytes();
        let mut w = s.queue_acquire(key, &token, LONG_TTL, 0);
        let (released, reply) = thread::scope(|scope| {
            let reader = scope.spawn(|| w.reply(REPLY));
            // Let the reader sit in its read, so the reply's arrival is timed when it arrives.
            thread::sleep(Duration::from_millis(2));
            let released = Instant::now();
            assert_eq!(release(&s, key, &holder), 1);
            rtts.push(released.elapsed());
            (released, reader.join().expect("reader"))
        });
        let fence = reply.fence();
        assert_eq!(fence, last + 1, "round {round}: the waiter got the next fence");
        gaps.push(reply.at.saturating_duration_since(released));
        (last, holder) = (fence, token);
    }
    gaps.sort();
    rtts.sort();
    let max = *gaps.last().expect("rounds ran");
    eprintln!(
        "handoff after RELEASE: p50 {:.3} ms, max {:.3} ms (RELEASE round trip p50 {:.3} ms), {ROUNDS} rounds",
        ms(percentile(&gaps, 50)),
        ms(max),
        ms(percentile(&rtts, 50))
    );
    assert!(max < PROMPT, "a waiter's reply came {max:?} after the RELEASE was sent: {gaps:?}");
}

#[test]
fn an_expired_lease_is_handed_over_at_its_deadline() {
    const TTL: Duration = Duration::from_millis(300);
    let s = Server::start();
    let mut report = Vec::new();
    for round in 0..3 {
        let key = format!("expiry:{round}");
        let (takeovers, handoffs, grants) = (c(&s, "takeovers"), c(&s, "handoffs"), c(&s, "grants"));
        let sent = Instant::now();
        let held = grant(&s, &key, b"holder", TTL.as_millis() as u64);
        let acked = Instant::now();
        let mut w = s.queue_acquire(&key, b"successor", LONG_TTL, 0);
        let reply = w.reply(REPLY);
        // The holder's deadline (server clock = our clock) lies in [sent + ttl, acked + ttl].
        let (earliest, latest) = (sent + TTL, acked + TTL);
        assert!(
            reply.at + SLACK >= earliest,
            "round {round}: granted {:?} before the holder's lease could have ended",
            earliest - reply.at
        );
        let late = reply.at.saturating_duration_since(latest);
        assert!(late < LATE, "round {round}: handed over {late:?} after the holder's deadline");
        let fence = reply.fence();
        assert_eq!(fence, held + 1);
        // The successor's lease starts at the handoff (not when it queued): its remaining time
        // is at least ttl minus the time since the earliest possible handoff.
        let st = status_of(&s, &key);
        let looked = Instant::now();
        assert_eq!((st.fence, st.held), (fence, true));
        let remaining = st.remaining.expect("held");
        assert!(
            remaining + SLACK + looked.duration_since(earliest) >= Duration::from_millis(LONG_TTL),
            "round {round}: the successor's lease did not start at the handoff: {st:?}"
        );
        assert_eq!(c(&s, "takeovers"), takeovers + 1, "a handoff after expiry is a takeover");
        assert_eq!(c(&s, "handoffs"), handoffs + 1);
        assert_eq!(c(&s, "grants"), grants + 2);
        report.push((reply.at.saturating_duration_since(earliest), late));
    }
    eprintln!(
        "expiry handoff: reply after the holder's deadline (upper bound, lower bound) in ms: {:?}",
        report.iter().map(|(hi, lo)| (ms(*hi), ms(*lo))).collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------------------
// Waiters that leave: never granted
// ---------------------------------------------------------------------------------------

#[test]
fn a_timed_out_waiter_gets_nil_and_never_the_lease() {
    let s = Server::start();
    let key = "timeout:lock";
    let held = grant(&s, key, b"holder", LONG_TTL);
    let (timeouts, contended) = (c(&s, "wait_timeouts"), c(&s, "contended"));

    let mut w = s.queue_acquire(key, b"impatient", LONG_TTL, 100);
    let reply = w.reply(REPLY);
    assert!(reply.is_nil(), "a timed-out waiter gets nil: {reply:?}");
    let waited = reply.latency();
    assert!(waited + TIMEOUT_SLACK >= Duration::from_millis(100), "timed out early: {waited:?}");
    assert!(waited < Duration::from_millis(100) + Duration::from_millis(500), "timed out late: {waited:?}");
    s.wait_waiters(0, REPLY);
    assert_eq!(c(&s, "wait_timeouts"), timeouts + 1);
    assert_eq!(c(&s, "contended"), contended + 1, "a timed-out wait is a contended refusal");
    assert_eq!(release(&s, key, b"holder"), 1);
    assert_eq!(status_of(&s, key), free(held), "nobody holds it: the timed-out waiter got nothing");

    // Behind a waiter that times out, the next one is served.
    let held = grant(&s, key, b"holder", LONG_TTL);
    let mut impatient = s.queue_acquire(key, b"impatient", LONG_TTL, 100);
    let mut patient = s.queue_acquire(key, b"patient", LONG_TTL, 0);
    assert!(impatient.reply(REPLY).is_nil());
    s.wait_waiters(1, REPLY);
    assert_eq!(release(&s, key, b"holder"), 1);
    assert_eq!(patient.reply(REPLY).fence(), held + 1, "the waiter behind the timed-out one is served");
    assert_eq!(release_on(&mut patient, key, b"patient"), 1);
    assert_eq!(status_of(&s, key), free(held + 1));
    assert_eq!(c(&s, "wait_timeouts"), timeouts + 2);
    eprintln!("BLOCK 100 timed out after {:.1} ms", ms(waited));
}

/// How a waiter leaves the queue.
#[derive(Debug, Clone, Copy)]
enum Leave {
    /// Its client closes the socket.
    Close,
    /// `CLIENT KILL ID`.
    Kill,
    /// `CLIENT UNBLOCK id` (TIMEOUT): answered as a timeout, nil.
    UnblockTimeout,
    /// `CLIENT UNBLOCK id ERROR`: answered `-UNBLOCKED`.
    UnblockError,
}

fn leave(s: &Server, mut w: BlockedAcquire, how: Leave) {
    let id = w.client_id().to_string();
    match how {
        Leave::Close => drop(w),
        Leave::Kill => {
            let killed: i64 = s.cmd(&["CLIENT", "KILL", "ID", &id]).expect("CLIENT KILL ID");
            assert_eq!(killed, 1, "CLIENT KILL ID {id}");
        }
        Leave::UnblockTimeout | Leave::UnblockError => {
            let mode = if matches!(how, Leave::UnblockError) { "ERROR" } else { "TIMEOUT" };
            let unblocked: i64 = s.cmd(&["CLIENT", "UNBLOCK", &id, mode]).expect("CLIENT UNBLOCK");
            assert_eq!(unblocked, 1, "CLIENT UNBLOCK {id} {mode}: the waiter must be unblockable");
            let reply = w.reply(REPLY);
            match how {
                Leave::UnblockTimeout => assert!(reply.is_nil(), "unblocked as a timeout: {reply:?}"),
                _ => {
                    let code = reply.outcome.as_ref().err().and_then(|e| e.code().map(str::to_string));
                    assert_eq!(code.as_deref(), Some("UNBLOCKED"), "{reply:?}");
                }
            }
        }
    }
}

#[test]
fn a_waiter_that_leaves_never_gets_the_lease() {
    let s = Server::start();
    for (n, how) in
        [Leave::Close, Leave::Kill, Leave::UnblockTimeout, Leave::UnblockError].into_iter().enumerate()
    {
        let key = format!("leave:{n}");
        let abandoned = c(&s, "wait_abandoned");
        let held = grant(&s, &key, b"holder", LONG_TTL);
        let leaver = s.queue_acquire(&key, b"leaver", LONG_TTL, 0);
        let mut next = s.queue_acquire(&key, b"next", LONG_TTL, 0);
        leave(&s, leaver, how);
        s.wait_waiters(1, REPLY);
        assert!(next.is_blocked(&s), "{how:?}: the waiter behind is still queued");
        if matches!(how, Leave::Close | Leave::Kill) {
            assert_eq!(c(&s, "wait_abandoned"), abandoned + 1, "{how:?}: counted as abandoned");
        }
        assert_eq!(release(&s, &key, b"holder"), 1);
        let reply = next.reply(REPLY);
        assert_eq!(
            reply.fence(),
            held + 1,
            "{how:?}: the next waiter got the handoff, the one that left nothing"
        );
        assert_eq!(acquire(&s, &key, b"leaver", LONG_TTL), None, "{how:?}: the key is the next waiter's");

        // Alone in the queue: after the release nobody holds the key.
        let leaver = s.queue_acquire(&key, b"leaver", LONG_TTL, 0);
        leave(&s, leaver, how);
        s.wait_waiters(0, REPLY);
        assert_eq!(release_on(&mut next, &key, b"next"), 1);
        assert_eq!(status_of(&s, &key), free(held + 1), "{how:?}: the waiter that left was not granted");
        // Its token, asking again on a new connection, gets a fresh grant of the free key.
        assert_eq!(grant(&s, &key, b"leaver", LONG_TTL), held + 2);
        assert_eq!(release(&s, &key, b"leaver"), 1);
    }
}

#[test]
fn nobody_barges_past_the_queue() {
    const TTL: Duration = Duration::from_millis(300);
    let s = Server::start();
    let key = "barge:lock";
    let sent = Instant::now();
    let held = grant(&s, key, b"holder", TTL.as_millis() as u64);
    let acked = Instant::now();
    let mut w = s.queue_acquire(key, b"waiter", LONG_TTL, 0);
    assert_eq!(acquire(&s, key, b"barger", LONG_TTL), None, "held and queued");

    // Around the holder's deadline (and the timer's handoff), a third token and the expired
    // holder keep trying without BLOCK: every try must be refused.
    let deadline = acked + TTL;
    let (reply, tries) = attempts_until_answered(&mut w, REPLY, deadline, |at| {
        assert_eq!(
            acquire(&s, key, b"barger", LONG_TTL),
            None,
            "a third token barged past the queue {:?} after the holder's ACQUIRE was sent",
            at - sent
        );
        // The holder's own token re-enters only while its lease runs; after its deadline it
        // is just another token.
        if at > deadline + SLACK {
            assert_eq!(acquire(&s, key, b"holder", LONG_TTL), None, "the expired holder barged");
        }
    });
    let fence = reply.fence();
    assert_eq!(fence, held + 1, "the waiter got the lease at the deadline");
    let near = tries.iter().filter(|t| **t + Duration::from_millis(10) >= deadline).count();
    let after = tries.iter().filter(|t| **t > deadline + SLACK).count();
    eprintln!(
        "no barging: {} refused tries, {near} within 10 ms before the deadline or later, {after} after it; the waiter's reply came {:.1} ms after the deadline",
        tries.len(),
        ms(reply.at.saturating_duration_since(deadline))
    );
    assert_eq!(state(&s, key), (fence, true));

    // A release with a waiter queued hands over in the same step: a try right after it loses.
    let mut next = s.queue_acquire(key, b"next", LONG_TTL, 0);
    assert_eq!(release_on(&mut w, key, b"waiter"), 1);
    assert_eq!(acquire(&s, key, b"barger", LONG_TTL), None, "barged right after the release");
    assert_eq!(next.reply(REPLY).fence(), fence + 1);
    assert_eq!(release_on(&mut next, key, b"next"), 1);
    assert_eq!(grant(&s, key, b"barger", LONG_TTL), fence + 2, "with nobody queued the key is free");

    // The narrowest window: the deadline passes while the server is frozen (SIGSTOP); on thaw
    // it reads the requests waiting on its sockets before it runs its timers, so these tries
    // reach the key after the lease ended and before the timer's handoff.
    let key2 = "barge:frozen";
    let held2 = grant(&s, key2, b"holder", TTL.as_millis() as u64);
    let acked = Instant::now();
    let mut w2 = s.queue_acquire(key2, b"waiter", LONG_TTL, 0);
    let mut conns: Vec<redis::Connection> = (0..3).map(|_| s.conn()).collect();
    let tries = [
        acquire_cmd(key2, b"barger", LONG_TTL, None),
        acquire_cmd(key2, b"holder", LONG_TTL, None),
        redis::cmd(RENEW.name).arg(key2).arg("holder").arg(LONG_TTL).clone(),
    ];
    s.pause();
    thread::sleep((acked + TTL + Duration::from_millis(50)).saturating_duration_since(Instant::now()));
    for (conn, cmd) in conns.iter_mut().zip(&tries) {
        conn.send_packed_command(&cmd.get_packed_command()).expect("send to the frozen server");
    }
    s.resume();
    let answers: Vec<Value> =
        conns.iter_mut().map(|c| c.recv_response().expect("reply after the thaw")).collect();
    assert_eq!(
        answers,
        [Value::Nil, Value::Nil, Value::Int(0)],
        "after the deadline, before the timer: the third token and the expired holder must not take the lease (ACQUIRE, ACQUIRE, RENEW)"
    );
    assert_eq!(w2.reply(REPLY).fence(), held2 + 1, "the waiter got the lease");
    assert_eq!(state(&s, key2), (held2 + 1, true));
}

#[test]
fn the_holder_reenters_at_once_while_others_wait() {
    let s = Server::start();
    let key = "reenter:lock";
    // On a free key BLOCK answers at once and does not block.
    let blocked = c(&s, "blocked_acquires");
    let mut first = s.send_acquire(key, b"holder", 5_000, Some(0));
    let reply = first.reply(REPLY);
    let fence = reply.fence();
    assert!(reply.latency() < PROMPT, "a free key is granted at once: {:?}", reply.latency());
    assert_eq!(c(&s, "blocked_acquires"), blocked, "a grant at once did not block");

    let mut w = s.queue_acquire(key, b"waiter", LONG_TTL, 0);
    assert_eq!(c(&s, "blocked_acquires"), blocked + 1);
    assert_eq!(acquire(&s, key, b"holder", 5_000), Some(fence), "re-entry without BLOCK");
    for block in [1_000, 0] {
        // The holder's own token with BLOCK, on a connection of its own: same fence, at once.
        let mut again = s.send_acquire(key, b"holder", LONG_TTL, Some(block));
        let reply = again.reply(REPLY);
        assert_eq!(reply.fence(), fence, "BLOCK {block}: the holder re-enters");
        assert!(reply.latency() < PROMPT, "BLOCK {block}: answered at once, not after {:?}", reply.latency());
    }
    let st = status_of(&s, key);
    assert!(
        st.held && st.fence == fence && st.remaining.is_some_and(|d| d > Duration::from_millis(5_000)),
        "the re-entry restarted the lease with its ttl: {st:?}"
    );
    assert_eq!(c(&s, "blocked_acquires"), blocked + 1, "the holder's re-entries did not block");
    assert_eq!(s.waiters(), 1, "the queue is unaffected");
    assert!(w.is_blocked(&s));
    assert_eq!(release(&s, key, b"holder"), 1);
    assert_eq!(w.reply(REPLY).fence(), fence + 1);
}

#[test]
fn waiters_with_one_token_get_one_fence_at_the_handoff() {
    let s = Server::start();
    let key = "same:lock";
    let held = grant(&s, key, b"holder", LONG_TTL);
    let handoffs = c(&s, "handoffs");
    // Two adjacent, one behind another token's waiter.
    let mut x1 = s.queue_acquire(key, b"x", LONG_TTL, 0);
    let mut x2 = s.queue_acquire(key, b"x", LONG_TTL, 0);
    let mut y = s.queue_acquire(key, b"y", LONG_TTL, 0);
    let mut x3 = s.queue_acquire(key, b"x", LONG_TTL, 0);
    assert_eq!(s.waiters(), 4);
    assert_eq!(release(&s, key, b"holder"), 1);
    let fences: Vec<u64> = [&mut x1, &mut x2, &mut x3].into_iter().map(|w| w.reply(REPLY).fence()).collect();
    assert_eq!(fences, [held + 1; 3], "every waiter of the token that was granted holds that one lease");
    s.wait_waiters(1, REPLY);
    assert!(y.is_blocked(&s), "the other token still waits");
    assert_eq!(state(&s, key), (held + 1, true));
    assert_eq!(c(&s, "handoffs"), handoffs + 1, "one lease was handed over");
    assert_eq!(release_on(&mut x2, key, b"x"), 1);
    assert_eq!(y.reply(REPLY).fence(), held + 2);
    assert_eq!(c(&s, "handoffs"), handoffs + 2);
}

// ---------------------------------------------------------------------------------------
// Bad input, transactions and scripts
// ---------------------------------------------------------------------------------------

/// What a refused command must leave alone: every `INFO fencedlock` field (waiters included),
/// the keys' lock state, the key count.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    info: HashMap<String, String>,
    locks: Vec<Option<LockState>>,
    keys: u64,
}

fn snapshot(s: &Server, keys: &[&str]) -> Snapshot {
    let locks = keys.iter().map(|k| s.lock_status(*k).map(|st| (st.fence, st.held, st.label))).collect();
    Snapshot { info: info(s), locks, keys: s.dbsize() }
}

#[test]
fn bad_block_arguments_are_refused_and_change_nothing() {
    let s = Server::start();
    let (busy, fresh) = ("bad:busy", "bad:free");
    let held = grant(&s, busy, b"holder", LONG_TTL);
    let w = s.queue_acquire(busy, b"waiter", LONG_TTL, 0);
    let keys = [busy, fresh];

    let too_long = (MAX_BLOCK_MS + 1).to_string();
    let bad_timeouts =
        ["-1", "abc", "9223372036854775808", too_long.as_str(), "1.5", "", "+5", " 5", "5 ", "1e3"];
    let mut cases: Vec<(Vec<Vec<u8>>, Option<ReplyError>)> = Vec::new();
    for key in keys {
        for t in bad_timeouts {
            cases.push((args![ACQUIRE.name, key, "t", "1000", BLOCK, t], Some(ReplyError::BadTimeout)));
        }
        for word in ["BLOK", "BLOCKS", "TIMEOUT", "NX", "0"] {
            cases.push((args![ACQUIRE.name, key, "t", "1000", word, "10"], Some(ReplyError::Syntax)));
        }
        cases.push((args![ACQUIRE.name, key, "t", "0", BLOCK, "10"], Some(ReplyError::BadTtl)));
        cases.push((args![ACQUIRE.name, key, "", "1000", BLOCK, "10"], Some(ReplyError::BadToken)));
        // An option without its value, or a stray word: the module's syntax error (the SHARED
        // flag lets any count of words through the server's arity check).
        cases.push((args![ACQUIRE.name, key, "t", "1000", BLOCK], Some(ReplyError::Syntax)));
        cases.push((args![ACQUIRE.name, key, "t", "1000", BLOCK, "10", "extra"], Some(ReplyError::Syntax)));
        // Each option at most once: a repeat is the module's syntax error.
        cases.push((
            args![ACQUIRE.name, key, "t", "1000", BLOCK, "10", BLOCK, "10"],
            Some(ReplyError::Syntax),
        ));
    }
    assert_refused_unchanged(
        &s,
        cases,
        || snapshot(&s, &keys),
        |shown| {
            assert!(w.is_blocked(&s), "{shown:?} disturbed the queued waiter");
        },
    );

    // The option word is matched without regard to case: `block 10` on a busy key waits, and
    // times out.
    let (blocked, timeouts) = (c(&s, "blocked_acquires"), c(&s, "wait_timeouts"));
    let lowercase = run_v(&s, &args![ACQUIRE.name, busy, "other", "1000", "block", "10"]);
    assert_eq!(lowercase.map_err(|e| error_text(&e)), Ok(Value::Nil), "`block 10` on a busy key times out");
    assert_eq!(
        (c(&s, "blocked_acquires"), c(&s, "wait_timeouts")),
        (blocked + 1, timeouts + 1),
        "`block 10` waited"
    );
    let mixed = run_v(&s, &args![ACQUIRE.name, fresh, "t", "1000", "BlOcK", "0"]);
    assert!(matches!(mixed, Ok(Value::Int(f)) if f as u64 > held), "`BlOcK 0` on a free key: {mixed:?}");
    // The largest timeout is accepted: at once on a free key, queued on a busy one.
    let edge = MAX_BLOCK_MS.to_string();
    let granted = run_v(&s, &args![ACQUIRE.name, "bad:edge", "t", "1000", BLOCK, edge.as_str()]);
    assert!(matches!(granted, Ok(Value::Int(_))), "BLOCK {MAX_BLOCK_MS} on a free key: {granted:?}");
    let long = s.queue_acquire(busy, b"long", LONG_TTL, MAX_BLOCK_MS);
    assert_eq!(s.waiters(), 2);
    drop(long);
    s.wait_waiters(1, REPLY);
}

#[test]
fn multi_scripts_and_functions_never_block() {
    let s = Server::start();
    let (busy, fresh) = ("tx:busy", "tx:free");
    let held = grant(&s, busy, b"holder", LONG_TTL);
    let blocked = c(&s, "blocked_acquires");
    let mut conn = s.conn();
    conn.set_read_timeout(Some(Duration::from_secs(5))).expect("read timeout");
    let block0 = |key: &str, token: &str| {
        let mut cmd = redis::cmd(ACQUIRE.name);
        cmd.arg(key).arg(token).arg(1_000).arg(BLOCK).arg(0);
        cmd
    };

    let start = Instant::now();
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .add_command(block0(busy, "t"))
        .add_command(block0(busy, "holder"))
        .add_command(block0(fresh, "t"))
        .query(&mut conn)
        .unwrap_or_else(|e| panic!("MULTI/EXEC: {}", error_text(&e)));
    assert!(start.elapsed() < Duration::from_secs(1), "EXEC took {:?}", start.elapsed());
    match replies.as_slice() {
        [Value::Nil, Value::Int(same), Value::Int(new)] => {
            assert_eq!(*same as u64, held, "the holder re-enters inside MULTI");
            assert!(*new as u64 > held);
        }
        other => panic!("EXEC replied {other:?}: expected [nil, the holder's fence, a new fence]"),
    }

    let script = "return redis.call('FENCEDLOCK.ACQUIRE', KEYS[1], ARGV[1], 1000, 'BLOCK', ARGV[2])";
    for (key, token, timeout) in [(busy, "t", "0"), (busy, "t", "5000"), ("tx:free2", "t", "0")] {
        let start = Instant::now();
        let reply: Value = redis::cmd("EVAL")
            .arg(script)
            .arg(1)
            .arg(key)
            .arg(token)
            .arg(timeout)
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("EVAL on {key}: {}", error_text(&e)));
        assert!(start.elapsed() < Duration::from_secs(1), "EVAL BLOCK {timeout} took {:?}", start.elapsed());
        match (key, reply) {
            (k, Value::Nil) if k == busy => {}
            (k, Value::Int(f)) if k != busy && f as u64 > held => {}
            (k, other) => panic!("EVAL BLOCK {timeout} on {k} replied {other:?}"),
        }
    }

    let library = "#!lua name=fencedlock_wait_test\n\
        redis.register_function('acquire_block', function(keys, args) \
        return redis.call('FENCEDLOCK.ACQUIRE', keys[1], args[1], 1000, 'BLOCK', args[2]) end)";
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(library)
        .query(&mut conn)
        .unwrap_or_else(|e| panic!("FUNCTION LOAD: {}", error_text(&e)));
    for (key, expect_nil) in [(busy, true), ("tx:free3", false)] {
        let start = Instant::now();
        let reply: Value = redis::cmd("FCALL")
            .arg("acquire_block")
            .arg(1)
            .arg(key)
            .arg("t")
            .arg(0)
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("FCALL on {key}: {}", error_text(&e)));
        assert!(start.elapsed() < Duration::from_secs(1), "FCALL took {:?}", start.elapsed());
        assert_eq!(matches!(reply, Value::Nil), expect_nil, "FCALL on {key} replied {reply:?}");
    }
    assert_eq!(c(&s, "blocked_acquires"), blocked, "nothing blocked");
    assert_eq!(s.waiters(), 0);
    assert_eq!(state(&s, busy), (held, true));
}

// ---------------------------------------------------------------------------------------
// Replication, persistence, deletion, reclaim, restart grace
// ---------------------------------------------------------------------------------------

#[test]
fn handoffs_reach_the_replica_and_survive_an_aof_restart() {
    let mut p = Server::builder().arg("appendonly", "yes").arg("appendfsync", "always").start();
    let r = p.start_replica();
    let mut fences = Vec::new();

    // A handoff at RELEASE, and one at expiry.
    let (released, expired) = ("aof:released", "aof:expired");
    fences.push(grant(&p, released, b"holder", LONG_TTL));
    let mut w1 = p.queue_acquire(released, b"w1", LONG_TTL, 0);
    assert_eq!(release(&p, released, b"holder"), 1);
    fences.push(w1.reply(REPLY).fence());
    fences.push(grant(&p, expired, b"holder", 500));
    let mut w2 = p.queue_acquire(expired, b"w2", LONG_TTL, 0);
    fences.push(w2.reply(REPLY).fence());
    assert!(fences.windows(2).all(|f| f[1] > f[0]), "{fences:?}");
    let (f1, f2) = (fences[1], fences[3]);

    p.wait_caught_up(&r);
    for (key, fence) in [(released, f1), (expired, f2)] {
        assert_eq!(state(&p, key), (fence, true), "{key} on the primary");
        assert_eq!(state(&r, key), (fence, true), "{key}: the handoff grant reached the replica");
    }
    assert_eq!(r.high_water(), p.high_water());

    // Every acknowledged grant is on disk (appendfsync always): a crash keeps both.
    p.kill9();
    p.restart();
    for (key, token, fence) in [(released, b"w1", f1), (expired, b"w2", f2)] {
        assert_eq!(state(&p, key), (fence, true), "{key} after the AOF restart");
        assert_eq!(acquire(&p, key, b"intruder", LONG_TTL), None, "{key}: the handoff lease survived");
        assert_eq!(grant(&p, key, token, LONG_TTL), fence, "{key}: still the waiter's lease");
        assert_eq!(release(&p, key, token), 1);
    }
    let next = grant(&p, released, b"after", LONG_TTL);
    assert!(next > f2 && epoch_of(next) > epoch_of(f2), "{next} after restart vs {f2} before");
    // A handoff after the restart is above them all, too.
    let mut w3 = p.queue_acquire(released, b"w3", LONG_TTL, 0);
    assert_eq!(release(&p, released, b"after"), 1);
    assert_eq!(w3.reply(REPLY).fence(), next + 1);
}

#[test]
fn deleting_the_key_hands_over_to_the_head_waiter_with_a_higher_fence() {
    let s = Server::start();
    let cases: [&[&str]; 6] =
        [&["DEL"], &["UNLINK"], &["FLUSHALL"], &["FLUSHALL", "ASYNC"], &["FLUSHDB"], &["PEXPIRE", "20"]];
    for (n, how) in cases.into_iter().enumerate() {
        let key = format!("del:{n}");
        let held = grant(&s, &key, b"holder", LONG_TTL);
        let mark = s.high_water();
        let mut head = s.queue_acquire(&key, b"head", LONG_TTL, 0);
        let mut second = s.queue_acquire(&key, b"second", LONG_TTL, 0);
        let mut cmd = redis::cmd(how[0]);
        if how[0] == "DEL" || how[0] == "UNLINK" || how[0] == "PEXPIRE" {
            cmd.arg(&key);
        }
        for a in &how[1..] {
            cmd.arg(*a);
        }
        let sent = Instant::now();
        let _: Value = s.query(&cmd).unwrap_or_else(|e| panic!("{how:?}: {}", error_text(&e)));
        let reply = head.reply(REPLY);
        let fence = reply.fence();
        assert!(fence > held && fence > mark, "{how:?}: fence {fence} after the deletion, {held} before");
        // A Redis key expiry is noticed by the server's own expire cycle, not at once.
        let bound = if how[0] == "PEXPIRE" { Duration::from_secs(2) } else { PROMPT };
        let after = reply.at.saturating_duration_since(sent);
        assert!(after < bound, "{how:?}: the head waiter was granted {after:?} after the deletion");
        assert_eq!(state(&s, &key), (fence, true), "{how:?}");
        s.wait_waiters(1, REPLY);
        assert!(second.is_blocked(&s), "{how:?}: the second waiter still waits");
        assert_eq!(acquire(&s, &key, b"holder", LONG_TTL), None, "{how:?}: the deleted key's holder lost it");
        assert_eq!(release_on(&mut head, &key, b"head"), 1);
        assert_eq!(second.reply(REPLY).fence(), fence + 1, "{how:?}");
        assert_eq!(release_on(&mut second, &key, b"second"), 1);
        eprintln!("{how:?}: head waiter granted {:.2} ms after the command was sent", ms(after));
    }
}

#[test]
fn reclaim_never_takes_a_key_from_under_its_waiters() {
    const TTL: u64 = 250;
    const CHAIN: usize = 5;
    let s = Server::builder().arg(RECLAIM_AFTER_MS.full_name, "0").start();
    let key = "reclaim:lock";
    let reclaimed = c(&s, "reclaimed");
    let mut last = grant(&s, key, b"holder", TTL);
    // Nobody releases: each lease expires and the next waiter is granted at that moment.
    let mut chain: Vec<BlockedAcquire> =
        (0..CHAIN).map(|i| s.queue_acquire(key, format!("w{i}").as_bytes(), TTL, 0)).collect();
    let mut tail = s.queue_acquire(key, b"tail", LONG_TTL, 0);
    for (i, w) in chain.iter_mut().enumerate() {
        let fence = w.reply(REPLY).fence();
        assert!(fence > last, "waiter {i}: fence {fence} after {last}");
        last = fence;
    }
    let fence = tail.reply(REPLY).fence();
    assert!(fence > last);
    assert_eq!(state(&s, key), (fence, true), "the last waiter holds it");
    // With nobody waiting, a released key is reclaimed as usual.
    assert_eq!(release_on(&mut tail, key, b"tail"), 1);
    poll("the idle key to be reclaimed", Duration::from_secs(5), || !s.exists(key));
    assert!(c(&s, "reclaimed") > reclaimed);
    assert!(grant(&s, key, b"new", LONG_TTL) > fence, "fences rise across the reclaim");
}

/// A server restarted from its AOF with a restart grace, and the fence of a lease it held
/// (on `grace:held`, by `holder`, still running).
fn restarted_in_grace() -> (Server, u64) {
    let mut s = Server::builder().arg("appendonly", "yes").start();
    let held = grant(&s, "grace:held", b"holder", LONG_TTL);
    // Long enough to cover start-up and the checks on a loaded CI machine.
    s.set_restart_arg(RESTART_GRACE_MS.full_name, "3000");
    s.restart();
    (s, held)
}

/// A blocking ACQUIRE during the grace is answered at once with the grace error.
fn assert_grace_refuses_at_once(s: &Server, key: &str) {
    let refusals = c(s, "grace_refusals");
    let mut w = s.send_acquire(key, b"waiter", LONG_TTL, Some(0));
    let reply = w.reply(Duration::from_secs(2));
    assert_eq!(reply.error_kind(), Some(ReplyError::RestartGrace), "{key}: {reply:?}");
    assert!(reply.latency() < Duration::from_secs(1), "{key}: answered after {:?}", reply.latency());
    assert_eq!(c(s, "grace_refusals"), refusals + 1);
    assert_eq!(s.waiters(), 0);
}

#[test]
fn the_restart_grace_answers_a_blocking_acquire_of_a_free_key_at_once() {
    let (s, held) = restarted_in_grace();
    assert_grace_refuses_at_once(&s, "grace:new");
    assert_eq!(s.lock_status("grace:new"), None);
    assert_eq!(state(&s, "grace:held"), (held, true));
}

#[test]
fn a_lease_released_during_the_restart_grace_goes_to_its_waiter_when_the_grace_ends() {
    let (s, held) = restarted_in_grace();
    let released_at = Instant::now();
    let mut w = s.queue_acquire("grace:held", b"waiter", LONG_TTL, 0);
    let mut holder = s.conn();
    let n: i64 =
        redis::cmd(RELEASE.name).arg("grace:held").arg("holder").query(&mut holder).expect("RELEASE");
    assert_eq!(n, 1);
    // The grace (3 s from the restart) still runs: nobody may be granted, and the waiter is not
    // failed either: it stays first in the queue.
    std::thread::sleep(Duration::from_millis(300));
    assert!(w.is_blocked(&s), "the waiter was answered during the grace");
    assert_eq!(s.waiters(), 1);
    assert_eq!(state(&s, "grace:held"), (held, false));
    let reply = w.reply(Duration::from_secs(5));
    let fence = reply.fence();
    assert!(fence > held, "granted {fence} after {held}");
    assert!(released_at.elapsed() < Duration::from_secs(4), "granted only after {:?}", released_at.elapsed());
    assert_eq!(state(&s, "grace:held"), (fence, true));
}

// ---------------------------------------------------------------------------------------
// Other clients and the counters
// ---------------------------------------------------------------------------------------

#[test]
fn blocked_waiters_do_not_delay_other_clients() {
    const WAITERS: usize = 50;
    let s = Server::start();
    let key = "busy:lock";
    grant(&s, key, b"holder", LONG_TTL);
    grant(&s, "busy:other", b"other", LONG_TTL);
    let waiters: Vec<BlockedAcquire> =
        (0..WAITERS).map(|i| s.queue_acquire(key, format!("w{i}").as_bytes(), LONG_TTL, 0)).collect();
    assert_eq!(s.waiters(), WAITERS as u64);

    let mut conn = s.conn();
    let mut rtts = Vec::new();
    for i in 0..300 {
        let start = Instant::now();
        match i % 3 {
            0 => {
                let pong: String = redis::cmd("PING").query(&mut conn).expect("PING");
                assert_eq!(pong, "PONG");
            }
            1 => {
                let n: i64 = redis::cmd(RENEW.name)
                    .arg("busy:other")
                    .arg("other")
                    .arg(LONG_TTL)
                    .query(&mut conn)
                    .expect("RENEW");
                assert_eq!(n, 1);
            }
            _ => {
                // The contended key's own holder renews past its waiters.
                let n: i64 = redis::cmd(RENEW.name)
                    .arg(key)
                    .arg("holder")
                    .arg(LONG_TTL)
                    .query(&mut conn)
                    .expect("RENEW");
                assert_eq!(n, 1);
            }
        }
        rtts.push(start.elapsed());
    }
    rtts.sort();
    let max = *rtts.last().expect("measured");
    eprintln!(
        "with {WAITERS} blocked waiters: PING/RENEW round trip p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        ms(percentile(&rtts, 50)),
        ms(percentile(&rtts, 99)),
        ms(max)
    );
    assert!(max < PROMPT, "a command took {max:?} while {WAITERS} clients were blocked");
    assert_eq!(s.waiters(), WAITERS as u64, "the waiters still wait");
    assert!(waiters.iter().all(|w| w.is_blocked(&s)));
}

#[test]
fn info_counts_waiters_and_how_their_waits_ended() {
    const A_TTL: Duration = Duration::from_millis(300);
    let s = Server::start();
    for field in [
        "waiters",
        "blocked_acquires",
        "handoffs",
        "wait_timeouts",
        "wait_abandoned",
        "wait_time_ms",
        "wait_time_max_ms",
    ] {
        let all = info(&s);
        let name = format!("fencedlock_{field}");
        let v = all.get(&name).unwrap_or_else(|| panic!("INFO fencedlock lacks {name}: {all:?}"));
        assert_eq!(v.parse::<u64>(), Ok(0), "{name} on a fresh server");
    }
    let key = "info:lock";
    let at = |name: &str| c(&s, name);
    grant(&s, key, b"holder", LONG_TTL);
    let base: HashMap<&str, u64> =
        ["grants", "contended", "takeovers"].into_iter().map(|n| (n, at(n))).collect();
    let moved = |name: &str| at(name) - base[name];

    // A: waits until the release. B: times out. C: disconnects.
    let mut a = s.queue_acquire(key, b"a", A_TTL.as_millis() as u64, 0);
    let a_queued = Instant::now();
    assert_eq!((at("waiters"), at("blocked_acquires")), (1, 1));
    let mut b = s.queue_acquire(key, b"b", LONG_TTL, 100);
    let c_waiter = s.queue_acquire(key, b"c", LONG_TTL, 0);
    let c_queued = Instant::now();
    assert_eq!((at("waiters"), at("blocked_acquires")), (3, 3));
    let b_reply = b.reply(REPLY);
    assert!(b_reply.is_nil());
    s.wait_waiters(2, REPLY);
    assert_eq!(at("wait_timeouts"), 1);
    let c_sent = c_waiter.sent();
    drop(c_waiter);
    let c_gone = Instant::now();
    s.wait_waiters(1, REPLY);
    let c_seen_gone = Instant::now();
    assert_eq!(at("wait_abandoned"), 1);
    assert_eq!(moved("contended"), 1, "only the timed-out wait is a contended refusal");

    let released = Instant::now();
    assert_eq!(release(&s, key, b"holder"), 1);
    let a_reply = a.reply(REPLY);
    a_reply.fence();
    assert_eq!((at("waiters"), at("handoffs")), (0, 1));
    assert_eq!(moved("grants"), 1, "the handoff is a grant");
    assert_eq!(moved("takeovers"), 0, "after a release, no takeover");

    // D waits for A's lease to expire: a handoff that is also a takeover.
    let mut d = s.queue_acquire(key, b"d", LONG_TTL, 0);
    let d_queued = Instant::now();
    let d_reply = d.reply(REPLY);
    d_reply.fence();
    assert_eq!((at("waiters"), at("handoffs"), at("blocked_acquires")), (0, 2, 4));
    assert_eq!(moved("grants"), 2);
    assert_eq!(moved("takeovers"), 1, "a handoff after expiry is a takeover");
    assert_eq!(moved("contended"), 1);
    assert_eq!(at("wait_timeouts"), 1);
    assert_eq!(at("wait_abandoned"), 1);

    // The time waited: each wait is within what the client saw (queued .. reply), and the
    // total and maximum are whole milliseconds of the sum and the longest.
    // (at least, at most) per waiter. A was queued by `a_queued` and granted after `released`;
    // C was queued by `c_queued` and left after `c_gone`; D was granted at A's deadline, at
    // least A's ttl after `released`.
    let waits = [
        (released.saturating_duration_since(a_queued), a_reply.latency()),
        (Duration::from_millis(100) - TIMEOUT_SLACK, b_reply.latency()),
        (c_gone.saturating_duration_since(c_queued), c_seen_gone - c_sent),
        ((released + A_TTL).saturating_duration_since(d_queued), d_reply.latency()),
    ];
    let low: Duration = waits.iter().map(|w| w.0).sum();
    let high: Duration = waits.iter().map(|w| w.1).sum();
    let total = Duration::from_millis(at("wait_time_ms"));
    assert!(
        total + SLACK * 4 >= low && total <= high + SLACK,
        "wait_time_ms {total:?} outside [{low:?}, {high:?}]"
    );
    let longest_low = waits.iter().map(|w| w.0).max().expect("waits");
    let longest_high = waits.iter().map(|w| w.1).max().expect("waits");
    let max = Duration::from_millis(at("wait_time_max_ms"));
    assert!(
        max + SLACK >= longest_low && max <= longest_high + SLACK,
        "wait_time_max_ms {max:?} outside [{longest_low:?}, {longest_high:?}]"
    );
    eprintln!("INFO after the scenario: wait_time_ms {total:?} in [{low:?}, {high:?}], max {max:?}");
}
