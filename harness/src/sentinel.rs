//! Real Sentinels watching a harness primary, so a test sees the failover a deployment gets:
//! Sentinel's own failure detection, vote, promotion and reconfiguration of replicas (and of a
//! killed primary that comes back), not the test's `REPLICAOF NO ONE`.
//!
//! Each Sentinel is the flavor's own server binary run with `--sentinel`, on 127.0.0.1 and a
//! harness port, with its own config file in its own temp dir (Sentinel rewrites the file).
//! Every process is killed and reaped when [`Sentinels`] is dropped.

use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::process::Child;
use std::thread::sleep;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::config::quote;
use crate::error::{HarnessError, Result};
use crate::flavor::Flavor;
use crate::ports::pick_port;
use crate::process::{self, STDIO_FILE};
use crate::reply::parse_info;
use crate::server::{Server, START_TIMEOUT};
use crate::tls::Certs;

/// The name the Sentinels monitor the primary under (`sentinel monitor m …`).
pub const SENTINEL_MASTER: &str = "m";
/// How long Sentinel waits without a reply before it calls the primary down. Short so a test
/// fails over in seconds; a paused server is down after this long too.
pub const DOWN_AFTER: Duration = Duration::from_millis(1000);
/// Sentinel's failover timeout: how long a failover may take before it is abandoned, and a
/// retry after an abandoned one waits twice this.
pub const FAILOVER_TIMEOUT: Duration = Duration::from_millis(3000);
/// Bound on a whole failover as the tests wait for it: detection, vote, promotion, and room
/// for one abandoned attempt and its retry (2 × [`FAILOVER_TIMEOUT`] later).
pub const SENTINEL_FAILOVER_LIMIT: Duration = Duration::from_secs(30);
/// How long the Sentinels may take to find each other and the replicas (hello messages go
/// out every 2 s, replica lists refresh every 10 s).
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(30);
/// Sentinels in a group, and how many must agree the primary is down.
const SENTINELS: usize = 3;
const QUORUM: usize = 2;
/// Connection timeouts for the harness's own short requests to a Sentinel or a server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const PORT_TRIES: usize = 8;

const CONF_FILE: &str = "sentinel.conf";
const LOG_FILE: &str = "sentinel.log";

/// One Sentinel process.
struct Sentinel {
    /// The plaintext port, for the harness's own requests.
    port: u16,
    /// With TLS, the port clients reach it on over TLS.
    tls_port: Option<u16>,
    /// Its config (rewritten by Sentinel) and log; removed on drop.
    dir: TempDir,
    child: Option<Child>,
}

impl Sentinel {
    fn log_tail(&self, n: usize) -> String {
        let mut log = fs::read_to_string(self.dir.path().join(STDIO_FILE)).unwrap_or_default();
        log.push_str(&fs::read_to_string(self.dir.path().join(LOG_FILE)).unwrap_or_default());
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    fn conn(&self) -> redis::RedisResult<redis::Connection> {
        connect(self.port)
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            process::kill_and_reap(&mut child);
        }
    }
}

/// Three Sentinels monitoring one primary as [`SENTINEL_MASTER`], quorum 2.
///
/// ```no_run
/// let mut primary = harness::Server::builder().arg("appendonly", "yes").start();
/// let replica = primary.start_replica();
/// let sentinels = harness::Sentinels::start(&primary);
/// sentinels.wait_ready(1);
/// let old = primary.port();
/// primary.kill9();
/// let new = sentinels.wait_primary_change(old, harness::SENTINEL_FAILOVER_LIMIT);
/// assert_eq!(new, replica.port());
/// ```
pub struct Sentinels {
    nodes: Vec<Sentinel>,
}

impl std::fmt::Debug for Sentinels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sentinels").field("ports", &self.ports()).finish_non_exhaustive()
    }
}

