//! One real `redis-server` / `valkey-server` process with the module loaded.
//!
//! Each server lives in its own temporary directory (config, log, RDB, AOF), listens on
//! 127.0.0.1 on a port below the ephemeral range, and is killed when the `Server` is dropped,
//! so no process outlives its test, even one that panics.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Mutex;
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::{FromRedisValue, ToRedisArgs};
use tempfile::TempDir;

use crate::config::{self, Directive};
use crate::error::{HarnessError, Result};
use crate::flavor::{Flavor, Release};
use crate::paths::module_path;
use crate::ports::pick_port;
use crate::process::{self, STDIO_FILE};
use crate::reply::parse_info;
use crate::tls::{Certs, ClientAuth};

/// How long a server may take to answer PING after it is spawned (by default: see
/// [`ServerBuilder::start_timeout`] for servers that load a large AOF or RDB).
pub const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `stop()` waits for a graceful exit before it kills.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// Read/write timeout of connections the harness hands out: long enough for any test
/// command, short enough that a hung server fails the test instead of hanging CI.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// Tries with a fresh port when the chosen one is taken between probe and bind.
const PORT_TRIES: usize = 8;

const CONF_FILE: &str = "server.conf";
const LOG_FILE: &str = "server.log";

/// Configures and starts a [`Server`].
///
/// ```no_run
/// let server = harness::Server::builder().arg("appendonly", "yes").start();
/// ```
#[derive(Debug, Clone)]
pub struct ServerBuilder {
    flavor: Flavor,
    directives: Vec<Directive>,
    module: ModuleChoice,
    cluster: bool,
    /// Listen for TLS too, on a port picked at each start (so a cloned builder, as a
    /// cluster's, gives every node its own).
    tls_port: bool,
    start_timeout: Duration,
    access: Access,
}

/// Who may run what on the server: everything for everyone (the harness default), or the
/// default user restricted as a managed service restricts it, beside a full-rights
/// [`ADMIN_USER`] the harness itself uses for `CONFIG` and `DEBUG`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Full,
    Managed { deny_functions: bool },
}

/// The full-rights user of a [`ServerBuilder::managed`] server: the harness's own `CONFIG`
/// and `DEBUG` calls ([`Server::config_get`], [`Server::digest`], ...) go through it, since
/// the default user may not run them there.
pub const ADMIN_USER: &str = "harness";
/// [`ADMIN_USER`]'s password (loopback-only test servers; not a secret).
const ADMIN_PASSWORD: &str = "harness-admin";

/// The command rules of a managed service's default user: everything but `MODULE`, `CONFIG`
/// and `DEBUG` (ElastiCache and MemoryDB rename or refuse exactly these; Memorystore allows
/// fewer, but `FUNCTION`, `FCALL` and `EVAL` are among what it allows).
const MANAGED_RULES: [&str; 3] = ["-module", "-config", "-debug"];

#[derive(Debug, Clone)]
enum ModuleChoice {
    Built,
    Path(PathBuf),
    None,
}

impl Default for ServerBuilder {
    fn default() -> Self {
        ServerBuilder {
            flavor: Flavor::from_env(),
            directives: Vec::new(),
            module: ModuleChoice::Built,
            cluster: false,
            tls_port: false,
            start_timeout: START_TIMEOUT,
            access: Access::Full,
        }
    }
}

impl ServerBuilder {
    /// Defaults: flavor from `FENCEDLOCK_FLAVOR`, freshly built module, fresh temp dir.
    pub fn new() -> Self {
        Self::default()
    }

    /// Run this flavor instead of the one from the environment.
    pub fn flavor(mut self, flavor: Flavor) -> Self {
        self.flavor = flavor;
        self
    }

    /// A config directive with one argument, e.g. `.arg("appendonly", "yes")` or
    /// `.arg("fencedlock.restart-grace-ms", "1500")`. Replaces a harness default of that name.
    pub fn arg(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.directives.push(Directive::new(name, [value.into()]));
        self
    }

    /// A config directive with several arguments, e.g. `.args("save", ["60", "1"])`.
    pub fn args<I, S>(mut self, name: impl Into<String>, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.directives.push(Directive::new(name, values));
        self
    }

    /// Start a plain server without the module (harness self-tests, comparisons).
    pub fn without_module(mut self) -> Self {
        self.module = ModuleChoice::None;
        self
    }

