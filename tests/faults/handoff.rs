//! Handoff after a crashed client (issue #11): holders and waiters are real processes
//! (`redis-cli`, each on its own connection) killed with `kill -9`, so their connections close
//! and their leases are never released.
//!
//! A killed holder is succeeded at its lease's deadline, not later, by the waiter queued behind
//! it (the server's timer, not a poll); a waiter process killed while blocked leaves the queue
//! and is never granted; a waiter process killed right after its grant is succeeded at *its*
//! deadline, counted from the handoff. Deadlines are bounded from `STATUS` on the same machine's
//! monotonic clock: a lease with `pttl` p read by a request sent at `t0` and answered at `t1`
//! ends in `[t0 + p, t1 + p + 1 ms]`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use fencedlock_protocol::command::{ACQUIRE, BLOCK, RELEASE};
use harness::{error_text, poll, redis, redis_cli, Server};

/// The leases the killed processes take: long enough that the kills land well before the end.
const TTL_MS: u64 = 500;
const LONG_TTL_MS: u64 = 60_000;
/// Bound on a reply or output line that must come.
const REPLY: Duration = Duration::from_secs(10);
/// How late after a deadline the successor may be granted (measured values are printed).
const LATE: Duration = Duration::from_millis(100);
/// Rounding between the server's clocks (µs, ms) and the client's.
const SLACK: Duration = Duration::from_millis(1);

/// A `redis-cli` process that sent one command on a connection of its own and keeps that
/// connection open (`-r 2 -i 60`: it would repeat the command a minute later) until killed.
/// Each output line arrives with the moment it was read.
struct CliClient {
    child: Child,
    lines: Receiver<(String, Instant)>,
}

impl CliClient {
    fn spawn(s: &Server, args: &[&str]) -> CliClient {
        let mut child = Command::new(redis_cli())
            .args(["-h", "127.0.0.1", "-p", &s.port().to_string(), "-r", "2", "-i", "60"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", redis_cli().display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send((line, Instant::now())).is_err() {
                    return;
                }
            }
        });
        CliClient { child, lines }
    }

    /// The next output line parsed as a fence, and when it was read.
    fn fence(&self, what: &str) -> (u64, Instant) {
        let (line, at) = self
            .lines
            .recv_timeout(REPLY)
            .unwrap_or_else(|_| panic!("{what}: redis-cli printed nothing within {REPLY:?}"));
        let fence = line.trim().parse().unwrap_or_else(|_| panic!("{what}: redis-cli printed {line:?}"));
        (fence, at)
    }

    /// SIGKILL, and reap.
    fn kill9(&mut self) {
        self.child.kill().expect("kill -9 redis-cli");
        self.child.wait().expect("reap redis-cli");
    }
}

impl Drop for CliClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn connected_clients(s: &Server) -> u64 {
    let v = s.info_field("clients", "connected_clients").expect("connected_clients");
    v.parse().unwrap_or_else(|e| panic!("connected_clients={v:?}: {e}"))
}

/// `key`'s lease must be held with `fence`; the bounds of its deadline on our clock.
fn deadline_of(s: &Server, key: &str, fence: u64) -> (Instant, Instant) {
    let sent = Instant::now();
    let st = s.lock_status(key);
    let acked = Instant::now();
    let st = st.unwrap_or_else(|| panic!("{key} has no lock state"));
    assert_eq!((st.fence, st.held), (fence, true), "{key}: {st:?}");
    let left = st.remaining.expect("a held lease has a remaining time");
    (sent + left, acked + left + SLACK)
}

/// `reply_at` came at or after a deadline in `[lo, hi]` (never early), and how late at most.
fn assert_at_deadline(what: &str, reply_at: Instant, (lo, hi): (Instant, Instant)) -> Duration {
    assert!(reply_at + SLACK >= lo, "{what}: granted {:?} before the deadline", lo - reply_at);
    let late = reply_at.saturating_duration_since(hi);
    assert!(late < LATE, "{what}: granted {late:?} after the deadline");
    reply_at.saturating_duration_since(lo)
}

#[test]
fn a_holder_killed_with_kill_9_is_succeeded_at_its_deadline() {
    let s = Server::start();
    let ttl = TTL_MS.to_string();
    let mut gaps = Vec::new();
    for round in 0..2 {
        let key = format!("kill9:{round}");
        // A holds; B, D (processes) and C (this test) queue behind it in that order.
        let mut a = CliClient::spawn(&s, &[ACQUIRE.name, &key, "holder-a", &ttl]);
        let (fa, _) = a.fence("A's grant");
        let a_deadline = deadline_of(&s, &key, fa);
        let mut b = CliClient::spawn(&s, &[ACQUIRE.name, &key, "holder-b", &ttl, BLOCK, "0"]);
        s.wait_waiters(1, REPLY);
        let mut d = CliClient::spawn(&s, &[ACQUIRE.name, &key, "waiter-d", &ttl, BLOCK, "0"]);
        s.wait_waiters(2, REPLY);
        let mut c = s.queue_acquire(&key, b"waiter-c", LONG_TTL_MS, 0);
        assert_eq!(s.waiters(), 3);

        // kill -9 the holder and the blocked waiter D: both connections close.
        let (clients, abandoned) = (connected_clients(&s), s.fencedlock_counter("fencedlock_wait_abandoned"));
        a.kill9();
        d.kill9();
        poll("the killed clients' connections to close", REPLY, || connected_clients(&s) == clients - 2);
        s.wait_waiters(2, REPLY);
        assert_eq!(s.fencedlock_counter("fencedlock_wait_abandoned"), abandoned + 1, "D left the queue");
        assert!(s.lock_held(&key), "killing the holder's client did not end its lease");

        // B is granted at A's deadline (the server's timer; nobody touched the key).
        let (fb, b_at) = b.fence("B's handoff");
        assert_eq!(fb, fa + 1, "B, queued first, got the handoff");
        gaps.push(("A -> B", assert_at_deadline("A's successor B", b_at, a_deadline)));
        // B's lease started at the handoff; B is killed too, and C succeeds it at its deadline.
        let b_deadline = deadline_of(&s, &key, fb);
        b.kill9();
        let reply = c.reply(REPLY);
        assert_eq!(reply.fence(), fb + 1, "C got the next handoff; the killed waiter D got nothing");
        gaps.push(("B -> C", assert_at_deadline("B's successor C", reply.at, b_deadline)));
        assert_eq!(s.waiters(), 0);
        let released: i64 = redis::cmd(RELEASE.name)
            .arg(&key)
            .arg("waiter-c")
            .query(c.conn())
            .unwrap_or_else(|e| panic!("RELEASE: {}", error_text(&e)));
        assert_eq!(released, 1);
    }
    eprintln!(
        "kill -9 handoffs, reply after the earliest possible deadline (ms): {:?}",
        gaps.iter().map(|(w, g)| format!("{w} {:.2}", g.as_secs_f64() * 1000.0)).collect::<Vec<_>>()
    );
}