impl Sentinels {
    /// Start three Sentinels of `primary`'s flavor monitoring it; panics with the failing
    /// Sentinel's log if one does not come up.
    pub fn start(primary: &Server) -> Sentinels {
        Self::try_start(primary.flavor(), primary.port()).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Start three Sentinels of `flavor` monitoring the primary on 127.0.0.1:`primary_port`.
    pub fn try_start(flavor: Flavor, primary_port: u16) -> Result<Sentinels> {
        Self::try_start_with(flavor, primary_port, None)
    }

    /// Three Sentinels that serve clients over TLS too (with `certs`' server certificate,
    /// client certificates not asked for) and monitor `primary` over TLS, on its TLS port
    /// (`tls-replication yes`, which the primary and its replicas need as well, so every
    /// address the Sentinels hand out is a TLS port). Reach them at [`Sentinels::tls_url`];
    /// their plaintext ports stay for the harness's own requests.
    pub fn start_tls(primary: &Server, certs: &Certs) -> Sentinels {
        Self::try_start_with(primary.flavor(), primary.tls_port(), Some(certs))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_start_with(flavor: Flavor, primary_port: u16, tls: Option<&Certs>) -> Result<Sentinels> {
        let binary = flavor.try_server_binary()?;
        let mut nodes = Vec::with_capacity(SENTINELS);
        for _ in 0..SENTINELS {
            nodes.push(start_one(&binary, flavor, primary_port, tls)?);
        }
        Ok(Sentinels { nodes })
    }

    /// The Sentinels' ports on 127.0.0.1.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// `redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/m`: the primary they monitor,
    /// as the client and the CLI name it.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.ports().iter().map(|port| format!("127.0.0.1:{port}")).collect();
        format!("redis+sentinel://{}/{SENTINEL_MASTER}", hosts.join(","))
    }

    /// `rediss+sentinel://127.0.0.1:T1,…/m` of Sentinels started with [`Sentinels::start_tls`].
    pub fn tls_url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.tls_port.expect("Sentinels started with TLS")))
            .collect();
        format!("rediss+sentinel://{}/{SENTINEL_MASTER}", hosts.join(","))
    }

    /// `SENTINEL FAILOVER m` on the first Sentinel that accepts it: a planned switchover, the
    /// primary demoted while it runs. Panics if none accepts it.
    pub fn failover(&self) {
        let accepted = self.nodes.iter().any(|node| {
            node.conn()
                .and_then(|mut conn| {
                    redis::cmd("SENTINEL").arg("FAILOVER").arg(SENTINEL_MASTER).query::<String>(&mut conn)
                })
                .is_ok()
        });
        assert!(accepted, "no Sentinel accepted SENTINEL FAILOVER\n{}", self.log_tails(20));
    }

    /// Wait until every Sentinel knows the other Sentinels and `replicas` replicas of the
    /// primary: before that a failover cannot win a vote or has no replica to promote.
    /// Panics after a bound, with the Sentinels' view and logs.
    pub fn wait_ready(&self, replicas: usize) {
        let want = format!("slaves={replicas},sentinels={SENTINELS}");
        let deadline = Instant::now() + DISCOVERY_TIMEOUT;
        loop {
            let views: Vec<String> = self.nodes.iter().map(master_line).collect();
            if views.iter().all(|v| v.contains("status=ok") && v.contains(&want)) {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "Sentinels did not discover each other and {replicas} replica(s) within \
                     {DISCOVERY_TIMEOUT:?} (want `{want}`); they report {views:?}\n{}",
                    self.log_tails(20)
                );
            }
            sleep(Duration::from_millis(100));
        }
    }

    /// The primary's port as each Sentinel answers `SENTINEL get-master-addr-by-name`
    /// (`None` for a Sentinel that does not answer).
    pub fn primary_ports(&self) -> Vec<Option<u16>> {
        self.nodes.iter().map(primary_port_of).collect()
    }

    /// Wait until a Sentinel names a primary other than `old_port` and that server reports
    /// `role:master`: Sentinel promoted a replica. Returns the new primary's port; panics after
    /// `limit` with every Sentinel's answer and log.
    pub fn wait_primary_change(&self, old_port: u16, limit: Duration) -> u16 {
        let deadline = Instant::now() + limit;
        loop {
            let answers = self.primary_ports();
            let promoted = answers.iter().flatten().copied().find(|&p| p != old_port && role(p) == "master");
            if let Some(port) = promoted {
                return port;
            }
            if Instant::now() >= deadline {
                panic!(
                    "Sentinel did not replace the primary 127.0.0.1:{old_port} within {limit:?}; \
                     the Sentinels name {answers:?}\n{}",
                    self.log_tails(40)
                );
            }
            sleep(Duration::from_millis(50));
        }
    }

    /// Wait until the server on `port` reports `role:slave` with its link up: Sentinel
    /// converted a returning old primary (or re-pointed a replica). Panics after `limit`.
    ///
    /// The panic carries the server's replication section and each Sentinel's log, so a
    /// timeout says whether Sentinel never sent `REPLICAOF` (e.g. `+tilt`) or the sync stalled.
    pub fn wait_converted_to_replica(&self, port: u16, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let info = info(port, "replication");
            let field = |name: &str| info.get(name).map(String::as_str);
            if field("role") == Some("slave") && field("master_link_status") == Some("up") {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "Sentinel did not make 127.0.0.1:{port} a replica with its link up within \
                     {limit:?}; its replication section: {info:?}\n{}",
                    self.log_tails(40)
                );
            }
            sleep(Duration::from_millis(50));
        }
    }

    /// The last `n` lines of each Sentinel's log, labelled by port.
    pub fn log_tails(&self, n: usize) -> String {
        self.nodes
            .iter()
            .map(|s| format!("--- sentinel 127.0.0.1:{} ---\n{}", s.port, s.log_tail(n)))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn start_one(binary: &Path, flavor: Flavor, primary_port: u16, tls: Option<&Certs>) -> Result<Sentinel> {
    let mut dir = tempfile::Builder::new().prefix(&format!("fencedlock-sentinel-{flavor}-")).tempdir()?;
    let mut last = None;
    for _ in 0..PORT_TRIES {
        let tls_port = tls.map(|_| pick_port(false));
        let mut node = Sentinel { port: pick_port(false), tls_port, dir, child: None };
        match spawn_and_wait(&mut node, binary, primary_port, tls) {
            Ok(()) => return Ok(node),
            Err(e) => {
                let busy = node.log_tail(30).contains("Address already in use");
                if let Some(mut child) = node.child.take() {
                    process::kill_and_reap(&mut child);
                }
                if !busy {
                    return Err(e);
                }
                last = Some(e);
                dir = tempfile::Builder::new().prefix(&format!("fencedlock-sentinel-{flavor}-")).tempdir()?;
            }
        }
    }
    Err(last.expect("every try failed with an error"))
}

/// The config of one Sentinel: written fresh, then Sentinel's to rewrite.
fn render(node: &Sentinel, primary_port: u16, tls: Option<&Certs>) -> String {
    let (port, dir) = (node.port, node.dir.path());
    let path = |name: &str| quote(&dir.join(name).to_string_lossy());
    let mut lines = vec![
        format!("port {port}"),
        "bind 127.0.0.1".to_string(),
        "daemonize no".to_string(),
        format!("dir {}", quote(&dir.to_string_lossy())),
        format!("logfile {}", path(LOG_FILE)),
        "loglevel verbose".to_string(),
        format!("sentinel monitor {SENTINEL_MASTER} 127.0.0.1 {primary_port} {QUORUM}"),
        format!("sentinel down-after-milliseconds {SENTINEL_MASTER} {}", DOWN_AFTER.as_millis()),
        format!("sentinel failover-timeout {SENTINEL_MASTER} {}", FAILOVER_TIMEOUT.as_millis()),
        // Re-point every replica at once after a promotion, not one by one.
        format!("sentinel parallel-syncs {SENTINEL_MASTER} {SENTINELS}"),
    ];
    if let (Some(certs), Some(tls_port)) = (tls, node.tls_port) {
        let file = |p: std::path::PathBuf| quote(&p.to_string_lossy());
        let (cert, key) = certs.server();
        lines.extend([
            format!("tls-port {tls_port}"),
            format!("tls-cert-file {}", file(cert)),
            format!("tls-key-file {}", file(key)),
            format!("tls-ca-cert-file {}", file(certs.ca())),
            "tls-auth-clients no".to_string(),
            "tls-replication yes".to_string(),
        ]);
    }
    lines.join("\n") + "\n"
}

fn spawn_and_wait(node: &mut Sentinel, binary: &Path, primary_port: u16, tls: Option<&Certs>) -> Result<()> {
    let dir = node.dir.path().to_path_buf();
    let conf = dir.join(CONF_FILE);
    fs::write(&conf, render(node, primary_port, tls))?;
    let child = process::spawn(binary, &[conf.as_os_str(), OsStr::new("--sentinel")], &dir)?;
    node.child = Some(child);
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(Ok(Some(status))) = node.child.as_mut().map(Child::try_wait) {
            return Err(start_failed(node, binary, format!("process exited with {status}")));
        }
        let last_error = match node.conn().and_then(|mut c| redis::cmd("PING").query::<String>(&mut c)) {
            Ok(_) => return Ok(()),
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            let why = format!("no PING answer within {START_TIMEOUT:?} (last error: {last_error})");
            return Err(start_failed(node, binary, why));
        }
        sleep(Duration::from_millis(20));
    }
}