    /// As a managed service: no module, the default user may not run MODULE, CONFIG or DEBUG
    /// (`user default on nopass ~* &* +@all -module -config -debug`), so a test sees what a
    /// client sees on ElastiCache, MemoryDB and the like. `FUNCTION LOAD` and `FCALL` stay
    /// allowed (see [`ServerBuilder::deny_functions`]). The harness's own `CONFIG` / `DEBUG`
    /// helpers keep working through the full-rights [`ADMIN_USER`].
    pub fn managed(mut self) -> Self {
        self.module = ModuleChoice::None;
        if self.access == Access::Full {
            self.access = Access::Managed { deny_functions: false };
        }
        self
    }

    /// [`ServerBuilder::managed`], and the default user may not run `FUNCTION` either (no
    /// `FUNCTION LOAD`, `LIST`, ...; `FCALL` stays): a service whose administrator must load
    /// the library.
    pub fn deny_functions(mut self) -> Self {
        self = self.managed();
        self.access = Access::Managed { deny_functions: true };
        self
    }

    /// Start as a replica of `primary` (`replicaof 127.0.0.1 <port>`).
    pub fn replica_of(self, primary: &Server) -> Self {
        self.args("replicaof", ["127.0.0.1".to_string(), primary.port().to_string()])
    }

    /// Cluster mode: `cluster-enabled yes`, and a port whose bus port (+10000) is free.
    pub fn cluster_enabled(mut self) -> Self {
        self.cluster = true;
        self.arg("cluster-enabled", "yes").arg("cluster-config-file", "nodes.conf")
    }

    /// TLS on a second port (the plain port stays, for the harness's own connections),
    /// with `certs`' server certificate; [`ClientAuth::Required`] asks clients for one signed
    /// by the test CA. Reach it at [`Server::tls_url`]. Debian's Redis builds have TLS; the
    /// Valkey wheel the suite downloads does not, so TLS tests pick [`Flavor::Redis`].
    pub fn tls(mut self, certs: &Certs, auth: ClientAuth) -> Self {
        let (cert, key) = certs.server();
        let path = |p: PathBuf| p.display().to_string();
        self.tls_port = true;
        self.arg("tls-cert-file", path(cert))
            .arg("tls-key-file", path(key))
            .arg("tls-ca-cert-file", path(certs.ca()))
            .arg("tls-auth-clients", if auth == ClientAuth::Required { "yes" } else { "no" })
    }

    /// How long the server may take to answer PING when it starts and on every restart
    /// (default [`START_TIMEOUT`]); raise it for a server that will load a large AOF or RDB.
    pub fn start_timeout(mut self, limit: Duration) -> Self {
        self.start_timeout = limit;
        self
    }

    /// Start the server; panics with the server's log if it does not come up.
    pub fn start(self) -> Server {
        self.try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Start the server, retrying on another port if the chosen one was taken meanwhile.
    pub fn try_start(self) -> Result<Server> {
        let binary = self.flavor.try_server_binary()?;
        let module = match &self.module {
            ModuleChoice::Built => Some(module_path()),
            ModuleChoice::Path(p) => Some(p.clone()),
            ModuleChoice::None => None,
        };
        let dir = tempfile::Builder::new().prefix(&format!("fencedlock-{}-", self.flavor)).tempdir()?;
        let mut directives = self.directives;
        directives.extend(self.access.directives());
        if self.tls_port {
            // A cluster node's bus follows its TLS port under `tls-cluster yes`.
            directives.push(Directive::new("tls-port", [pick_port(self.cluster).to_string()]));
        }
        let mut server = Server {
            flavor: self.flavor,
            binary,
            module,
            directives,
            port: pick_port(self.cluster),
            dir,
            child: None,
            conn: Mutex::new(None),
            start_timeout: self.start_timeout,
            access: self.access,
        };
        for attempt in 1..=PORT_TRIES {
            match server.spawn_and_wait() {
                Ok(()) => return Ok(server),
                Err(_)
                    if attempt < PORT_TRIES && server.log_contents().contains("Address already in use") =>
                {
                    server.port = pick_port(self.cluster);
                }
                Err(e) => return Err(e),
            }
        }
        unreachable!("the last attempt returns")
    }
}

/// A running (or stopped, restartable) server process.
pub struct Server {
    flavor: Flavor,
    binary: PathBuf,
    module: Option<PathBuf>,
    directives: Vec<Directive>,
    port: u16,
    /// Config, log, RDB and AOF; removed when the server is dropped.
    dir: TempDir,
    child: Option<Child>,
    /// Cached connection for [`Server::query`]; dropped whenever the process changes.
    conn: Mutex<Option<redis::Connection>>,
    /// How long a start or restart may take to answer PING.
    start_timeout: Duration,
    /// Whether the default user is restricted ([`ServerBuilder::managed`]).
    access: Access,
}

impl Access {
    /// The `user` directives: none for full access (the default user as Redis makes it).
    fn directives(self) -> Vec<Directive> {
        let Access::Managed { deny_functions } = self else { return Vec::new() };
        let mut default = vec!["default", "on", "nopass", "~*", "&*", "+@all"];
        default.extend(MANAGED_RULES);
        if deny_functions {
            default.push("-function");
        }
        let admin_password = format!(">{ADMIN_PASSWORD}");
        vec![
            Directive::new("user", default),
            Directive::new("user", [ADMIN_USER, "on", admin_password.as_str(), "~*", "&*", "+@all"]),
        ]
    }
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("flavor", &self.flavor)
            .field("port", &self.port)
            .field("dir", &self.dir())
            .field("pid", &self.child.as_ref().map(Child::id))
            .finish_non_exhaustive()
    }
}

