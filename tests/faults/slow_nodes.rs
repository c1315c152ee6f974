//! Redlock with nodes that hang: one that accepts TCP connections and never says a word (not
//! even to the connection handshake), and one whose replies arrive late through a delaying
//! proxy. Acquisition, renewal and release must each finish within the per-node timeout
//! (checked with generous upper bounds that detect a stall, not measure speed).
//!
//! Nodes frozen with SIGSTOP and killed nodes are covered in the client tests (`redlock`).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fencedlock::{Error, LockConfig, Locker, Node, Redlock, Vote};
use fencedlock_protocol::command::ACQUIRE;
use harness::{pick_port, wait_released, Server};

/// Long enough that a healthy local server always answers in time on a loaded CI machine,
/// well below the late node's 1.5 s delay.
const NODE_TIMEOUT: Duration = Duration::from_millis(800);
/// Slack on top of the node timeout before we call it a stall: scheduling on a loaded CI
/// machine, not a performance target.
const STALL_SLACK: Duration = Duration::from_secs(2);

// ---------------------------------------------------------------------------------------
// Misbehaving endpoints on 127.0.0.1
// ---------------------------------------------------------------------------------------

/// Accepts connections and keeps them open without ever reading or writing.
struct Blackhole {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Blackhole {
    fn start() -> Blackhole {
        let port = pick_port(false);
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the blackhole");
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut silent: Vec<TcpStream> = Vec::new();
            while !flag.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => silent.push(conn),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Blackhole { port, stop, thread: Some(thread) }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Forwards connections to a real server; requests go through at once, every reply chunk is
/// held back for the current delay from the moment it arrived.
struct DelayProxy {
    port: u16,
    delay_ms: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    sockets: Arc<Mutex<Vec<TcpStream>>>,
    thread: Option<JoinHandle<()>>,
}

impl DelayProxy {
    fn start(upstream: &Server, delay: Duration) -> DelayProxy {
        let port = pick_port(false);
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the proxy");
        listener.set_nonblocking(true).expect("nonblocking");
        let upstream_port = upstream.port();
        let delay_ms = Arc::new(AtomicU64::new(delay.as_millis() as u64));
        let reply_delay = delay_ms.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let sockets: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (flag, all) = (stop.clone(), sockets.clone());
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                client.set_nonblocking(false).expect("blocking client socket");
                let server = TcpStream::connect(("127.0.0.1", upstream_port)).expect("connect upstream");
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut all = all.lock().expect("sockets");
                    all.push(client.try_clone().expect("clone"));
                    all.push(server.try_clone().expect("clone"));
                }
                let no_delay = Arc::new(AtomicU64::new(0));
                forward(client.try_clone().expect("clone"), server.try_clone().expect("clone"), no_delay);
                forward(server, client, reply_delay.clone());
            }
        });
        DelayProxy { port, delay_ms, stop, sockets, thread: Some(thread) }
    }

    /// Change the delay of replies read from now on.
    fn set_delay(&self, delay: Duration) {
        self.delay_ms.store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// Copy `from` to `to`, each chunk no earlier than the delay (read when the chunk arrives)
/// after it was read.
fn forward(mut from: TcpStream, mut to: TcpStream, delay_ms: Arc<AtomicU64>) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n) = from.read(&mut buf) {
            let due = Instant::now() + Duration::from_millis(delay_ms.load(Ordering::SeqCst));
            if n == 0 || tx.send((due, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    std::thread::spawn(move || {
        for (due, chunk) in rx {
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for s in self.sockets.lock().expect("sockets").iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

fn config(ttl: Duration) -> LockConfig {
    LockConfig::builder()
        .ttl(ttl)
        .node_timeout(NODE_TIMEOUT)
        .backoff(Duration::from_millis(5), Duration::from_millis(20))
        .max_wait(Duration::from_millis(500))
        .build()
        .expect("valid config")
}

fn node(url: &str) -> Node {
    Node::new(url).expect("valid URL")
}

fn assert_bounded(what: &str, took: Duration) {
    assert!(
        took < NODE_TIMEOUT + STALL_SLACK,
        "{what} stalled: {took:?} with a {NODE_TIMEOUT:?} node timeout"
    );
}

/// The vote of a node the round got no answer from: timed out, or (for a client that stops
/// waiting once the outcome is certain) not waited for. A connection failure does not count.
fn no_answer(v: &Vote) -> bool {
    !v.answered() && !matches!(v, Vote::Failed { .. })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_and_a_late_node_do_not_stall_redlock() {
    let live = Server::start_many(4);
    let silent = Blackhole::start();
    let late = DelayProxy::start(&live[3], Duration::ZERO);
    // Node order: three good servers, the silent one, the late one.
    let urls = [live[0].url(), live[1].url(), live[2].url(), silent.url(), late.url()];
    let redlock = Redlock::new(urls.iter().map(|u| node(u)).collect(), config(Duration::from_secs(5)))
        .expect("redlock");
    // Open the late node's connection while it is still quick; then it turns slow. The
    // silent node is never connected: each round's handshake with it hangs.
    redlock.nodes()[4].status("warm-up").await.expect("the proxy forwards");
    late.set_delay(Duration::from_millis(1_500));

    // A majority of good nodes: granted, within the bound.
    let started = Instant::now();
    let mut lease = redlock.try_acquire("slow:key").await.expect("three good nodes are a majority");
    assert_bounded("acquire", started.elapsed());
    let report = lease.report().clone();
    assert!(report.yes() >= 3, "{report}");
    assert!(no_answer(&report.votes[3].vote), "silent node: {report}");
    assert!(no_answer(&report.votes[4].vote), "late node: {report}");
    let started = Instant::now();
    lease.renew().await.expect("renew with three good nodes");
    assert_bounded("renew", started.elapsed());
    let started = Instant::now();
    assert!(lease.release().await.expect("release"), "three nodes confirmed the release");
    assert_bounded("release", started.elapsed());

    // Now one good node refuses (another token holds the key there): the outcome hangs on
    // the silent and the late node, so the round must wait for them, and only up to the
    // node timeout.
    let blocker: Option<u64> = live[2].cmd(&[ACQUIRE.name, "slow:other", "blocker", "60000"]).expect("grant");
    assert!(blocker.is_some());
    let started = Instant::now();
    let result = redlock.try_acquire("slow:other").await;
    let took = started.elapsed();
    assert_bounded("a round that waits for the slow nodes", took);
    match result {
        Err(Error::QuorumNotReached(report)) => {
            assert_eq!(report.yes(), 2, "{report}");
            assert!(matches!(report.votes[3].vote, Vote::TimedOut), "silent node: {report}");
            assert!(matches!(report.votes[4].vote, Vote::TimedOut), "late node: {report}");
            assert!(took >= NODE_TIMEOUT, "the round waited for the slow nodes: {took:?}");
        }
        other => panic!("expected QuorumNotReached, got {other:?}"),
    }
    // The failed round released its grants everywhere, the late node's included (its
    // RELEASE travels behind its ACQUIRE); the blocker's lease is untouched.
    let ours: Vec<&Server> = [&live[0], &live[1], &live[3]].into_iter().collect();
    wait_released(&ours, "slow:other", Duration::from_secs(5)).await;
    wait_released(&ours, "slow:key", Duration::from_secs(5)).await;
    assert!(live[2].lock_held("slow:other"), "the blocker still holds its lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_slower_than_usual_but_within_the_timeout_still_counts() {
    // Two good nodes, two silent ones and one 40 ms late: a majority needs the late node.
    let live = Server::start_many(3);
    let silent: Vec<Blackhole> = (0..2).map(|_| Blackhole::start()).collect();
    let late = DelayProxy::start(&live[2], Duration::ZERO);
    let urls = [live[0].url(), live[1].url(), silent[0].url(), silent[1].url(), late.url()];
    let cfg = LockConfig::builder()
        .ttl(Duration::from_secs(5))
        .node_timeout(Duration::from_secs(1))
        .build()
        .expect("config");
    let redlock = Redlock::new(urls.iter().map(|u| node(u)).collect(), cfg).expect("redlock");
    redlock.nodes()[4].status("warm-up").await.expect("the proxy forwards");
    late.set_delay(Duration::from_millis(40));

    let started = Instant::now();
    let lease = redlock.try_acquire("late:ok").await.expect("the late node completes the majority");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1) + STALL_SLACK, "acquire stalled: {took:?}");
    let report = lease.report().clone();
    assert_eq!(report.yes(), 3, "{report}");
    assert!(report.votes[4].vote.is_yes(), "the late node answered within the timeout: {report}");
    assert!(report.elapsed >= Duration::from_millis(40), "the round waited for the late node: {report}");
    assert!(lease.release().await.expect("release"));
    let all: Vec<&Server> = live.iter().collect();
    wait_released(&all, "late:ok", Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_majority_fails_within_the_bound_and_leaves_nothing() {
    let live = Server::start_many(2);
    let silent: Vec<Blackhole> = (0..3).map(|_| Blackhole::start()).collect();
    let mut urls: Vec<String> = silent.iter().map(Blackhole::url).collect();
    urls.extend(live.iter().map(Server::url));
    let redlock = Redlock::new(urls.iter().map(|u| node(u)).collect(), config(Duration::from_secs(5)))
        .expect("redlock");

    let started = Instant::now();
    match redlock.try_acquire("silent:key").await {
        Err(Error::QuorumNotReached(report)) => {
            assert_eq!(report.yes(), 2, "{report}");
            assert!(!report.majority_refused(), "silence is not a refusal: {report}");
        }
        other => panic!("expected QuorumNotReached, got {other:?}"),
    }
    assert_bounded("a failed round", started.elapsed());
    for s in &live {
        assert!(!s.lock_held("silent:key"), "{}: the failed round released its grant", s.addr());
    }

    // acquire() retries until its max wait (500 ms), each round bounded by the node timeout.
    let started = Instant::now();
    let err = redlock.acquire("silent:key").await.unwrap_err();
    assert!(matches!(err, Error::QuorumNotReached(_)), "{err:?}");
    let took = started.elapsed();
    assert!(took < Duration::from_millis(500) + NODE_TIMEOUT + STALL_SLACK, "acquire stalled: {took:?}");

    // A single-node locker on a silent server times out too.
    let locker = Locker::open(&silent[0].url(), config(Duration::from_secs(5))).expect("locker");
    let started = Instant::now();
    let err = locker.try_acquire("silent:key").await.unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert_bounded("single-node acquire", started.elapsed());
}
