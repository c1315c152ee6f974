//! Fenced semaphores under faults (issue #14): clients hold permits of a `PERMITS n` key while
//! the server is killed (`kill -9`, `appendfsync always`, restart on the same files) or its
//! primary dies and a replica is promoted.
//!
//! The promises checked from the clients' own records: every permit a client was told it holds
//! (and did not release) is still held by its token with its fence; the key never admits more
//! than `n` holders; and every fence granted after the fault is above every fence granted
//! before it (the module's epoch jump at start-up and promotion).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use fencedlock_protocol::command::{ACQUIRE, PERMITS, RELEASE, RENEW};
use fencedlock_protocol::SemaphoreStatus;
use harness::redis::{self, Connection};
use harness::{epoch_of, error_text, wait_replica_online, Server};

/// Permits of the churned key.
const N: u32 = 3;
/// Long enough that no permit expires during a test, however slowly a server restarts.
const TTL_MS: u64 = 20_000;
const LOAD_TIME: Duration = Duration::from_millis(400);
const CLIENTS: usize = 4;
/// Upper bound of requests per client, so a churn never runs unbounded.
const MAX_OPS: usize = 20_000;
/// How long a client holds each permit: most clients hold one when the fault strikes.
const HOLD: Duration = Duration::from_millis(10);

fn acquire(conn: &mut Connection, key: &str, token: &str, permits: u32) -> redis::RedisResult<Option<u64>> {
    redis::cmd(ACQUIRE.name).arg(key).arg(token).arg(TTL_MS).arg(PERMITS).arg(permits).query(conn)
}

/// One client's record: the fences it was granted, and the permit it certainly holds (granted,
/// no RELEASE sent) when it stopped.
#[derive(Debug, Default)]
struct Record {
    fences: Vec<u64>,
    held: Option<(String, u64)>,
}

/// Clients that each hold at most one permit of `key` (`PERMITS N`): acquire with a fresh token,
/// hold it for [`HOLD`], release it, again and again. A client stops at its first request
/// without a reply (the server died), or when told to: then it keeps the permit it holds.
struct Churn {
    stop: Arc<AtomicBool>,
    /// Clients in their hold now (between a grant's reply and the next check of `stop`).
    holding: Arc<AtomicUsize>,
    clients: Vec<JoinHandle<Record>>,
}

impl Churn {
    fn start(s: &Server, key: &str, label: &str) -> Churn {
        let stop = Arc::new(AtomicBool::new(false));
        let holding = Arc::new(AtomicUsize::new(0));
        let clients = (0..CLIENTS)
            .map(|i| {
                let (mut conn, stop, holding, key, label) =
                    (s.conn(), stop.clone(), holding.clone(), key.to_string(), label.to_string());
                conn.set_read_timeout(Some(Duration::from_secs(5))).expect("read timeout");
                thread::spawn(move || {
                    let mut record = Record::default();
                    for n in 0..MAX_OPS {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        // A RELEASE without a reply may or may not have ended the permit: from
                        // the moment it is sent the permit is no longer certainly held.
                        if let Some((token, fence)) = record.held.take() {
                            let released: redis::RedisResult<i64> =
                                redis::cmd(RELEASE.name).arg(&key).arg(&token).query(&mut conn);
                            match released {
                                Ok(1) => {}
                                Ok(r) => panic!("client {i}: RELEASE of {fence} replied {r}"),
                                Err(_) => break,
                            }
                        }
                        let token = format!("{label}-c{i}-{n}");
                        match acquire(&mut conn, &key, &token, N) {
                            Ok(Some(fence)) => {
                                record.fences.push(fence);
                                record.held = Some((token, fence));
                                holding.fetch_add(1, Ordering::SeqCst);
                                thread::sleep(HOLD);
                                let stopped = stop.load(Ordering::SeqCst);
                                holding.fetch_sub(1, Ordering::SeqCst);
                                if stopped {
                                    break;
                                }
                            }
                            Ok(None) => thread::sleep(Duration::from_millis(1)),
                            Err(e) if e.code().is_some() => panic!("client {i}: {}", error_text(&e)),
                            Err(_) => break,
                        }
                    }
                    record
                })
            })
            .collect();
        Churn { stop, holding, clients }
    }

    /// [`Churn::halt`] at a moment when some client holds a permit (and keeps it), while the
    /// others may have a request in flight. Bounded: halts anyway after 5 s.
    fn halt_while_holding(&self) {
        let give_up = Instant::now() + Duration::from_secs(5);
        while self.holding.load(Ordering::SeqCst) == 0 && Instant::now() < give_up {
            thread::yield_now();
        }
        self.halt();
    }

