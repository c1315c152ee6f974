//! Helpers shared by the client tests: client configs and nodes for harness servers, a
//! takeover behind the client's back, and blocking harness calls from async tests. Lock state
//! is read with the harness's own connection (`Server::lock_status`, `Server::lock_held`),
//! never through the client under test.

use std::time::Duration;

use fencedlock::{Error, Lease, LockConfig, Locker, Node};
use fencedlock_protocol::command::ACQUIRE;
use harness::Server;
use tokio::task::JoinHandle;

/// Client nodes for `servers`.
pub fn nodes(servers: &[Server]) -> Vec<Node> {
    servers.iter().map(|s| Node::new(&s.url()).expect("valid URL")).collect()
}

/// A config with the given ttl and per-node timeout (and short retry delays).
pub fn config(ttl_ms: u64, node_timeout_ms: u64) -> LockConfig {
    LockConfig::builder()
        .ttl(Duration::from_millis(ttl_ms))
        .node_timeout(Duration::from_millis(node_timeout_ms))
        .backoff(Duration::from_millis(5), Duration::from_millis(50))
        .max_wait(Duration::from_secs(5))
        .build()
        .expect("valid test config")
}

/// Takes `key` away from its holder on `server`: deletes the lock state and grants it to
/// another token, as a different client would after a takeover.
pub fn steal(server: &Server, key: &str) -> u64 {
    let _: i64 = server.cmd(&["DEL", key]).expect("DEL");
    server
        .cmd::<Option<u64>>(&[ACQUIRE.name, key, "thief", "60000"])
        .expect("ACQUIRE by the thief")
        .expect("the thief is granted the deleted key")
}

/// `key` held on `server` by a locker of its own, made with `config`: the lease the test's
/// other lockers wait behind.
pub async fn held_elsewhere(server: &Server, key: &str, config: LockConfig) -> Lease {
    let holder = Locker::open(&server.url(), config).expect("locker");
    holder.try_acquire(key).await.expect("granted")
}

/// `locker.acquire(key)` in a task of its own: a waiter for the test to hand a lease over to.
pub fn waiter(locker: &Locker, key: &'static str) -> JoinHandle<Result<Lease, Error>> {
    let locker = locker.clone();
    tokio::spawn(async move { locker.acquire(key).await })
}

/// Releases `lease` and gives the lease `waiter` is granted then, with a higher fence.
pub async fn hand_over(lease: Lease, waiter: JoinHandle<Result<Lease, Error>>) -> Lease {
    let fence = lease.fence();
    lease.release().await.expect("released");
    let next = waiter.await.expect("task").expect("granted after the release");
    assert!(next.fence() > fence, "{} after {fence}", next.fence());
    next
}

/// Runs a blocking harness call (restart, kill) without stalling the runtime's workers.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking harness call panicked")
}

/// A durable server (AOF, `appendfsync always`) restarted with a restart grace of `grace_ms`:
/// it comes back refusing new grants (`TRYAGAIN`) for that long.
pub async fn restarted_in_grace(grace_ms: &str) -> Server {
    let mut server = Server::builder().arg("appendonly", "yes").arg("appendfsync", "always").start();
    server.set_restart_arg("fencedlock.restart-grace-ms", grace_ms);
    blocking(move || {
        server.restart();
        server
    })
    .await
}

/// One numeric `INFO fencedlock` field (e.g. `fencedlock_waiters`), read by the harness.
pub fn counter(server: &Server, name: &str) -> u64 {
    server.fencedlock_counter(name)
}

/// `FENCEDLOCK.ACQUIRE`'s line of `INFO commandstats`.
#[derive(Debug, Default, Clone, Copy)]
pub struct AcquireStats {
    /// Calls the module ran.
    pub calls: u64,
    /// Calls the server refused before running them (an arity error among them).
    pub rejected: u64,
}

/// How often the server ran (and refused) `FENCEDLOCK.ACQUIRE` so far.
pub fn acquire_stats(server: &Server) -> AcquireStats {
    let info = server.info("commandstats");
    // Redis shows the module's spelling, Valkey may not: compare case-insensitively.
    let name = format!("cmdstat_{}", ACQUIRE.name);
    let Some(line) = info.iter().find_map(|(k, v)| k.eq_ignore_ascii_case(&name).then_some(v)) else {
        return AcquireStats::default();
    };
    let field = |f: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(f)?.strip_prefix('='))
            .map_or(0, |v| v.parse().unwrap_or_else(|e| panic!("{name}: {f}={v}: {e}")))
    };
    AcquireStats { calls: field("calls"), rejected: field("rejected_calls") }
}

/// Waits (bounded, checking every 5 ms) until `cond` holds; panics after `limit` naming `what`.
pub async fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "timed out after {limit:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The v1 module (before `FENCEDLOCK.ACQUIRE … BLOCK`), built from the repository's history.
pub use harness::v1_module;

/// Runs `client/examples/<name>.rs` against `server` and returns what it printed; fails the
/// test, with its output, if it exits non-zero.
pub fn run_example(name: &str, server: &Server) -> String {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["run", "--quiet", "-p", "fencedlock", "--example", name, "--"])
        .arg(server.url())
        .current_dir(harness::workspace_root())
        .output()
        .expect("run cargo");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "example {name} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// How often the server ran `command` since it started or the last `CONFIG RESETSTAT`
/// (`INFO commandstats`; a module command under its registered name, e.g. `FENCEDLOCK.RENEW`).
pub fn calls(server: &Server, command: &str) -> u64 {
    // Servers differ in the case they list a module command in.
    let name = format!("cmdstat_{command}");
    let stats = server.info("commandstats");
    let field = stats
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(&name))
        .map(|(_, v)| v.as_str())
        .unwrap_or_default();
    field
        .split(',')
        .find_map(|kv| kv.strip_prefix("calls="))
        .map_or(0, |n| n.parse().expect("a count of calls"))
}
