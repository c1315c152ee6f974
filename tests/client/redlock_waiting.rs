//! Redlock waiting on the server: every contender queues on the key's designated master and
//! takes the majority once it is first there (see the crate docs). Several tasks on one key
//! against three and five real masters, a silent designated master, and cancellation.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{counter, nodes, wait_until};
use fencedlock::{LockConfig, Redlock, Token};
use fencedlock_protocol::command::ACQUIRE;
use harness::{wait_released, Server};

const WAITERS: &str = "fencedlock_waiters";
const BLOCKED: &str = "fencedlock_blocked_acquires";

fn waiting_config(node_timeout_ms: u64) -> LockConfig {
    LockConfig::builder()
        .ttl(Duration::from_secs(5))
        .node_timeout(Duration::from_millis(node_timeout_ms))
        .max_wait(Duration::from_secs(20))
        .build()
        .expect("config")
}

/// The same, polling with the default backoff (20 ms doubling to 400 ms) as before `BLOCK`.
fn polling_config() -> LockConfig {
    LockConfig::builder()
        .ttl(Duration::from_secs(5))
        .node_timeout(Duration::from_millis(300))
        .max_wait(Duration::from_secs(20))
        .max_blocking(0)
        .build()
        .expect("config")
}

/// What a contended run saw.
#[derive(Debug)]
struct Run {
    grants: usize,
    took: Duration,
    fences: Vec<u64>,
}

impl Run {
    fn per_second(&self) -> f64 {
        self.grants as f64 / self.took.as_secs_f64()
    }
}

/// `tasks` tasks each take `key` `each` times, hold it `hold` and release it. A shared
/// "current holder" slot is set at every grant and cleared before the release: a grant while
/// it is set would be two valid leases at once. Bounded: the whole run must end in 30 s.
async fn contend(redlock: &Redlock, key: &'static str, tasks: usize, each: usize, hold: Duration) -> Run {
    let holder: Arc<Mutex<Option<u64>>> = Arc::new(Mutex::new(None));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let workers: Vec<_> = (0..tasks)
        .map(|_| {
            let (redlock, holder, fences) = (redlock.clone(), Arc::clone(&holder), Arc::clone(&fences));
            tokio::spawn(async move {
                for _ in 0..each {
                    let lease = redlock.acquire(key).await.unwrap_or_else(|e| panic!("no grant: {e}"));
                    {
                        let mut current = holder.lock().unwrap();
                        assert!(lease.is_valid(), "granted an expired lease");
                        assert_eq!(
                            *current,
                            None,
                            "fence {} granted while another lease was held",
                            lease.fence()
                        );
                        *current = Some(lease.fence());
                        fences.lock().unwrap().push(lease.fence());
                    }
                    tokio::time::sleep(hold).await;
                    *holder.lock().unwrap() = None;
                    assert!(lease.release().await.expect("release"), "lease lost while held");
                }
            })
        })
        .collect();
    let all = futures::future::join_all(workers);
    let joined = tokio::time::timeout(Duration::from_secs(30), all)
        .await
        .expect("no deadlock or livelock: all grants within 30 s");
    for j in joined {
        j.expect("contending task");
    }
    let took = started.elapsed();
    let fences = Arc::try_unwrap(fences).expect("tasks done").into_inner().unwrap();
    assert_eq!(fences.len(), tasks * each, "every task got every grant");
    for pair in fences.windows(2) {
        assert!(pair[1] > pair[0], "fences increase in grant order: {pair:?}");
    }
    Run { grants: fences.len(), took, fences }
}

