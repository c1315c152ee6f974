//! Helpers shared by the `client_*` integration tests of the `fencedlock` crate: start
//! servers, read lock state straight from a server (not through the client under test),
//! and wait, boundedly, for background releases to land.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use fencedlock::{LockConfig, Node};
use harness::Server;

/// `FENCEDLOCK.STATUS key` read with the harness's own connection (not the client under
/// test): `(fence, held, pttl)`, `None` for a key without lock state.
pub fn status(server: &Server, key: &str) -> Option<(u64, bool, i64)> {
    server.lock_status(key).map(|s| (s.fence, s.held, s.pttl))
}

/// Whether `server` currently shows an unexpired lease on `key`.
pub fn held(server: &Server, key: &str) -> bool {
    status(server, key).is_some_and(|(_, held, _)| held)
}

/// Starts `n` servers with the module (flavor from the environment).
pub fn servers(n: usize) -> Vec<Server> {
    (0..n).map(|_| Server::start()).collect()
}

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

/// Waits (async, bounded) until no server in `servers` holds `key`.
pub async fn wait_released(servers: &[&Server], key: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let holding: Vec<String> = servers.iter().filter(|s| held(s, key)).map(|s| s.addr()).collect();
        if holding.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "after {limit:?} these servers still hold {key:?}: {holding:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Takes `key` away from its holder on `server`: deletes the lock state and grants it to
/// another token, as a different client would after a takeover.
pub fn steal(server: &Server, key: &str) -> u64 {
    let _: i64 = server.cmd(&["DEL", key]).expect("DEL");
    server
        .cmd::<Option<u64>>(&["FENCEDLOCK.ACQUIRE", key, "thief", "60000"])
        .expect("ACQUIRE by the thief")
        .expect("the thief is granted the deleted key")
}

/// Runs a blocking harness call (restart, kill) without stalling the runtime's workers.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking harness call panicked")
}