fn start_failed(node: &Sentinel, binary: &Path, reason: String) -> HarnessError {
    HarnessError::StartFailed {
        port: node.port,
        reason: format!("{} --sentinel: {reason}", binary.display()),
        log: node.dir.path().join(LOG_FILE),
        log_tail: node.log_tail(30),
    }
}

fn connect(port: u16) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let conn = client.get_connection_with_timeout(CONNECT_TIMEOUT)?;
    conn.set_read_timeout(Some(CONNECT_TIMEOUT))?;
    conn.set_write_timeout(Some(CONNECT_TIMEOUT))?;
    Ok(conn)
}

/// `INFO section` of the server on `port` on a fresh connection (Sentinel's `CLIENT KILL
/// TYPE normal` on every node it reconfigures closes older ones); empty if it does not answer.
fn info(port: u16, section: &str) -> std::collections::HashMap<String, String> {
    connect(port)
        .and_then(|mut c| redis::cmd("INFO").arg(section).query::<String>(&mut c))
        .map(|text| parse_info(&text))
        .unwrap_or_default()
}

/// `role` from `INFO replication` on `port`, empty if the server does not answer.
fn role(port: u16) -> String {
    info(port, "replication").remove("role").unwrap_or_default()
}

/// A Sentinel's `master0:name=m,status=ok,address=…,slaves=N,sentinels=N` line from
/// `INFO sentinel`, empty if it does not answer.
fn master_line(node: &Sentinel) -> String {
    info(node.port, "sentinel").remove("master0").unwrap_or_default()
}