impl Server {
    /// A builder with the defaults (see [`ServerBuilder::new`]).
    pub fn builder() -> ServerBuilder {
        ServerBuilder::new()
    }

    /// Start a server with all defaults (module loaded, flavor from env).
    pub fn start() -> Server {
        ServerBuilder::new().start()
    }

    /// Start `n` independent servers with all defaults: the masters of a Redlock.
    pub fn start_many(n: usize) -> Vec<Server> {
        (0..n).map(|_| Server::start()).collect()
    }

    /// A builder for a replica of this server: same flavor and module.
    pub fn replica_builder(&self) -> ServerBuilder {
        let mut b =
            ServerBuilder::new().flavor(self.flavor).replica_of(self).start_timeout(self.start_timeout);
        b.module = match &self.module {
            Some(p) => ModuleChoice::Path(p.clone()),
            None => ModuleChoice::None,
        };
        b.access = self.access;
        b
    }

    /// Which server implementation this is.
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `rediss://127.0.0.1:TLS_PORT` of a server started with [`ServerBuilder::tls`].
    pub fn tls_url(&self) -> String {
        format!("rediss://{}", self.tls_addr())
    }

    /// `127.0.0.1:TLS_PORT` of a server started with [`ServerBuilder::tls`].
    pub fn tls_addr(&self) -> String {
        format!("127.0.0.1:{}", self.tls_port())
    }

