//! Redlock over five real masters, some of them silent (frozen with SIGSTOP after their
//! connections were opened, so requests are written and never answered until they thaw):
//! nobody pays a node timeout for a server the majority already outvoted.
//!
//! - A release returns as soon as a majority answered; the releases to the silent nodes
//!   still go out and end the lease there once they thaw, long before the ttl.
//! - An acquisition that cannot get a majority retries once per node timeout, not once per
//!   two (its releases to the silent nodes no longer hold up the next round), and ends
//!   within its maximum wait plus one node timeout.
//! - A release left behind never undoes a later grant to the same token.
//! - `fencedlock run` exits when its command does, not one node timeout later.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fencedlock::{Error, LockConfig, Node, Redlock, Token, TokenFormat, Vote};
use fencedlock_protocol::command::{ACQUIRE, RELEASE};
use harness::{wait_released, Server};

/// Per-node timeout: a healthy local server always answers well within it.
const NODE_TIMEOUT: Duration = Duration::from_millis(500);
/// Long enough that a lease which ends on a node within a few seconds was released there,
/// not expired.
const TTL: Duration = Duration::from_secs(30);
/// The acquisition's maximum wait in the lost-majority tests.
const MAX_WAIT: Duration = Duration::from_secs(2);
/// Scheduling slack on a loaded machine: well below one node timeout.
const SLACK: Duration = Duration::from_millis(300);

fn config() -> LockConfig {
    LockConfig::builder()
        .ttl(TTL)
        .node_timeout(NODE_TIMEOUT)
        .backoff(Duration::from_millis(5), Duration::from_millis(20))
        .max_wait(MAX_WAIT)
        // Poll in rounds: these tests measure what a failed round costs.
        .max_blocking(0)
        .build()
        .expect("valid config")
}

fn redlock(servers: &[Server], config: LockConfig) -> Redlock {
    let nodes = servers.iter().map(|s| Node::new(&s.url()).expect("valid URL")).collect();
    Redlock::new(nodes, config).expect("redlock")
}

/// Opens every node's connection, so requests to a node frozen later are written to it (and
/// processed when it thaws) rather than stuck in a handshake.
async fn connect_all(redlock: &Redlock) {
    for node in redlock.nodes() {
        node.status("warm-up").await.unwrap_or_else(|e| panic!("{}: {e}", node.name()));
    }
}

/// Freezes some servers (SIGSTOP) and thaws them when dropped, so a failing assertion does
/// not leave a stopped server behind for the next check.
struct Frozen<'a> {
    servers: Vec<&'a Server>,
}

impl<'a> Frozen<'a> {
    fn new(servers: Vec<&'a Server>) -> Frozen<'a> {
        for s in &servers {
            s.pause();
        }
        Frozen { servers }
    }

    fn thaw(self) {}
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        for s in &self.servers {
            s.resume();
        }
    }
}

/// How often `server` ran `FENCEDLOCK.ACQUIRE` so far (`INFO commandstats`).
fn acquire_calls(server: &Server) -> u64 {
    let name = format!("cmdstat_{}", ACQUIRE.name);
    let info = server.info("commandstats");
    let Some(line) = info.iter().find_map(|(k, v)| k.eq_ignore_ascii_case(&name).then_some(v)) else {
        return 0;
    };
    line.split(',')
        .find_map(|kv| kv.strip_prefix("calls="))
        .map(|n| n.parse().unwrap_or_else(|e| panic!("{name}: calls={n}: {e}")))
        .unwrap_or(0)
}