fn blocked_per_server(servers: &[Server]) -> Vec<u64> {
    servers.iter().map(|s| counter(s, BLOCKED)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_on_three_masters_queue_on_one_and_each_gets_its_turn() {
    let servers = Server::start_many(3);
    let waiting = Redlock::new(nodes(&servers), waiting_config(300)).expect("redlock");
    let polling = Redlock::new(nodes(&servers), polling_config()).expect("redlock");
    let hold = Duration::from_millis(5);

    let queued = contend(&waiting, "hot:wait", 16, 4, hold).await;
    let blocked = blocked_per_server(&servers);
    let before_poll = blocked.clone();
    let polled = contend(&polling, "hot:poll", 16, 4, hold).await;
    assert_eq!(blocked_per_server(&servers), before_poll, "polling never waits on a server");

    // Contenders queued on one master (the key's designated one); the others see at most a
    // brief wait in the round that follows a reservation, more of them on a loaded machine
    // (a release to them trails the grant). Which is faster, waiting or polling, is the
    // contention benchmark's question (benches/contention.rs), not a timed assertion here.
    let total: u64 = blocked.iter().sum();
    let most = blocked.iter().copied().max().unwrap_or(0);
    assert!(most as usize >= queued.grants / 2, "waits per master {blocked:?} for {} grants", queued.grants);
    assert!(most * 2 > total, "one master holds most of the waits: {blocked:?}");
    eprintln!(
        "3 masters, 16 tasks: waiting {:.0} grants/s, polling {:.0} grants/s; waits per master {blocked:?}",
        queued.per_second(),
        polled.per_second()
    );
    for s in &servers {
        assert_eq!(counter(s, WAITERS), 0, "{} has waiters left", s.addr());
    }
    wait_released(&servers.iter().collect::<Vec<_>>(), "hot:wait", Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_on_five_masters_each_get_their_turn() {
    let servers = Server::start_many(5);
    let redlock = Redlock::new(nodes(&servers), waiting_config(300)).expect("redlock");
    let run = contend(&redlock, "hot5", 8, 4, Duration::from_millis(2)).await;
    assert!(run.fences.first() < run.fences.last());
    assert!(blocked_per_server(&servers).iter().sum::<u64>() > 0, "the contenders waited on a server");
    for s in &servers {
        assert_eq!(counter(s, WAITERS), 0, "{} has waiters left", s.addr());
    }
}

/// Grants `key` to `token` on every master directly: a Redlock round ends at a majority, and
/// a master it did not wait for may never see its ACQUIRE, so a test that needs the key held
/// everywhere sets it up itself.
fn hold_everywhere(servers: &[Server], key: &str, token: &Token) {
    let token = std::str::from_utf8(token.as_bytes()).expect("a text token");
    for s in servers {
        let fence: Option<u64> = s.cmd(&[ACQUIRE.name, key, token, "10000"]).expect("ACQUIRE");
        assert!(fence.is_some(), "{} refused", s.addr());
    }
}

/// The master `key`'s waiter is queued on, once one is.
async fn queued_on(servers: &[Server]) -> usize {
    let mut found = None;
    wait_until("a waiter queued on a master", Duration::from_secs(3), || {
        found = servers.iter().position(|s| counter(s, WAITERS) == 1);
        found.is_some()
    })
    .await;
    let at = found.expect("found");
    for (i, s) in servers.iter().enumerate() {
        assert_eq!(counter(s, WAITERS), u64::from(i == at), "one queue only");
    }
    at
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_designated_master_is_passed_over() {
    let servers = Server::start_many(3);
    let holder = Redlock::new(nodes(&servers), waiting_config(300)).expect("redlock");
    let waiter = Redlock::new(nodes(&servers), waiting_config(300)).expect("redlock");
    // The holder's connections are open before the master goes silent, so its release is
    // queued in that master's socket and runs when it resumes (as for a warm client).
    let warm = holder.try_acquire("warm-up").await.expect("all masters up");
    assert!(warm.release().await.unwrap());
    let token = Token::from_bytes(b"the-holder".to_vec()).expect("token");
    hold_everywhere(&servers, "quiet", &token);
    let waiting = tokio::spawn(async move { waiter.acquire("quiet").await });
    let designated = queued_on(&servers).await;

    // The designated master goes silent (SIGSTOP), then the holder releases: only the
    // other two hear it. Waiting on the silent master would last until max_wait (20 s).
    servers[designated].pause();
    let released = Instant::now();
    let _ = holder.release_token("quiet", &token).await;
    let granted = tokio::time::timeout(Duration::from_secs(5), waiting).await;
    let took = released.elapsed();
    servers[designated].resume();
    let granted = granted.expect("granted without the silent master").expect("task").expect("grant");
    // One watchdog period and one node timeout to notice, then a round on the other two.
    assert!(took < Duration::from_millis(2_500), "took {took:?}");
    assert!(granted.report().yes() >= 2, "{}", granted.report());
    assert!(granted.release().await.unwrap());
    wait_released(&servers.iter().collect::<Vec<_>>(), "quiet", Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_waiting_redlock_acquire_leaves_no_waiter_and_no_lease() {
    let servers = Server::start_many(3);
    let holder = Redlock::new(nodes(&servers), waiting_config(200)).expect("redlock");
    let waiter = Redlock::new(nodes(&servers), waiting_config(200)).expect("redlock");
    let token = Token::from_bytes(b"the-holder".to_vec()).expect("token");
    hold_everywhere(&servers, "cancel", &token);
    let task = tokio::spawn(async move { waiter.acquire("cancel").await });
    let designated = queued_on(&servers).await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    wait_until("the waiter left the queue", Duration::from_secs(2), || {
        counter(&servers[designated], WAITERS) == 0
    })
    .await;
    assert!(holder.release_token("cancel", &token).await.unwrap());
    // Past the claim's second release: nothing is held anywhere, and no handoff happened.
    tokio::time::sleep(Duration::from_millis(600)).await;
    for s in &servers {
        assert!(!s.lock_held("cancel"), "{} holds the key", s.addr());
        assert_eq!(counter(s, "fencedlock_handoffs"), 0, "{}", s.addr());
    }
}
