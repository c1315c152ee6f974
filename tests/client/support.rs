//! Helpers shared by the client tests: client configs and nodes for harness servers, a
//! takeover behind the client's back, and blocking harness calls from async tests. Lock state
//! is read with the harness's own connection (`Server::lock_status`, `Server::lock_held`),
//! never through the client under test.

use std::time::Duration;

use fencedlock::{LockConfig, Node};
use fencedlock_protocol::command::ACQUIRE;
use harness::Server;

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

/// Runs a blocking harness call (restart, kill) without stalling the runtime's workers.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking harness call panicked")
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

/// The last commit whose module predates `FENCEDLOCK.ACQUIRE … BLOCK` (v1: ACQUIRE takes
/// exactly three arguments).
const V1_COMMIT: &str = "9894500";

/// The v1 module, to test the client against a server whose module cannot wait: the file
/// named by `FENCEDLOCK_V1_MODULE`, or built once from the repository's history
/// (`git archive` of [`V1_COMMIT`], `cargo build --release --offline`) under
/// `target/v1-module/`. Panics, saying what to do, if neither works.
pub fn v1_module() -> std::path::PathBuf {
    use std::path::PathBuf;
    use std::process::{Command, Stdio};
    use std::sync::OnceLock;

    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Some(path) = std::env::var_os("FENCEDLOCK_V1_MODULE") {
                let path = PathBuf::from(path);
                assert!(path.is_file(), "FENCEDLOCK_V1_MODULE={path:?} is not a file");
                return path;
            }
            let out = harness::target_dir().join("v1-module");
            let so = out.join("target").join("release").join("libfencedlock_module.so");
            if so.is_file() {
                return so;
            }
            let src = out.join("src");
            std::fs::create_dir_all(&src).unwrap_or_else(|e| panic!("create {src:?}: {e}"));
            let how = "set FENCEDLOCK_V1_MODULE to a module built from that commit";
            let tar = out.join("v1.tar");
            let archive = Command::new("git")
                .args(["-C", &harness::workspace_root().to_string_lossy(), "archive", "-o"])
                .arg(&tar)
                .arg(V1_COMMIT)
                .status()
                .unwrap_or_else(|e| {
                    panic!("cannot run git to extract the v1 module ({V1_COMMIT}): {e}; {how}")
                });
            assert!(archive.success(), "git archive {V1_COMMIT} failed (not a git checkout?); {how}");
            let untar = Command::new("tar")
                .arg("-xf")
                .arg(&tar)
                .arg("-C")
                .arg(&src)
                .stdin(Stdio::null())
                .status()
                .unwrap_or_else(|e| panic!("cannot run tar: {e}"));
            assert!(untar.success(), "extracting {tar:?} failed; {how}");
            let _ = std::fs::remove_file(&tar);
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let build = Command::new(cargo)
                .args(["build", "--release", "--offline", "-p", "fencedlock-module", "--target-dir"])
                .arg(out.join("target"))
                .current_dir(&src)
                .output()
                .unwrap_or_else(|e| panic!("cannot run cargo: {e}"));
            assert!(
                build.status.success() && so.is_file(),
                "building the v1 module from {V1_COMMIT} failed ({how}):\n{}",
                String::from_utf8_lossy(&build.stderr)
            );
            so
        })
        .clone()
}