    /// Tell the clients to stop (each finishes its request in flight).
    fn halt(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    fn stop(self) -> Vec<Record> {
        self.halt();
        self.clients.into_iter().map(|c| c.join().expect("a client panicked")).collect()
    }
}

fn all_fences(records: &[Record]) -> Vec<u64> {
    records.iter().flat_map(|r| r.fences.iter().copied()).collect()
}

fn status(s: &Server, key: &str) -> SemaphoreStatus {
    s.semaphore_status(key).unwrap_or_else(|| panic!("{key} vanished on {}", s.addr()))
}

/// Every permit the clients certainly hold is `s`'s, by its token with its fence; the key has
/// at most `n` holders; filling it admits exactly up to `n`, each new fence above `before` and
/// in a later 2^32 block. Returns the fences the fill got (released again).
fn assert_permits_kept(
    s: &Server,
    key: &str,
    n: u32,
    held: &[(String, u64)],
    before: u64,
    what: &str,
) -> Vec<u64> {
    let st = status(s, key);
    assert_eq!(st.permits, n, "{what}: {st:?}");
    assert!(st.holders.len() <= n as usize, "{what}: more than {n} holders: {st:?}");
    let fences: Vec<u64> = st.holders.iter().map(|h| h.fence).collect();
    for (token, fence) in held {
        assert!(fences.contains(fence), "{what}: the permit {fence} of {token} was lost: {st:?}");
        let renewed: i64 = s.cmd(&[RENEW.name, key, token, &TTL_MS.to_string()]).expect("RENEW");
        assert_eq!(renewed, 1, "{what}: {token} no longer holds {fence}");
    }
    let mut conn = s.conn();
    let mut fill = Vec::new();
    for k in 0..=n {
        match acquire(&mut conn, key, &format!("filler-{k}"), n) {
            Ok(Some(fence)) => fill.push(fence),
            Ok(None) => break,
            Err(e) => panic!("{what}: {}", error_text(&e)),
        }
    }
    assert_eq!(
        st.holders.len() + fill.len(),
        n as usize,
        "{what}: {} holders after the fault and {} more admitted, of {n} permits",
        st.holders.len(),
        fill.len()
    );
    for fence in &fill {
        assert!(
            *fence > before && epoch_of(*fence) > epoch_of(before),
            "{what}: fence {fence} after the fault is not in a block above {before}, granted before it"
        );
    }
    for k in 0..fill.len() {
        let released: i64 = s.cmd(&[RELEASE.name, key, &format!("filler-{k}")]).expect("RELEASE");
        assert_eq!(released, 1);
    }
    fill
}

/// The churn after a fault, `later`, ran, and every fence it was granted is above `top`, the
/// highest before the fault, in a higher epoch; and no fence of `fences` (all granted, before
/// and after) is there twice. `fault` names it in the message. Returns the lowest later fence.
fn assert_fences_rose_past(later: &[u64], top: u64, fences: &[u64], fault: &str) -> u64 {
    assert!(!later.is_empty(), "the churn must run after the {fault}");
    let low = later.iter().min().copied().unwrap_or(0);
    assert!(low > top && epoch_of(low) > epoch_of(top), "fence {low} after the {fault}, {top} before it");
    let distinct: HashSet<&u64> = fences.iter().collect();
    assert_eq!(distinct.len(), fences.len(), "a fence was granted twice");
    low
}

#[test]
fn kill9_with_appendfsync_always_keeps_every_permit_and_fences_rise() {
    let mut s = Server::builder().arg("appendonly", "yes").arg("appendfsync", "always").start();
    let (churned, fixed) = ("fsem:crash:churn", "fsem:crash:fixed");
    // A key whose holders are known exactly: 3 of 4 permits.
    let mut conn = s.conn();
    let fixed_held: Vec<(String, u64)> = (0..3)
        .map(|i| {
            let token = format!("fixed-{i}");
            (token.clone(), acquire(&mut conn, fixed, &token, 4).expect("ACQUIRE").expect("granted"))
        })
        .collect();
    drop(conn);

    let churn = Churn::start(&s, churned, "before");
    thread::sleep(LOAD_TIME);
    // The clients holding a permit keep it; those with a request in flight meet the kill.
    churn.halt_while_holding();
    s.kill9();
    let before = churn.stop();
    let mut fences = all_fences(&before);
    fences.extend(fixed_held.iter().map(|(_, f)| *f));
    let top = fences.iter().copied().max().unwrap_or(0);
    let held: Vec<(String, u64)> = before.iter().filter_map(|r| r.held.clone()).collect();
    assert!(all_fences(&before).len() >= 10, "the churn must really run: {before:?}");
    let shown: Vec<_> = before.iter().map(|r| (r.fences.len(), r.fences.last(), &r.held)).collect();
    assert!(!held.is_empty(), "the kill must hit held permits: (grants, last, held) per client {shown:?}");

    s.restart();
    let after_fill = assert_permits_kept(&s, churned, N, &held, top, "churned key after kill -9");
    let fixed_fill = assert_permits_kept(&s, fixed, 4, &fixed_held, top, "fixed key after kill -9");
    assert_eq!(fixed_fill.len(), 1);

    // Churn again: every fence after the restart is above every fence before it.
    for (token, _) in &held {
        let _: i64 = s.cmd(&[RELEASE.name, churned, token]).expect("RELEASE");
    }
    let churn = Churn::start(&s, churned, "after");
    thread::sleep(Duration::from_millis(200));
    let after = churn.stop();
    let later = all_fences(&after);
    fences.extend(later.iter().chain(&after_fill).chain(&fixed_fill));
    let low = assert_fences_rose_past(&later, top, &fences, "restart");
    eprintln!(
        "kill -9: {} grants before, {} permits certainly held survived, {} grants after, lowest after {low} > highest before {top}",
        all_fences(&before).len(),
        held.len(),
        later.len()
    );
}

#[test]
fn a_promoted_replica_keeps_the_permits_admits_no_more_and_fences_rise() {
    let mut p = Server::start();
    let r = p.start_replica();
    let (settled, racing) = ("fsem:fo:settled", "fsem:fo:racing");

    // The settled key's churn ends and the replica catches up before the fault: it must show
    // exactly the primary's holders. The racing key churns until the kill: replication is
    // asynchronous, so its last grants may be lost, but never the bound or the fence order.
    let churn = Churn::start(&p, settled, "settled");
    thread::sleep(LOAD_TIME);
    let settled_records = churn.stop();
    let racing_churn = Churn::start(&p, racing, "racing");
    thread::sleep(LOAD_TIME);
    p.wait_caught_up(&r);
    let primary_view = status(&p, settled);
    racing_churn.halt_while_holding();
    p.kill9();
    let racing_records = racing_churn.stop();
    r.promote();

    let mut fences = all_fences(&settled_records);
    fences.extend(all_fences(&racing_records));
    let top = fences.iter().copied().max().unwrap_or(0);
    assert!(
        all_fences(&settled_records).len() >= 10 && all_fences(&racing_records).len() >= 10,
        "the churns must run"
    );
    let promoted_view = status(&r, settled);
    let shape =
        |st: &SemaphoreStatus| (st.fence, st.permits, st.holders.iter().map(|h| h.fence).collect::<Vec<_>>());
    assert_eq!(
        shape(&promoted_view),
        shape(&primary_view),
        "the promoted replica shows the primary's holders"
    );
    let held: Vec<(String, u64)> = settled_records.iter().filter_map(|rec| rec.held.clone()).collect();
    assert!(!held.is_empty());
    let settled_fill = assert_permits_kept(&r, settled, N, &held, top, "settled key on the promoted replica");
    let racing_fill = assert_permits_kept(&r, racing, N, &[], top, "racing key on the promoted replica");

    // The new primary churns (the racing key's last holders keep its permits): every fence
    // above every fence of the old primary.
    let churn = Churn::start(&r, "fsem:fo:new", "new-primary");
    thread::sleep(Duration::from_millis(200));
    let later = all_fences(&churn.stop());
    fences.extend(later.iter().chain(&settled_fill).chain(&racing_fill));
    let low = assert_fences_rose_past(&later, top, &fences, "failover");

    // The old primary comes back as a replica of the new one and shows its holders.
    p.set_restart_args("replicaof", ["127.0.0.1".to_string(), r.port().to_string()]);
    p.restart();
    wait_replica_online(&r, &p);
    r.wait_caught_up(&p);
    for key in [settled, racing] {
        assert_eq!(
            shape(&status(&p, key)),
            shape(&status(&r, key)),
            "{key} on the old primary, now a replica"
        );
    }
    eprintln!(
        "failover: {} grants before, {} permits certainly held survived, {} grants after, lowest after {low} > highest before {top}",
        fences.len() - later.len(),
        held.len(),
        later.len()
    );
}
