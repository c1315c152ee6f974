//! A contended, fault-injected run of fenced-Redlock grants: many tasks race for one key on
//! five masters while masters are killed (SIGKILL) and restarted, never more than two at a
//! time. The fences, recorded in grant order, must strictly increase. The same run with plain
//! per-node fences (no raise step) shows the fence going backwards.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::blocking;
use fencedlock::{Fencing, LockConfig, Node, Redlock, Vote};
use harness::{Server, EPOCH_GAP};

const MASTERS: usize = 5;
const KEY: &str = "ledger";
const WORKERS: usize = 12;

/// One fault: kill or restart a master once enough grants were recorded since the last one.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Kill(usize),
    Restart(usize),
}

#[derive(Debug, Clone, Copy)]
struct Step {
    /// Grants to record after the previous step before this one happens.
    after: usize,
    /// Of those, at least this many must have been granted by this master.
    granted_by: Option<(usize, usize)>,
    fault: Fault,
}

const fn step(after: usize, fault: Fault) -> Step {
    Step { after, granted_by: None, fault }
}

/// Never more than two masters down at once. The third step kills master 0 again right after
/// it granted with its post-restart (epoch-jumped) fence: without the raise step, the next
/// majority (masters 1..4) has only small fences.
const SCHEDULE: &[Step] = &[
    step(60, Fault::Kill(0)),
    step(60, Fault::Restart(0)),
    Step { after: 10, granted_by: Some((0, 10)), fault: Fault::Kill(0) },
    step(60, Fault::Kill(1)),
    step(60, Fault::Restart(0)),
    step(60, Fault::Restart(1)),
    step(60, Fault::Kill(2)),
    step(60, Fault::Kill(3)),
    step(60, Fault::Restart(2)),
    step(60, Fault::Kill(4)),
    step(60, Fault::Restart(3)),
    step(60, Fault::Restart(4)),
    step(60, Fault::Kill(1)),
    step(60, Fault::Kill(0)),
    step(60, Fault::Restart(1)),
    step(60, Fault::Restart(0)),
];

/// What the protected resource saw, in the order it saw it.
#[derive(Default)]
struct Ledger {
    /// Fence of each grant, in grant order.
    fences: Vec<u64>,
    /// Which masters granted each of them.
    granted_by: Vec<[bool; MASTERS]>,
    /// Grants whose validity had run out before they reached the resource.
    expired: usize,
    /// Acquire calls that gave up.
    failures: usize,
}

struct Outcome {
    fences: Vec<u64>,
    granted_by: Vec<[bool; MASTERS]>,
    expired: usize,
    failures: usize,
    faults: usize,
}