    /// The TLS port of a server started with [`ServerBuilder::tls`]; panics for another.
    pub fn tls_port(&self) -> u16 {
        self.directives
            .iter()
            .rev()
            .find(|d| d.name == "tls-port")
            .and_then(|d| d.args.first())
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("server on port {} was not started with TLS", self.port))
    }

    /// `127.0.0.1:PORT`, as `redis-cli --cluster` wants it.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The data directory (config, log, RDB, AOF).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Whether the process is running (possibly paused).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// A `redis::Client` for this server.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap_or_else(|e| panic!("bad url {}: {e}", self.url()))
    }

    /// Whether the default user is restricted as on a managed service
    /// ([`ServerBuilder::managed`]).
    pub fn is_managed(&self) -> bool {
        self.access != Access::Full
    }

    /// `redis://` URL of a user with every right: [`ADMIN_USER`] on a managed server, the
    /// default user elsewhere.
    pub fn admin_url(&self) -> String {
        match self.access {
            Access::Full => self.url(),
            Access::Managed { .. } => {
                format!("redis://{ADMIN_USER}:{ADMIN_PASSWORD}@127.0.0.1:{}", self.port)
            }
        }
    }

    /// Run a command with every right: on the cached connection, or on a managed server on a
    /// new connection of [`ADMIN_USER`] (the harness's `CONFIG` and `DEBUG` helpers use it).
    pub fn admin_query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        if self.access == Access::Full {
            return self.query(cmd);
        }
        let client = redis::Client::open(self.admin_url())?;
        let mut conn = client.get_connection_with_timeout(Duration::from_secs(5))?;
        conn.set_read_timeout(Some(IO_TIMEOUT))?;
        conn.set_write_timeout(Some(IO_TIMEOUT))?;
        cmd.query(&mut conn)
    }

    /// [`Server::admin_query`] of a command given as arguments.
    pub fn admin_cmd<T: FromRedisValue>(&self, args: &[impl ToRedisArgs]) -> redis::RedisResult<T> {
        let mut cmd = redis::Cmd::new();
        for a in args {
            cmd.arg(a);
        }
        self.admin_query(&cmd)
    }

    /// A new blocking connection (30 s read/write timeouts so a hang fails the test).
    pub fn conn(&self) -> redis::Connection {
        self.try_conn().unwrap_or_else(|e| panic!("connect to {}: {e}", self.addr()))
    }

    fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        let conn = self.client().get_connection_with_timeout(Duration::from_secs(5))?;
        conn.set_read_timeout(Some(IO_TIMEOUT))?;
        conn.set_write_timeout(Some(IO_TIMEOUT))?;
        Ok(conn)
    }

    /// A new multiplexed async connection (needs a tokio runtime).
    pub async fn async_conn(&self) -> redis::aio::MultiplexedConnection {
        self.client()
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("async connect to {}: {e}", self.addr()))
    }

    /// Run a command on a cached connection; the server's reply (or error) is returned.
    /// A connection-level failure drops the cache so the next call reconnects.
    pub fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(self.try_conn()?);
        }
        let conn = slot.as_mut().expect("connection was just set");
        let result = cmd.query::<T>(conn);
        if let Err(e) = &result {
            if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
                *slot = None;
            }
        }
        result
    }

    /// Run a command given as arguments, e.g. `server.cmd::<i64>(&["DBSIZE"])`.
    pub fn cmd<T: FromRedisValue>(&self, args: &[impl ToRedisArgs]) -> redis::RedisResult<T> {
        let mut cmd = redis::Cmd::new();
        for a in args {
            cmd.arg(a);
        }
        self.query(&cmd)
    }

    /// `INFO <section>` parsed into `field -> value`; panics if INFO fails.
    pub fn info(&self, section: &str) -> HashMap<String, String> {
        let text: String = self
            .query(redis::cmd("INFO").arg(section))
            .unwrap_or_else(|e| panic!("INFO {section} on {}: {e}", self.addr()));
        parse_info(&text)
    }

    /// One `INFO` field, e.g. `info_field("replication", "role")`.
    pub fn info_field(&self, section: &str, field: &str) -> Option<String> {
        self.info(section).remove(field)
    }

    /// The server's own version as (major, minor): `valkey_version` on Valkey (whose
    /// `redis_version` stays at the Redis release it forked from), `redis_version` on Redis.
    /// Features differ by version within a flavor (Redis 7.4 added module ACL categories).
    pub fn version(&self) -> (u32, u32) {
        let info = self.info("server");
        let text = info
            .get("valkey_version")
            .or_else(|| info.get("redis_version"))
            .unwrap_or_else(|| panic!("no version in INFO server on {}", self.addr()));
        let mut parts = text.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    }

    /// This server's flavor and version, and with them what differs between releases
    /// (module ACL categories, `RESTORE`'s checksum): see [`Release`].
    pub fn release(&self) -> Release {
        Release { flavor: self.flavor, version: self.version() }
    }

    /// The server log (and anything it printed to stdout/stderr before opening the log).
    pub fn log_contents(&self) -> String {
        let mut out = fs::read_to_string(self.dir().join(STDIO_FILE)).unwrap_or_default();
        out.push_str(&fs::read_to_string(self.dir().join(LOG_FILE)).unwrap_or_default());
        out
    }

    /// The last `n` lines of [`Server::log_contents`].
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log_contents();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Change (or add) a config directive for the next [`Server::restart`], e.g. to restart
    /// with `fencedlock.restart-grace-ms`. Does not touch the running process.
    pub fn set_restart_arg(&mut self, name: &str, value: &str) {
        self.set_restart_args(name, [value]);
    }

    /// Like [`Server::set_restart_arg`] for a directive with several arguments, e.g.
    /// `set_restart_args("replicaof", ["127.0.0.1", "6380"])` to bring a dead primary back as
    /// a replica of the promoted one.
    pub fn set_restart_args<I, S>(&mut self, name: &str, values: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.directives.retain(|d| !d.name.eq_ignore_ascii_case(name));
        self.directives.push(Directive::new(name, values));
    }

    /// Leave the module out of the next [`Server::restart`]: a server that lost its module
    /// after a client found it there (a configuration change, a replaced host).
    pub fn set_restart_without_module(&mut self) {
        self.module = None;
    }

    /// Graceful stop: SIGTERM (the server's normal shutdown: flushes the AOF, and saves an
    /// RDB only if `save` points are configured) and wait. Panics if it does not exit.
    pub fn stop(&mut self) {
        self.drop_conn();
        let port = self.port;
        let Some(mut child) = self.child.take() else { return };
        process::signal(&child, libc::SIGCONT);
        process::signal(&child, libc::SIGTERM);
        if process::wait_timeout(&mut child, STOP_TIMEOUT).is_none() {
            process::kill_and_reap(&mut child);
            panic!(
                "server on port {port} ignored SIGTERM for {STOP_TIMEOUT:?}; killed it\n{}",
                self.log_tail(30)
            );
        }
    }

    /// Crash: SIGKILL, nothing flushed beyond what the server already wrote.
    pub fn kill9(&mut self) {
        self.drop_conn();
        if let Some(mut child) = self.child.take() {
            process::kill_and_reap(&mut child);
        }
    }

    /// Freeze the process (SIGSTOP), e.g. to simulate a GC pause or a partitioned node.
    pub fn pause(&self) {
        if let Some(child) = &self.child {
            process::signal(child, libc::SIGSTOP);
        }
    }

    /// The server process's id while it runs: for a signal sent later from another task (a
    /// resume scheduled while the test goes on).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Thaw a paused process (SIGCONT).
    pub fn resume(&self) {
        if let Some(child) = &self.child {
            process::signal(child, libc::SIGCONT);
        }
    }

    /// Start again on the same port and directory, so it loads its own RDB / AOF.
    /// A running server is stopped gracefully first.
    pub fn restart(&mut self) {
        self.stop();
        // The port may briefly be held by a previous accept socket; retry a few times.
        let mut last = None;
        for _ in 0..5 {
            match self.spawn_and_wait() {
                Ok(()) => return,
                Err(e) => {
                    let busy = self.log_contents().contains("Address already in use");
                    last = Some(e);
                    if !busy {
                        break;
                    }
                    sleep(Duration::from_millis(200));
                }
            }
        }
        panic!("restart failed: {}", last.expect("loop ran at least once"));
    }

    fn drop_conn(&self) {
        *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Write the config, spawn the process, wait for PING.
    fn spawn_and_wait(&mut self) -> Result<()> {
        self.drop_conn();
        let dir = self.dir().to_path_buf();
        let conf =
            config::render(self.port, &dir, &dir.join(LOG_FILE), self.module.as_deref(), &self.directives);
        let conf_path = dir.join(CONF_FILE);
        fs::write(&conf_path, conf)?;
        let child = process::spawn(&self.binary, &[conf_path.as_os_str()], &dir)?;
        self.child = Some(child);
        match self.wait_ready() {
            Ok(()) => Ok(()),
            Err(reason) => {
                if let Some(mut child) = self.child.take() {
                    process::kill_and_reap(&mut child);
                }
                Err(HarnessError::StartFailed {
                    port: self.port,
                    reason: format!("{} ({}): {reason}", self.binary.display(), self.flavor),
                    log: dir.join(LOG_FILE),
                    log_tail: self.log_tail(30),
                })
            }
        }
    }

    fn wait_ready(&mut self) -> std::result::Result<(), String> {
        let limit = self.start_timeout;
        let deadline = Instant::now() + limit;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("process exited with {status}"));
                }
            }
            let last_error =
                match self.try_conn().and_then(|mut c| redis::cmd("PING").query::<String>(&mut c)) {
                    Ok(_) => return Ok(()),
                    Err(e) => e.to_string(),
                };
            if Instant::now() >= deadline {
                return Err(format!("no PING answer within {limit:?} (last error: {last_error})"));
            }
            sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.drop_conn();
        if let Some(mut child) = self.child.take() {
            process::kill_and_reap(&mut child);
        }
    }
}