fn primary_port_of(node: &Sentinel) -> Option<u16> {
    let mut conn = node.conn().ok()?;
    let addr: Option<(String, String)> =
        redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(SENTINEL_MASTER).query(&mut conn).ok()?;
    addr.and_then(|(_, port)| port.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_monitors_the_primary_with_a_quorum_of_two_and_short_timeouts() {
        let node =
            Sentinel { port: 12001, tls_port: None, dir: tempfile::tempdir().expect("dir"), child: None };
        let conf = render(&node, 12000, None);
        assert!(conf.contains("port 12001\n"), "{conf}");
        assert!(conf.contains("bind 127.0.0.1\n"), "{conf}");
        assert!(conf.contains("sentinel monitor m 127.0.0.1 12000 2\n"), "{conf}");
        assert!(conf.contains("sentinel down-after-milliseconds m 1000\n"), "{conf}");
        assert!(conf.contains("sentinel failover-timeout m 3000\n"), "{conf}");
        let monitor = conf.find("sentinel monitor").expect("monitor line");
        let down = conf.find("sentinel down-after").expect("down-after line");
        assert!(monitor < down, "a master's settings must follow its monitor line: {conf}");
    }

    #[test]
    fn a_tls_sentinel_serves_tls_and_monitors_over_it() {
        let certs = Certs::generate();
        let node = Sentinel {
            port: 12001,
            tls_port: Some(12002),
            dir: tempfile::tempdir().expect("dir"),
            child: None,
        };
        let conf = render(&node, 12000, Some(&certs));
        for line in ["port 12001\n", "tls-port 12002\n", "tls-replication yes\n", "tls-auth-clients no\n"] {
            assert!(conf.contains(line), "{line:?} in {conf}");
        }
        assert!(
            conf.contains(&format!("tls-ca-cert-file {}", quote(&certs.ca().to_string_lossy()))),
            "{conf}"
        );
        let plain = render(&node, 12000, None);
        assert!(!plain.contains("tls-"), "{plain}");
    }
}