/// Runs until at least `target` grants were recorded *and* every step of `schedule` happened
/// (or a 40 s safety deadline passes, which the callers' assertions then report).
async fn contended_run(fencing: Fencing, target: usize, schedule: &[Step]) -> Outcome {
    let servers: Vec<Arc<Mutex<Server>>> = (0..MASTERS)
        .map(|_| Server::builder().arg("appendonly", "yes").arg("appendfsync", "always").start())
        .map(|s| Arc::new(Mutex::new(s)))
        .collect();
    let client_nodes = servers.iter().map(|s| Node::new(&s.lock().unwrap().url()).unwrap()).collect();
    let config = LockConfig::builder()
        .ttl(Duration::from_millis(2_000))
        .node_timeout(Duration::from_millis(200))
        .backoff(Duration::from_millis(1), Duration::from_millis(8))
        .max_wait(Duration::from_secs(5))
        .build()
        .unwrap();
    let redlock = Redlock::with_fencing(client_nodes, config, fencing).unwrap();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let deadline = Instant::now() + Duration::from_secs(40);
    let schedule_done = Arc::new(AtomicBool::new(false));

    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let (redlock, ledger, schedule_done) = (redlock.clone(), ledger.clone(), schedule_done.clone());
        workers.push(tokio::spawn(async move {
            let finished =
                || schedule_done.load(Ordering::SeqCst) && ledger.lock().unwrap().fences.len() >= target;
            while !finished() && Instant::now() < deadline {
                let lease = match redlock.acquire(KEY).await {
                    Ok(lease) => lease,
                    Err(_) => {
                        ledger.lock().unwrap().failures += 1;
                        continue;
                    }
                };
                {
                    // The resource: accepts the write only while the lease is valid, and
                    // records it in the order writes arrive (one at a time).
                    let mut l = ledger.lock().unwrap();
                    if lease.is_valid() {
                        l.fences.push(lease.fence());
                        let mut by = [false; MASTERS];
                        for (i, v) in lease.report().votes.iter().enumerate() {
                            by[i] = matches!(v.vote, Vote::Granted { .. });
                        }
                        l.granted_by.push(by);
                    } else {
                        l.expired += 1;
                    }
                }
                let _ = lease.release().await;
            }
        }));
    }

    // The fault injector, driven by grant counts so every run exercises the same faults.
    let mut faults = 0;
    for s in schedule {
        let start = ledger.lock().unwrap().fences.len();
        loop {
            let ready = {
                let l = ledger.lock().unwrap();
                let since = &l.granted_by[start.min(l.granted_by.len())..];
                since.len() >= s.after
                    && s.granted_by.is_none_or(|(node, n)| since.iter().filter(|by| by[node]).count() >= n)
            };
            if ready || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        if Instant::now() >= deadline {
            break;
        }
        let server = match s.fault {
            Fault::Kill(i) | Fault::Restart(i) => servers[i].clone(),
        };
        let fault = s.fault;
        blocking(move || {
            let mut server = server.lock().unwrap();
            match fault {
                Fault::Kill(_) => server.kill9(),
                Fault::Restart(_) => server.restart(),
            }
        })
        .await;
        faults += 1;
    }
    schedule_done.store(true, Ordering::SeqCst);
    for w in workers {
        w.await.unwrap();
    }
    // Bring every master back so the servers shut down cleanly.
    for s in &servers {
        let server = s.clone();
        blocking(move || {
            let mut server = server.lock().unwrap();
            if !server.is_running() {
                server.restart();
            }
        })
        .await;
    }
    let l = std::mem::take(&mut *ledger.lock().unwrap());
    Outcome { fences: l.fences, granted_by: l.granted_by, expired: l.expired, failures: l.failures, faults }
}

fn backwards_steps(fences: &[u64]) -> Vec<(usize, u64, u64)> {
    fences.windows(2).enumerate().filter(|(_, w)| w[1] <= w[0]).map(|(i, w)| (i + 1, w[0], w[1])).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_redlock_fences_strictly_increase_under_kills_and_restarts() {
    let target = 2_000;
    let started = Instant::now();
    let out = contended_run(Fencing::Raise, target, SCHEDULE).await;
    eprintln!(
        "fenced: {} grants in {:?}, {} faults, {} expired before use, {} acquire failures",
        out.fences.len(),
        started.elapsed(),
        out.faults,
        out.expired,
        out.failures
    );
    assert!(out.fences.len() >= target, "only {} grants", out.fences.len());
    assert_eq!(out.faults, SCHEDULE.len(), "every fault was injected");
    let minority_grants =
        out.granted_by.iter().filter(|by| by.iter().filter(|&&b| b).count() < MASTERS).count();
    assert!(minority_grants > 100, "grants with masters down: {minority_grants}");
    assert!(out.fences.iter().any(|&f| f > EPOCH_GAP), "restarted masters issued epoch-jumped fences");
    let distinct: HashSet<u64> = out.fences.iter().copied().collect();
    assert_eq!(distinct.len(), out.fences.len(), "a fence repeated");
    let back = backwards_steps(&out.fences);
    assert!(back.is_empty(), "fences went backwards at (index, before, after): {back:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_per_node_fences_go_backwards_in_the_same_run() {
    // The first three faults (kill, restart, kill master 0) and a few hundred grants suffice.
    let out = contended_run(Fencing::QuorumMax, 300, &SCHEDULE[..3]).await;
    let back = backwards_steps(&out.fences);
    let across_epoch: Vec<_> =
        back.iter().filter(|(_, before, after)| *before > EPOCH_GAP && *after < EPOCH_GAP).collect();
    eprintln!(
        "plain: {} grants, {} faults, {} backwards steps ({} across the restart epoch), first {:?}",
        out.fences.len(),
        out.faults,
        back.len(),
        across_epoch.len(),
        back.first()
    );
    assert_eq!(out.faults, 3, "the kill-restart-kill of master 0 happened");
    // Master 0 came back with epoch-jumped fences and granted; once it is down again the
    // next majority's largest fence is from before the jump.
    assert!(
        !across_epoch.is_empty(),
        "without the raise step the fence must drop below 2^32 after master 0 dies again: {back:?}"
    );
}