/// Grants `key` to `token` on every server directly, so every node holds what the client
/// later releases.
fn grant_everywhere(servers: &[Server], key: &str, token: &Token) {
    let ttl = TTL.as_millis().to_string();
    for s in servers {
        let fence: Option<u64> = s
            .cmd(&[ACQUIRE.name.as_bytes(), key.as_bytes(), token.as_bytes(), ttl.as_bytes()])
            .expect("ACQUIRE");
        assert!(fence.is_some(), "{}: granted", s.addr());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_returns_once_a_majority_answered_and_still_reaches_the_silent_nodes() {
    let servers = Server::start_many(5);
    let redlock = redlock(&servers, config());
    connect_all(&redlock).await;
    let token = Token::generate(TokenFormat::Hex);
    grant_everywhere(&servers, "quiet:release", &token);
    let lease = redlock.try_acquire_with_token("quiet:release", &token).await.expect("held everywhere");

    let frozen = Frozen::new(vec![&servers[3], &servers[4]]);
    let started = Instant::now();
    let released = lease.release().await;
    let took = started.elapsed();
    eprintln!("release with two of five nodes silent: {took:?}");
    assert!(released.expect("three nodes answered"), "a majority still held the lease");
    assert!(took < Duration::from_millis(150), "the release waited for the silent nodes: {took:?}");
    for s in &servers[..3] {
        assert!(!s.lock_held("quiet:release"), "{}: released before the call returned", s.addr());
    }

    // The background releases to the frozen nodes give up after the node timeout; what they
    // wrote is still read when the nodes thaw.
    tokio::time::sleep(NODE_TIMEOUT + Duration::from_millis(200)).await;
    frozen.thaw();
    let all: Vec<&Server> = servers.iter().collect();
    wait_released(&all, "quiet:release", Duration::from_secs(3)).await;

    // The same for a release by token, and a renewal in between does not wait either.
    grant_everywhere(&servers, "quiet:token", &token);
    let mut lease = redlock.try_acquire_with_token("quiet:token", &token).await.expect("held everywhere");
    let frozen = Frozen::new(vec![&servers[0], &servers[2]]);
    let started = Instant::now();
    lease.renew().await.expect("three nodes renew");
    let detached = lease.detach();
    assert!(redlock.release_token("quiet:token", &detached).await.expect("three answered"));
    let took = started.elapsed();
    assert!(took < Duration::from_millis(150), "renew + release waited for the silent nodes: {took:?}");
    for i in [1, 3, 4] {
        assert!(!servers[i].lock_held("quiet:token"), "{}: released", servers[i].addr());
    }
    tokio::time::sleep(NODE_TIMEOUT + Duration::from_millis(200)).await;
    frozen.thaw();
    wait_released(&all, "quiet:token", Duration::from_secs(3)).await;
}

/// `acquire` with a lost majority: `silent` nodes frozen, `blocked` nodes held by another
/// token. Checks the total time, the round cadence (counted on an answering node), and that
/// nothing of ours is left anywhere once the silent nodes thaw.
async fn lost_majority(key: &str, silent: &[usize], blocked: &[usize]) {
    let servers = Server::start_many(5);
    for &i in blocked {
        let fence: Option<u64> = servers[i].cmd(&[ACQUIRE.name, key, "blocker", "60000"]).expect("ACQUIRE");
        assert!(fence.is_some());
    }
    let redlock = redlock(&servers, config());
    connect_all(&redlock).await;
    let counted = (0..5).find(|i| !silent.contains(i) && !blocked.contains(i)).expect("an answering node");
    let before = acquire_calls(&servers[counted]);

    let frozen = Frozen::new(silent.iter().map(|&i| &servers[i]).collect());
    let started = Instant::now();
    let result = redlock.acquire(key).await;
    let took = started.elapsed();
    let rounds = acquire_calls(&servers[counted]) - before;
    frozen.thaw();
    match result {
        Err(Error::QuorumNotReached(report)) => assert!(!report.reached(), "{report}"),
        other => panic!("expected QuorumNotReached, got {other:?}"),
    }
    eprintln!("{key}: {rounds} rounds in {took:?} (max wait {MAX_WAIT:?}, node timeout {NODE_TIMEOUT:?})");
    assert!(took >= MAX_WAIT, "gave up before the maximum wait: {took:?}");
    assert!(
        took <= MAX_WAIT + NODE_TIMEOUT + SLACK,
        "the last round ended more than one node timeout after the maximum wait: {took:?}"
    );
    // One round per node timeout (plus backoff and slack): 4 here. Waiting for the silent
    // nodes' releases before each retry makes it one per two timeouts: 2.
    let expected = (MAX_WAIT.as_millis() / (NODE_TIMEOUT + Duration::from_millis(100)).as_millis()) as u64;
    assert!(rounds >= expected, "{rounds} rounds in {took:?}; expected at least {expected}");

    // Once thawed, the silent nodes read our queued ACQUIREs and, behind each, its RELEASE:
    // none holds the key for us (long before the ttl), and the blocker keeps its lease.
    let ours: Vec<&Server> = (0..5).filter(|i| !blocked.contains(i)).map(|i| &servers[i]).collect();
    wait_released(&ours, key, Duration::from_secs(3)).await;
    for &i in blocked {
        let released: i64 = servers[i].cmd(&[RELEASE.name, key, "blocker"]).expect("RELEASE");
        assert_eq!(released, 1, "{}: the blocker's lease was untouched", servers[i].addr());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_silent_and_one_busy_node_cost_one_node_timeout_per_retry() {
    lost_majority("quiet:busy", &[3, 4], &[2]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_silent_nodes_cost_one_node_timeout_per_retry() {
    lost_majority("quiet:majority", &[0, 2, 4], &[]).await;
}

/// Rounds that fail while two nodes are frozen leave releases behind on them; the nodes thaw
/// while the same acquisition (same token) keeps trying, and a later round wins. Every node
/// that confirmed that grant must still hold it afterwards: no release of an earlier round
/// may be processed after the later round's ACQUIRE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_left_behind_never_undoes_a_later_grant() {
    let servers = Server::start_many(5);
    let config = LockConfig::builder()
        .ttl(TTL)
        .node_timeout(Duration::from_millis(300))
        .backoff(Duration::from_millis(1), Duration::from_millis(10))
        .max_wait(Duration::from_secs(10))
        .max_blocking(0)
        .build()
        .expect("config");
    let redlock = redlock(&servers, config);
    connect_all(&redlock).await;
    // Thaw at different points of the retry cycle.
    for (attempt, thaw_after) in [700u64, 850, 1_000].into_iter().enumerate() {
        let key = format!("quiet:order:{attempt}");
        // The blocker's lease on node 2 ends on its own, after the silent nodes thawed.
        let blocker: Option<u64> =
            servers[2].cmd(&[ACQUIRE.name, key.as_str(), "blocker", "1500"]).expect("ACQUIRE");
        assert!(blocker.is_some());
        let frozen = Frozen::new(vec![&servers[3], &servers[4]]);
        let thaw = async {
            tokio::time::sleep(Duration::from_millis(thaw_after)).await;
            frozen.thaw();
        };
        let (lease, ()) = tokio::join!(redlock.acquire(&key), thaw);
        let lease = lease.unwrap_or_else(|e| panic!("{key}: granted once the nodes thawed: {e}"));
        // Let anything still queued on the thawed nodes be processed.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let report = lease.report().clone();
        let mut confirmed = 0;
        for (s, v) in servers.iter().zip(&report.votes) {
            if v.raise.as_ref().is_some_and(Vote::is_yes) {
                confirmed += 1;
                assert!(
                    s.lock_held(&key),
                    "{key}: {} confirmed the grant but no longer holds it: {report}",
                    s.addr()
                );
            }
        }
        assert!(confirmed >= 3, "{report}");
        assert!(lease.release().await.expect("release"));
        let all: Vec<&Server> = servers.iter().collect();
        wait_released(&all, &key, Duration::from_secs(3)).await;
    }
}

/// Runs `fencedlock ARGS` (no inherited settings), bounded; exit code and wall time.
fn run_cli(args: &[String]) -> (i32, Duration, String) {
    let mut cmd = Command::new(harness::cli_binary());
    for var in
        ["FENCEDLOCK_REDIS", "FENCEDLOCK_TOKEN", "FENCEDLOCK_LOG", "FENCEDLOCK_KEY", "FENCEDLOCK_FENCE"]
    {
        cmd.env_remove(var);
    }
    let started = Instant::now();
    let mut child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fencedlock");
    let deadline = started + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fencedlock {args:?} did not finish within 30 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = started.elapsed();
    let mut stderr = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut err, &mut stderr);
    }
    (status.code().unwrap_or_else(|| panic!("killed by a signal: {stderr}")), took, stderr)
}

#[test]
fn fencedlock_run_ends_with_its_command_not_a_node_timeout_later() {
    let cli = harness::cli_binary();
    let servers = Server::start_many(5);
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let timeout = Duration::from_secs(2);
    let args = |key: &str, wait: &str| -> Vec<String> {
        let mut args = vec!["--redis".to_string(), urls.join(","), "--timeout".into(), "2s".into()];
        args.extend(["run", "--key", key, "--ttl", "30s", "--wait", wait, "--", "true"].map(String::from));
        args
    };
    // The binary's own start-up, with every node answering.
    let (code, baseline, stderr) = run_cli(&args("quiet:cli:warm", "0s"));
    assert_eq!(code, 0, "{stderr}");

    let frozen = Frozen::new(vec![&servers[1], &servers[3]]);
    let (code, took, stderr) = run_cli(&args("quiet:cli", "0s"));
    frozen.thaw();
    assert_eq!(code, 0, "{stderr}");
    eprintln!("fencedlock run: {took:?} with two of five nodes silent, {baseline:?} with none ({cli:?})");
    assert!(
        took < baseline + timeout / 2,
        "`fencedlock run` took {took:?} with two silent nodes ({baseline:?} without): it waited for them"
    );
    let all: Vec<&Server> = servers.iter().collect();
    harness::poll("the run's lease released everywhere", Duration::from_secs(3), || {
        all.iter().all(|s| !s.lock_held("quiet:cli"))
    });

    // A lost majority (two silent nodes, a third held by someone else) with `--wait 2s`: the
    // CLI's first, non-waiting round (one node timeout), the wait, and at most one more node
    // timeout for the round under way when the wait ran out. (Waiting for the releases to
    // the silent nodes made it 3.03 s.)
    let blocker: Option<u64> =
        servers[2].cmd(&[ACQUIRE.name, "quiet:cli:busy", "blocker", "60000"]).expect("ACQUIRE");
    assert!(blocker.is_some());
    let mut args = args("quiet:cli:busy", "2s");
    args[3] = "500ms".into();
    let frozen = Frozen::new(vec![&servers[1], &servers[3]]);
    let (code, took, stderr) = run_cli(&args);
    frozen.thaw();
    eprintln!("fencedlock run --wait 2s --timeout 500ms, lost majority: exit {code} after {took:?}");
    // Busy or unavailable: with two nodes silent and one refusing, either is a fair diagnosis.
    assert!([SKIPPED, UNAVAILABLE].contains(&code), "exit {code}: {stderr}");
    assert!(took >= Duration::from_secs(2), "gave up before --wait: {took:?}");
    let node_timeout = Duration::from_millis(500);
    assert!(
        took < Duration::from_secs(2) + 2 * node_timeout + baseline + SLACK,
        "`fencedlock run --wait 2s` took {took:?} with a lost majority and a 500 ms node timeout"
    );
}

/// `fencedlock run`'s exit code when another owner holds the lock (sysexits `EX_TEMPFAIL`).
const SKIPPED: i32 = 75;
/// ... and when no majority of servers answered (`EX_UNAVAILABLE`).
const UNAVAILABLE: i32 = 69;
