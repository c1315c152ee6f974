//! One lock server: a lazily opened, reused connection and the `FENCEDLOCK.*` commands, named
//! and shaped by the protocol crate.
//!
//! A [`Node`] is either a standalone server (one `redis::aio::ConnectionManager` shared by
//! every task, which reconnects by itself after an I/O error so a restarted server is picked
//! up again; for a sentinel-monitored primary it is replaced by one to the primary the
//! sentinels name) or a Redis Cluster (a `redis::cluster_async` connection that routes every
//! command by its key and follows slots and failovers by itself). Every request
//! is bounded by the per-node timeout, connecting included, so a stopped server costs at most
//! that long. Every error is passed through [`redact::error`] here, before anything else sees
//! it, so no error can carry a lease token.
//!
//! A request that waits on the server (`FENCEDLOCK.ACQUIRE … BLOCK`) never uses that shared
//! connection: it runs on a dedicated one from the node's [`pool::Pool`] (for a cluster, a
//! cluster connection of its own, which routes by key and follows the slot like the shared
//! one), so a waiter cannot hold back renewals or anything else.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencedlock_protocol::command::{ACQUIRE, RAISE, RELEASE, RENEW, STATUS};
use fencedlock_protocol::{functions, Acquire, LockStatus, PermitReply, SemaphoreStatus};
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, FromRedisValue, RedisError};
use tokio::sync::{Mutex, OnceCell};

use crate::backend::{self, Engine, EngineChoice};
use crate::cause::{self, Cause};
use crate::config::{DEFAULT_MAX_BLOCKING, DEFAULT_NODE_TIMEOUT};
use crate::error::Error;
use crate::pool::{self, Pool};
use crate::quorum::Vote;
use crate::redact;
use crate::replicas::Confirm;
use crate::sentinel::{self, Primary, SentinelUrl};
use crate::tls::{self, Tls};
use crate::token::Token;
use crate::wake;

/// A lock server (or a Redis Cluster) the client talks to.
///
/// Creating a node does not connect: the connection is opened by the first request and kept,
/// so a Redlock can be built while some masters are down.
pub struct Node {
    name: String,
    transport: Transport,
    timeout: Duration,
    /// Dedicated connections for requests that wait on the server.
    pool: Pool<Dedicated>,
    /// Which engine to use, and the one found on the server by the first request.
    choice: EngineChoice,
    engine: Arc<OnceCell<Engine>>,
}

enum Transport {
    Standalone { target: Target, slot: Arc<Mutex<Slot<ConnectionManager>>> },
    Cluster { target: Box<ClusterTarget>, slot: Arc<Mutex<Slot<ClusterConnection>>> },
}

/// A cluster's client, and for `rediss://` seeds a standalone client of the first seed.
///
/// The cluster client reports a refused TLS handshake only as text inside an I/O error,
/// which would read as an outage; one standalone connect to a seed recovers the typed
/// error, so a cluster that does not trust us (or that we do not trust) is a configuration
/// error as a single server is.
#[derive(Clone)]
struct ClusterTarget {
    client: redis::cluster::ClusterClient,
    tls_seed: Option<redis::Client>,
}

impl ClusterTarget {
    /// A cluster connection within `timeout`; a failure that a seed's handshake explains is
    /// that handshake's error.
    async fn connect(&self, timeout: Duration) -> Result<ClusterConnection, RedisError> {
        let err = match bounded(timeout, self.client.get_async_connection()).await {
            Ok(conn) => return Ok(conn),
            Err(err) => err,
        };
        if let (Some(seed), true) = (&self.tls_seed, err.is_io_error()) {
            let config = AsyncConnectionConfig::new().set_connection_timeout(Some(timeout));
            if let Err(probe) =
                bounded(timeout, seed.get_multiplexed_async_connection_with_config(&config)).await
            {
                let probe = tls::classify(probe);
                if probe.kind() == redis::ErrorKind::InvalidClientConfig {
                    return Err(probe);
                }
            }
        }
        Err(err)
    }
}

/// Where a standalone node's connections go: a fixed address, or whichever server the
/// sentinels name as primary at the time of each connect.
#[derive(Clone)]
enum Target {
    Fixed(Box<redis::Client>),
    Sentinel(Primary),
}

impl Target {
    /// A client for the server to connect to now.
    async fn client(&self) -> Result<redis::Client, RedisError> {
        match self {
            Target::Fixed(client) => Ok((**client).clone()),
            Target::Sentinel(primary) => primary.client().await,
        }
    }
}

/// The cached connection and a generation number, so a task that saw an old sentinel-named
/// primary fail does not throw away the connection to the new one another task just opened.
struct Slot<C> {
    conn: Option<C>,
    generation: u64,
}

impl<C> Slot<C> {
    fn new() -> Self {
        Slot { conn: None, generation: 0 }
    }
}

enum Conn {
    Standalone(ConnectionManager, u64),
    Cluster(ClusterConnection),
}

/// A connection that carries one waiting request at a time: closed (dropped) unless the
/// server answered, so a cancelled or timed-out waiter leaves the server's queue.
pub(crate) enum Dedicated {
    Standalone(MultiplexedConnection),
    Cluster(ClusterConnection),
}

/// What an ACQUIRE came back with.
#[derive(Debug)]
pub(crate) enum Answer {
    /// Granted with this fence; with a confirmation asked for, how many replicas acknowledged
    /// the grant (or why the `WAIT` got no count).
    Granted { fence: u64, acked: Option<Result<usize, Failure>> },
    /// Nil: another token holds the lease (or, waiting, still held it at the deadline), or a
    /// waiting request found no free connection of the pool by the deadline.
    Nil,
    /// This node cannot wait: waiting is turned off, or its module is older than `BLOCK`
    /// (then it refused the request and nothing changed).
    Unsupported,
}

/// Why a single request to a node did not produce a reply.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    TimedOut,
    Redis(RedisError),
}

impl Failure {
    pub(crate) fn into_vote(self) -> Vote {
        match self {
            Failure::TimedOut => Vote::TimedOut,
            Failure::Redis(error) => Vote::Failed { error },
        }
    }
}

impl Node {
    /// A standalone server, e.g. `redis://127.0.0.1:6379`, `rediss://…` for TLS trusting the
    /// system's certificate authorities, or the primary a group of sentinels names,
    /// `redis+sentinel://host:26379,host:26379/service_name` (see the crate docs, *Deployments*).
    pub fn new(url: &str) -> Result<Node, Error> {
        Node::with_tls(url, &Tls::new())
    }

    /// [`Node::new`] with `tls`'s authority and client certificate; the URL must be
    /// `rediss://` or `rediss+sentinel://` when `tls` sets either ([`Error::Config`] otherwise).
    pub fn with_tls(url: &str, tls: &Tls) -> Result<Node, Error> {
        let (name, target) = if sentinel::is_sentinel_url(url) {
            let url = SentinelUrl::parse(url)?;
            (url.name(), Target::Sentinel(Primary::new(&url, tls)?))
        } else {
            tls.check_url(url)?;
            let client = match tls.is_configured() {
                true => redis::Client::build_with_tls(url, tls.certificates()),
                false => redis::Client::open(url),
            }
            .map_err(|e| Error::Config(format!("bad server URL {url:?}: {e}")))?;
            (client.get_connection_info().addr().to_string(), Target::Fixed(Box::new(client)))
        };
        Ok(Node {
            name,
            transport: Transport::Standalone { target, slot: Arc::new(Mutex::new(Slot::new())) },
            timeout: DEFAULT_NODE_TIMEOUT,
            pool: Pool::new(DEFAULT_MAX_BLOCKING),
            choice: EngineChoice::Auto,
            engine: Arc::new(OnceCell::new()),
        })
    }

    /// A Redis Cluster reached through any of `seeds`; commands are routed by key, and the
    /// cluster connection follows slot moves and failovers by itself.
    pub fn cluster<S: AsRef<str>>(seeds: &[S]) -> Result<Node, Error> {
        Node::cluster_with_tls(seeds, &Tls::new())
    }

    /// [`Node::cluster`] over TLS with `tls` (`rediss://` seeds, as for [`Node::with_tls`]).
    pub fn cluster_with_tls<S: AsRef<str>>(seeds: &[S], tls: &Tls) -> Result<Node, Error> {
        if seeds.is_empty() {
            return Err(Error::Config("a cluster needs at least one seed URL".into()));
        }
        let urls: Vec<&str> = seeds.iter().map(AsRef::as_ref).collect();
        for url in &urls {
            tls.check_url(url)?;
        }
        let mut builder = redis::cluster::ClusterClient::builder(urls.clone());
        if tls.is_configured() {
            builder = builder.certs(tls.certificates());
        }
        let client = builder.build().map_err(|e| Error::Config(format!("bad cluster URLs {urls:?}: {e}")))?;
        let tls_seed = match urls[0] {
            seed if !tls::is_tls_url(seed) => None,
            seed if tls.is_configured() => redis::Client::build_with_tls(seed, tls.certificates()).ok(),
            seed => redis::Client::open(seed).ok(),
        };
        Ok(Node {
            name: format!("cluster({})", urls.join(",")),
            transport: Transport::Cluster {
                target: Box::new(ClusterTarget { client, tls_seed }),
                slot: Arc::new(Mutex::new(Slot::new())),
            },
            timeout: DEFAULT_NODE_TIMEOUT,
            pool: Pool::new(DEFAULT_MAX_BLOCKING),
            choice: EngineChoice::Auto,
            engine: Arc::new(OnceCell::new()),
        })
    }

    /// The same node with another per-node timeout (lockers apply their configured one).
    pub fn with_timeout(mut self, timeout: Duration) -> Node {
        self.timeout = timeout;
        self
    }

    /// The same node allowing `limit` requests that wait on the server at once (each on a
    /// connection of its own; `0`: none). Lockers apply their configured
    /// [`max_blocking`](crate::LockConfigBuilder::max_blocking).
    pub(crate) fn with_max_blocking(mut self, limit: usize) -> Node {
        self.pool = Pool::new(limit);
        self
    }

    /// The same node with `choice` of engine (lockers apply their configured
    /// [`engine`](crate::LockConfigBuilder::engine)).
    pub(crate) fn with_engine(mut self, choice: EngineChoice) -> Node {
        self.choice = choice;
        self
    }

    /// Whether a request should wait on this node rather than poll it (see [`Pool::may_block`]).
    /// On the Functions engine it waits in the client, woken by releases (see the `wake`
    /// module), on a pooled connection all the same.
    pub(crate) fn may_block(&self) -> bool {
        self.pool.may_block()
    }

    /// The engine this server serves leases with, once a request has found it out (`None`
    /// before that).
    pub fn engine(&self) -> Option<Engine> {
        self.engine.get().copied()
    }

    /// The engine this server serves leases with, asking the server if no request has yet
    /// (and loading the Functions library where the module is missing and the library is
    /// missing or older than this client's).
    pub async fn detect_engine(&self) -> Result<Engine, Error> {
        self.engine_now().await.map_err(|f| self.error("engine detection", f))
    }

    async fn engine_now(&self) -> Result<Engine, Failure> {
        self.engine.get_or_try_init(|| self.detect()).await.copied()
    }

    /// The module where `COMMAND INFO` knows its `ACQUIRE` (or where a server that hides
    /// `COMMAND` has no library loaded), else the Functions library, made current, else (the
    /// server denies `FUNCTION LOAD`) the library's script.
    async fn detect(&self) -> Result<Engine, Failure> {
        let module = match self.choice {
            EngineChoice::Only(Engine::Module) => return Ok(Engine::Module),
            EngineChoice::Only(Engine::Script) => {
                self.load_script().await.map_err(|refusal| self.no_engine(refusal))?;
                return Ok(Engine::Script);
            }
            EngineChoice::Only(Engine::Functions) => false,
            EngineChoice::Auto => {
                let mut info = redis::cmd("COMMAND");
                info.arg("INFO").arg(ACQUIRE.name);
                match self.query::<Vec<redis::Value>>(&info, None).await {
                    Ok(entries) => entries.iter().any(|entry| !matches!(entry, redis::Value::Nil)),
                    Err(Failure::Redis(e)) if cause::answered(&e) => self.library_version().await?.is_none(),
                    Err(failure) => return Err(failure),
                }
            }
        };
        if module {
            return Ok(Engine::Module);
        }
        let engine = match self.load_library().await {
            Ok(()) => Engine::Functions,
            Err(Failure::Redis(e)) if cause::answered(&e) && self.choice == EngineChoice::Auto => {
                tracing::debug!(node = %self.name, refusal = %e, "the server refused the Functions library; trying it as a script");
                self.load_script().await.map_err(|refusal| self.no_engine(refusal))?;
                Engine::Script
            }
            Err(refusal) => return Err(self.no_engine(refusal)),
        };
        tracing::info!(node = %self.name, %engine, "no fencedlock module on this server: using the Functions library");
        Ok(engine)
    }

    /// `refusal` of the last engine tried, as the error of a server without any engine (one
    /// that answered; an unanswered request stays what it was).
    fn no_engine(&self, refusal: Failure) -> Failure {
        match refusal {
            Failure::Redis(e) if cause::answered(&e) => Failure::Redis(no_engine(&e)),
            failure => failure,
        }
    }

    /// `SCRIPT LOAD` of the library's script (the Script engine).
    async fn load_script(&self) -> Result<(), Failure> {
        self.query::<String>(&backend::script_load(), None).await.map(drop)
    }

    /// The version of the Functions library the server has, `None` if it has none.
    async fn library_version(&self) -> Result<Option<u64>, Failure> {
        let mut version = redis::cmd("FCALL_RO");
        version.arg(functions::VERSION_FUNCTION).arg(0);
        match self.query::<u64>(&version, None).await {
            Ok(version) => Ok(Some(version)),
            Err(Failure::Redis(e)) if cause::answered(&e) => Ok(None),
            Err(failure) => Err(failure),
        }
    }

    /// Loads this client's library unless the server has it or a newer one. A library of
    /// this version whose code differs (changed without a version raise) is replaced too.
    async fn load_library(&self) -> Result<(), Failure> {
        match self.library_version().await? {
            Some(v) if v > functions::VERSION => return Ok(()),
            Some(v) if v == functions::VERSION && !self.library_differs().await? => return Ok(()),
            _ => {}
        }
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg("REPLACE").arg(functions::LIBRARY);
        self.query::<redis::Value>(&load, None).await.map(drop)
    }

    /// Whether the server's library's code is other than this client's (`FUNCTION LIST …
    /// WITHCODE`); `false` when the server will not say (an ACL that denies `FUNCTION LIST`).
    async fn library_differs(&self) -> Result<bool, Failure> {
        let mut list = redis::cmd("FUNCTION");
        list.arg("LIST").arg("LIBRARYNAME").arg(functions::NAME).arg("WITHCODE");
        match self.query::<redis::Value>(&list, None).await {
            Ok(libraries) => Ok(backend::library_code(&libraries) != Some(functions::LIBRARY.as_bytes())),
            Err(Failure::Redis(e)) if cause::answered(&e) => Ok(false),
            Err(failure) => Err(failure),
        }
    }

    /// The node's pool of waiting connections, for what Redlock remembers about it.
    pub(crate) fn pool(&self) -> &Pool<Dedicated> {
        &self.pool
    }

    /// Whether this is a Redis Cluster (whose connection routes `WAIT` to every primary).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.transport, Transport::Cluster { .. })
    }

    /// The node's address, as used in reports and errors.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The per-node timeout applied to every request.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `FENCEDLOCK.STATUS key`: the key's fence and whether it is held; `None` for a key
    /// without lock state. Never reveals the token. A reply that breaks the contract's shape
    /// is [`Error::BadReply`]; a semaphore key (several holders, which a [`LockStatus`] cannot
    /// show) is [`Error::Semaphore`]: read it with [`Node::semaphore_status`].
    pub async fn status(&self, key: &str) -> Result<Option<LockStatus>, Error> {
        match self.any_status(key).await? {
            None => Ok(None),
            Some(Status::Lock(status)) => Ok(Some(status)),
            Some(Status::Semaphore(status)) => Err(Error::Semaphore {
                node: self.name.clone(),
                key: key.to_owned(),
                permits: status.permits,
            }),
        }
    }

    /// `FENCEDLOCK.STATUS key` for a key of either kind: a semaphore's permits and holders
    /// (each holder's fence, time left and label; never a token), a mutex key shown as a
    /// semaphore of one permit; `None` for a key without lock state.
    pub async fn semaphore_status(&self, key: &str) -> Result<Option<SemaphoreStatus>, Error> {
        Ok(self.any_status(key).await?.map(|status| match status {
            Status::Lock(status) => SemaphoreStatus::from(status),
            Status::Semaphore(status) => status,
        }))
    }

    async fn any_status(&self, key: &str) -> Result<Option<Status>, Error> {
        Error::check_key(key)?;
        let engine = self.engine_now().await.map_err(|f| self.error("STATUS", f))?;
        let cmd = engine.command(&STATUS, key.as_bytes(), |_| {});
        let reply: Option<StatusReply> = self.query(&cmd, None).await.map_err(|f| self.error("STATUS", f))?;
        self.decode_status(reply)
    }

    fn decode_status(&self, reply: Option<StatusReply>) -> Result<Option<Status>, Error> {
        reply
            .map(|reply| match reply {
                StatusReply::Lock(numbers, label) => LockStatus::decode(numbers, label).map(Status::Lock),
                StatusReply::Semaphore(head, holders) => {
                    SemaphoreStatus::decode(head, holders).map(Status::Semaphore)
                }
            })
            .transpose()
            .map_err(|source| Error::BadReply { node: self.name.clone(), source })
    }

    /// `FENCEDLOCK.ACQUIRE`, the one way every lease is asked for.
    ///
    /// - No `until`, no `confirm`: one request on the shared connection.
    /// - `until`: the request waits on the server (`BLOCK`, the time left until then, set at
    ///   each send) on a dedicated connection from the pool, the time spent waiting for a free
    ///   connection included; [`Answer::Unsupported`] if this node cannot wait. The reply may
    ///   take the whole wait, so it is bounded by the wait plus the per-node timeout.
    /// - `confirm`: the ACQUIRE and, after a grant, `WAIT replicas timeout` on the same
    ///   dedicated connection (see the `confirm` module for why it must be that one); without
    ///   `until` the pool's connection is waited for up to one node timeout.
    ///
    /// Cancel-safe in the sense the server needs: dropping the future drops a dedicated
    /// connection, which closes it, and the server takes the waiter out of its queue. The
    /// server may have granted just before it saw the close, so the caller must release on
    /// cancellation (the lease module's claim does). A stale pooled connection (closed by the
    /// server while idle) is replaced once; the same token makes the repeat harmless (ACQUIRE
    /// is idempotent).
    pub(crate) async fn acquire(
        &self,
        request: Acquire<'_>,
        until: Option<Instant>,
        confirm: Option<&Confirm>,
    ) -> Result<Answer, Failure> {
        let engine = self.engine_now().await?;
        match (until, confirm) {
            (None, None) => {
                let fence: Option<u64> = self.query(&command(engine, &request), Some(request.token)).await?;
                Ok(fence.map_or(Answer::Nil, |fence| Answer::Granted { fence, acked: None }))
            }
            (Some(_), _) if !self.may_block() => Ok(Answer::Unsupported),
            (until, confirm) => {
                let checkout_until = until.unwrap_or_else(|| Instant::now() + self.timeout);
                self.acquire_dedicated(engine, request, until, checkout_until, confirm).await
            }
        }
    }

    /// `request` on a connection of the pool (with `BLOCK` until `block`, if given), then
    /// `confirm`'s WAIT on the same connection after a grant. A connection is given back only
    /// when every request on it was answered: one dropped with a request in flight is closed,
    /// so the server forgets a waiter and a WAIT alike.
    async fn acquire_dedicated(
        &self,
        engine: Engine,
        request: Acquire<'_>,
        block: Option<Instant>,
        checkout_until: Instant,
        confirm: Option<&Confirm>,
    ) -> Result<Answer, Failure> {
        let Some(_checkout) = self.pool.check_out(checkout_until).await else {
            // Waiting for the server: nothing granted by the deadline. Not waiting: the node's
            // waiting connections are all busy, which the caller sees as a slow node.
            return if block.is_some() { Ok(Answer::Nil) } else { Err(Failure::TimedOut) };
        };
        let mut idle = self.pool.take_idle();
        loop {
            let reused = idle.is_some();
            let mut conn = match idle.take() {
                Some(conn) => conn,
                None => self.dedicated().await.map_err(|e| self.failure(e, Some(request.token)))?,
            };
            let reply = match (engine, block) {
                (engine, Some(until)) if !engine.blocks() => {
                    self.woken(engine, &mut conn, request, until).await
                }
                _ => {
                    let block_ms =
                        block.map(|until| pool::block_ms(until.saturating_duration_since(Instant::now())));
                    let cmd = command(engine, &Acquire { block_ms, ..request });
                    let answer = block_ms
                        .map_or(self.timeout, |ms| Duration::from_millis(ms).saturating_add(self.timeout));
                    tokio::time::timeout(answer, conn.query(&cmd)).await.ok()
                }
            };
            // No answer in time: dropping the connection closes it, so the server forgets the
            // waiter.
            let Some(reply) = reply else { return Err(Failure::TimedOut) };
            match reply {
                Ok(Some(fence)) => {
                    if block.is_some() {
                        self.pool.mark_supported();
                    }
                    let acked = match confirm {
                        Some(confirm) => Some(self.wait_replicas(&mut conn, confirm).await),
                        None => None,
                    };
                    // A WAIT without an answer leaves the connection out of step (or broken):
                    // close it.
                    let in_step = match &acked {
                        None | Some(Ok(_)) => true,
                        Some(Err(Failure::Redis(e))) => cause::answered(e),
                        Some(Err(Failure::TimedOut)) => false,
                    };
                    if in_step {
                        self.pool.give_back(conn);
                    }
                    return Ok(Answer::Granted { fence, acked });
                }
                Ok(None) => {
                    if block.is_some() {
                        self.pool.mark_supported();
                    }
                    self.pool.give_back(conn);
                    return Ok(Answer::Nil);
                }
                Err(e) if cause::answered(&e) => {
                    // The server answered: the connection is in step and no waiter is queued
                    // (but one to a demoted primary is of no more use).
                    if !self.is_demoted(&e) {
                        self.pool.give_back(conn);
                    }
                    if block.is_some() && pool::lacks_block(&e) {
                        self.pool.mark_unsupported(&self.name);
                        return Ok(Answer::Unsupported);
                    }
                    return Err(Failure::Redis(redact::error(e, Some(request.token))));
                }
                Err(e) if reused && cause::breaks_connection(&e) => {
                    tracing::debug!(node = %self.name, "idle waiting connection was closed; opening another");
                }
                Err(e) => return Err(self.failure(e, Some(request.token))),
            }
        }
    }

    /// Waiting for `request` until `until` on an engine that cannot block (the Functions
    /// library, as a library or as a script; see the `wake` module):
    /// attempts on `conn`, each refused one followed by a `BLPOP` on the key's wake-up list
    /// for as long as `STATUS` shows the holders' leases to last. `None`: a request got no
    /// answer within its bound.
    async fn woken(
        &self,
        engine: Engine,
        conn: &mut Dedicated,
        request: Acquire<'_>,
        until: Instant,
    ) -> Option<Result<Option<u64>, RedisError>> {
        let request = Acquire { block_ms: None, ..request };
        // The first attempt and the one after a wake-up: most are granted.
        let attempt = command(engine, &request);
        // The attempt before a nap names the wake-up list, so the releases until the leases
        // that refused it end push a wake-up; it follows the STATUS the nap is timed by, so a
        // lease renewed in between cannot outlast what the refusal asked for.
        let registering = engine.waiting_acquire(request.key, |cmd| arguments(&request, cmd));
        let status = engine.command(&STATUS, request.key, |_| {});
        let mut reply = self.bounded(conn, &attempt).await?;
        loop {
            if !matches!(reply, Ok(None)) {
                return Some(reply);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Some(Ok(None));
            }
            let held_for = match self
                .bounded::<Option<StatusReply>>(conn, &status)
                .await?
                .map(|r| self.decode_status(r))
            {
                Ok(Ok(status)) => status.map_or(Duration::ZERO, |status| status.held_for()),
                Ok(Err(_broken)) => Duration::ZERO,
                Err(e) => return Some(Err(e)),
            };
            reply = self.bounded(conn, &registering).await?;
            if !matches!(reply, Ok(None)) {
                return Some(reply);
            }
            let nap = wake::nap(held_for, left);
            let blpop = wake::blpop(request.key, nap);
            let woken = conn.query::<redis::Value>(&blpop);
            if let Err(e) = tokio::time::timeout(nap.saturating_add(self.timeout), woken).await.ok()? {
                return Some(Err(e));
            }
            reply = self.bounded(conn, &attempt).await?;
        }
    }

    /// `cmd` on `conn` within the node timeout; `None` without an answer by then.
    async fn bounded<T: FromRedisValue>(
        &self,
        conn: &mut Dedicated,
        cmd: &Cmd,
    ) -> Option<Result<T, RedisError>> {
        tokio::time::timeout(self.timeout, conn.query(cmd)).await.ok()
    }

    /// `confirm`'s WAIT on `conn`, which just carried a grant: how many replicas acknowledged
    /// it, bounded by the confirm timeout plus the per-node timeout.
    async fn wait_replicas(&self, conn: &mut Dedicated, confirm: &Confirm) -> Result<usize, Failure> {
        let bound = confirm.timeout().saturating_add(self.timeout);
        match tokio::time::timeout(bound, conn.query::<usize>(&confirm.command())).await {
            Ok(Ok(acked)) => Ok(acked),
            Ok(Err(e)) => Err(self.failure(e, None)),
            Err(_elapsed) => Err(Failure::TimedOut),
        }
    }

    /// `PING` on the shared connection: whether the node answers within the timeout. A
    /// request waiting on the server says nothing about its liveness until it is answered;
    /// Redlock watches the node it waits on with this.
    pub(crate) async fn ping(&self) -> Result<(), Failure> {
        self.query::<String>(&redis::cmd("PING"), None).await.map(drop)
    }

    /// `FENCEDLOCK.RENEW`: whether we still held the lease (it now runs `ttl_ms` from now).
    pub(crate) async fn renew(&self, key: &str, token: &Token, ttl_ms: u64) -> Result<bool, Failure> {
        let cmd = self.engine_now().await?.command(&RENEW, key.as_bytes(), |cmd| {
            cmd.arg(token.as_bytes()).arg(ttl_ms);
        });
        self.query::<i64>(&cmd, Some(token.as_bytes())).await.map(|n| n == 1)
    }

    /// `FENCEDLOCK.RELEASE`: whether we held the lease and it ended now.
    pub(crate) async fn release(&self, key: &str, token: &Token) -> Result<bool, Failure> {
        let cmd = self.engine_now().await?.command(&RELEASE, key.as_bytes(), |cmd| {
            cmd.arg(token.as_bytes());
        });
        self.query::<i64>(&cmd, Some(token.as_bytes())).await.map(|n| n == 1)
    }

    /// `FENCEDLOCK.RAISE`: the key's fence after raising it to at least `fence`, or `None`
    /// when our token no longer holds the lease there.
    pub(crate) async fn raise(&self, key: &str, token: &Token, fence: u64) -> Result<Option<u64>, Failure> {
        let cmd = self.engine_now().await?.command(&RAISE, key.as_bytes(), |cmd| {
            cmd.arg(token.as_bytes()).arg(fence);
        });
        self.query(&cmd, Some(token.as_bytes())).await
    }

    /// Any other command on the shared connection (routed by its key on a cluster), within the
    /// per-node timeout, its failure named after `operation`. For the requests around the
    /// leases (an election's journal), never for a lease's own commands.
    pub(crate) async fn call<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        operation: &'static str,
    ) -> Result<T, Error> {
        self.query(cmd, None).await.map_err(|f| self.error(operation, f))
    }

    /// `cmd` on every server this node stands for: the server itself, or each primary of a
    /// cluster. Each one's reply by its address (a primary's error reply as
    /// `Value::ServerError`, to be told apart by the caller), for commands with no key whose
    /// answer is per server (`SCAN`).
    pub(crate) async fn on_every_primary(
        &self,
        cmd: &Cmd,
        operation: &'static str,
    ) -> Result<Vec<(String, redis::Value)>, Error> {
        use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
        match &self.transport {
            Transport::Standalone { .. } => Ok(vec![(self.name.clone(), self.call(cmd, operation).await?)]),
            Transport::Cluster { .. } => {
                let every = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                match self.routed(cmd, every).await.map_err(|f| self.error(operation, f))? {
                    redis::Value::Map(replies) => Ok(replies
                        .into_iter()
                        .map(|(address, reply)| {
                            (String::from_redis_value(address).unwrap_or_default(), reply)
                        })
                        .collect()),
                    other => Err(Error::Server {
                        node: self.name.clone(),
                        source: redis::make_extension_error(
                            "BADREPLY".to_owned(),
                            Some(format!("expected a reply per primary, got {other:?}")),
                        ),
                    }),
                }
            }
        }
    }

    /// `cmd` on the one server at `address`, as [`Node::on_every_primary`] named it.
    pub(crate) async fn on_server(
        &self,
        address: &str,
        cmd: &Cmd,
        operation: &'static str,
    ) -> Result<redis::Value, Error> {
        use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
        match &self.transport {
            Transport::Standalone { .. } => self.call(cmd, operation).await,
            Transport::Cluster { .. } => {
                let (host, port) = address
                    .rsplit_once(':')
                    .and_then(|(host, port)| Some((host.to_owned(), port.parse().ok()?)))
                    .ok_or_else(|| Error::Config(format!("not a cluster node's address: {address:?}")))?;
                let one = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
                let reply = self.routed(cmd, one).await.map_err(|f| self.error(operation, f))?;
                Ok(reply)
            }
        }
    }

    /// `cmd` sent by the cluster connection to `routing`'s nodes, within the per-node timeout.
    async fn routed(
        &self,
        cmd: &Cmd,
        routing: redis::cluster_routing::RoutingInfo,
    ) -> Result<redis::Value, Failure> {
        let request = async {
            match self.connection().await? {
                Conn::Cluster(mut conn) => conn.route_command(cmd.clone(), routing).await,
                Conn::Standalone(mut conn, _) => cmd.query_async(&mut conn).await,
            }
        };
        match tokio::time::timeout(self.timeout, request).await {
            Ok(result) => result.map_err(|e| self.failure(e, None)),
            Err(_elapsed) => Err(Failure::TimedOut),
        }
    }

    /// Turns a failed request into the crate error, naming this node.
    pub(crate) fn error(&self, operation: &'static str, failure: Failure) -> Error {
        match failure {
            Failure::TimedOut => Error::Timeout { node: self.name.clone(), operation, after: self.timeout },
            Failure::Redis(source) => Error::Server { node: self.name.clone(), source },
        }
    }

    /// Sends one command and parses the reply, all within the per-node timeout. An error
    /// comes back without echoed arguments and without `secret` (the token the command carries).
    async fn query<T: FromRedisValue>(&self, cmd: &Cmd, secret: Option<&[u8]>) -> Result<T, Failure> {
        match tokio::time::timeout(self.timeout, self.query_unbounded(cmd)).await {
            Ok(result) => result.map_err(|e| self.failure(e, secret)),
            Err(_elapsed) => {
                // A silent primary may have been replaced: ask the sentinels on the next request.
                if self.follows_primary() {
                    self.drop_connection();
                }
                Err(Failure::TimedOut)
            }
        }
    }

    /// Whether this node asks sentinels for its server, so a server that stopped being the
    /// primary (`READONLY`) or stopped answering is worth leaving for the one they name.
    fn follows_primary(&self) -> bool {
        matches!(&self.transport, Transport::Standalone { target: Target::Sentinel(_), .. })
    }

    /// Whether `e` says this node's server is no longer the primary the sentinels name.
    fn is_demoted(&self, e: &RedisError) -> bool {
        self.follows_primary() && Cause::of(e) == Cause::ReadOnly
    }

    /// A request's error as a [`Failure`]: the connect timeout inside `redis` (which fires at
    /// the same moment as ours) is a timeout; anything else is redacted.
    fn failure(&self, e: RedisError, secret: Option<&[u8]>) -> Failure {
        let e = tls::classify(e);
        if e.is_timeout() {
            Failure::TimedOut
        } else {
            Failure::Redis(redact::error(e, secret))
        }
    }

    /// A new connection for one waiting request: no response timeout of its own (the caller
    /// bounds the wait), the connect bounded by the per-node timeout.
    async fn dedicated(&self) -> Result<Dedicated, RedisError> {
        match &self.transport {
            Transport::Standalone { target, .. } => {
                let conn = bounded(self.timeout, connect(target, self.timeout)).await?;
                Ok(Dedicated::Standalone(conn))
            }
            Transport::Cluster { target, .. } => Ok(Dedicated::Cluster(target.connect(self.timeout).await?)),
        }
    }

    /// One command on the shared connection. A request that finds the cached connection
    /// broken (typically: the server restarted since the last request) is sent once more on a
    /// fresh one. Every command is safe to repeat for its token (ACQUIRE re-enters, RENEW and
    /// RAISE are idempotent); only a RELEASE whose first copy was processed before the
    /// connection broke answers 0 the second time.
    ///
    /// A Script engine request that finds the server's script cache without the script (a
    /// restart, a failover) loads it and is sent once more.
    async fn query_unbounded<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, RedisError> {
        match self.query_connected(cmd).await {
            Err(e) if backend::lacks_script(&e) => {
                self.query_connected::<String>(&backend::script_load()).await?;
                self.query_connected(cmd).await
            }
            result => result,
        }
    }

    async fn query_connected<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, RedisError> {
        let mut retried = false;
        loop {
            match self.connection().await? {
                Conn::Standalone(mut conn, generation) => {
                    let result = cmd.query_async(&mut conn).await;
                    if let Err(e) = &result {
                        // A demoted primary refused the command: the one the sentinels name
                        // now can take it at once.
                        let demoted = self.is_demoted(e);
                        // The manager reconnects to a fixed address by itself; a failed
                        // sentinel-named primary is worth asking the sentinels about again.
                        if demoted || (self.follows_primary() && cause::breaks_connection(e)) {
                            self.forget(generation).await;
                        }
                        // Not a reply that broke the protocol: that would break it again.
                        if !retried && (e.is_io_error() || e.is_connection_dropped() || demoted) {
                            retried = true;
                            tracing::debug!(node = %self.name, "connection broken; sending once more on a new one");
                            continue;
                        }
                    }
                    return result;
                }
                Conn::Cluster(mut conn) => return cmd.query_async(&mut conn).await,
            }
        }
    }

    /// The cached connection, opening one if there is none. Concurrent callers wait for the
    /// same connect instead of each opening their own.
    ///
    /// The connect runs in a task of its own that stores the connection even if the request
    /// that started it is dropped: a Redlock round decided without this node drops its
    /// request, and a node slower to connect than the others to answer would otherwise never
    /// get a connection. The task holds the slot until it is done, bounded by the timeout.
    async fn connection(&self) -> Result<Conn, RedisError> {
        let timeout = self.timeout;
        match &self.transport {
            Transport::Standalone { target, slot } => {
                let mut slot = Arc::clone(slot).lock_owned().await;
                if let Some(conn) = &slot.conn {
                    return Ok(Conn::Standalone(conn.clone(), slot.generation));
                }
                let target = target.clone();
                let connect = tokio::spawn(async move {
                    let conn = bounded(timeout, manage(&target, timeout)).await?;
                    slot.generation += 1;
                    slot.conn = Some(conn.clone());
                    Ok(Conn::Standalone(conn, slot.generation))
                });
                joined(connect.await)
            }
            Transport::Cluster { target, slot } => {
                let mut slot = Arc::clone(slot).lock_owned().await;
                if let Some(conn) = &slot.conn {
                    return Ok(Conn::Cluster(conn.clone()));
                }
                let target = target.clone();
                let connect = tokio::spawn(async move {
                    let conn = target.connect(timeout).await?;
                    slot.conn = Some(conn.clone());
                    Ok(Conn::Cluster(conn))
                });
                joined(connect.await)
            }
        }
    }

    /// Drops the cached standalone connection, whichever it is, unless a connect is under
    /// way (that one is new).
    fn drop_connection(&self) {
        if let Transport::Standalone { slot, .. } = &self.transport {
            if let Ok(mut slot) = slot.try_lock() {
                slot.conn = None;
            }
        }
    }

    /// Drops the connection to a primary that failed or was demoted, so the next request asks
    /// the sentinels again.
    async fn forget(&self, generation: u64) {
        if let Transport::Standalone { slot, .. } = &self.transport {
            let mut slot = slot.lock().await;
            if slot.generation == generation {
                slot.conn = None;
            }
        }
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("name", &self.name).field("timeout", &self.timeout).finish()
    }
}

/// `request` as a command of `engine`, word for word as the protocol builds it (the name
/// and the key replaced by the engine's form of them).
fn command(engine: Engine, request: &Acquire<'_>) -> Cmd {
    engine.command(&ACQUIRE, request.key, |cmd| arguments(request, cmd))
}

/// `request`'s words after the command's name and the key.
fn arguments(request: &Acquire<'_>, cmd: &mut Cmd) {
    for word in request.words().iter().skip(2) {
        cmd.arg(&word[..]);
    }
}

/// The error of a server without an engine: no module, and the library neither loaded
/// (`FUNCTION LOAD` denied, or failed) nor runnable as a script (`SCRIPT LOAD` denied).
fn no_engine(refusal: &RedisError) -> RedisError {
    redis::make_extension_error(
        cause::NO_ENGINE.to_owned(),
        Some(format!(
            "the fencedlock module is not loaded and the Functions library could not be loaded ({refusal}); load the module \
             (--loadmodule …/libfencedlock_module.so), or have an administrator load the Functions library \
             (fencedlock functions | redis-cli -x FUNCTION LOAD REPLACE), or allow this user FUNCTION LOAD or SCRIPT LOAD \
             and EVALSHA"
        )),
    )
}

/// A connection to `target` (the sentinels asked first, for a sentinel-monitored primary)
/// without a response timeout of its own: every caller bounds its requests.
async fn connect(target: &Target, timeout: Duration) -> Result<MultiplexedConnection, RedisError> {
    let config =
        AsyncConnectionConfig::new().set_connection_timeout(Some(timeout)).set_response_timeout(None);
    target.client().await?.get_multiplexed_async_connection_with_config(&config).await
}

/// The shared connection to `target`, connected before it is returned (a connection left
/// to connect lazily would make progress only while some request polls it, and a Redlock
/// round decided without this node drops its request). Its reconnects after an I/O error
/// start at once in the background, one attempt each (every request is bounded by the node
/// timeout, and the next request after a failed attempt starts another), and it has no
/// response timeout of its own: every caller bounds its requests.
async fn manage(target: &Target, timeout: Duration) -> Result<ConnectionManager, RedisError> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(None)
        .set_number_of_retries(0);
    ConnectionManager::new_with_config(target.client().await?, config).await
}

/// `connect` within `limit`; running out of time is an I/O timeout like the client's own.
async fn bounded<C>(
    limit: Duration,
    connect: impl std::future::Future<Output = Result<C, RedisError>>,
) -> Result<C, RedisError> {
    tokio::time::timeout(limit, connect)
        .await
        .unwrap_or_else(|_elapsed| Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()))
}

/// The connect task's result; a task that panicked or was cancelled (runtime shutdown) is
/// an I/O error, so the connection is tried again next time.
fn joined(result: Result<Result<Conn, RedisError>, tokio::task::JoinError>) -> Result<Conn, RedisError> {
    result.unwrap_or_else(|e| Err(std::io::Error::other(format!("connect task ended: {e}")).into()))
}

impl Dedicated {
    /// `cmd`, sent once more after loading the Script engine's script if the server's cache
    /// lacks it.
    async fn query<T: FromRedisValue>(&mut self, cmd: &Cmd) -> Result<T, RedisError> {
        match self.query_once(cmd).await {
            Err(e) if backend::lacks_script(&e) => {
                self.query_once::<String>(&backend::script_load()).await?;
                self.query_once(cmd).await
            }
            result => result,
        }
    }

    async fn query_once<T: FromRedisValue>(&mut self, cmd: &Cmd) -> Result<T, RedisError> {
        match self {
            Dedicated::Standalone(conn) => cmd.query_async(conn).await,
            Dedicated::Cluster(conn) => cmd.query_async(conn).await,
        }
    }
}

/// A decoded `STATUS` reply of either shape.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Status {
    Lock(LockStatus),
    Semaphore(SemaphoreStatus),
}

impl Status {
    /// How long until a new holder fits by the leases' expiry alone: zero for a free key
    /// or a semaphore with a free permit, else the time left on the lease that ends first.
    fn held_for(&self) -> Duration {
        match self {
            Status::Lock(status) => status.remaining.unwrap_or_default(),
            Status::Semaphore(status) if status.holders.len() < status.permits as usize => Duration::ZERO,
            Status::Semaphore(status) => {
                status.holders.iter().map(|holder| holder.remaining).min().unwrap_or_default()
            }
        }
    }
}

/// A `STATUS` reply taken apart. A mutex key: its three integers, then its label (a fourth
/// element, a bulk string, sent while a labelled lease holds the key). A semaphore key: three
/// integers, then an array of holders, each `[fence, pttl_ms, label or nil]`. The rules are
/// [`LockStatus::decode`]'s and [`SemaphoreStatus::decode`]'s.
enum StatusReply {
    Lock([i64; 3], Option<Vec<u8>>),
    Semaphore([i64; 3], Vec<PermitReply<Vec<u8>>>),
}

impl FromRedisValue for StatusReply {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        let redis::Value::Array(mut items) = v else {
            return Err(format!("STATUS must reply an array, not {v:?}").into());
        };
        let fourth = if items.len() == 4 { items.pop() } else { None };
        let head = <[i64; 3]>::from_redis_value(redis::Value::Array(items))?;
        match fourth {
            Some(redis::Value::Array(holders)) => {
                let holders = holders
                    .into_iter()
                    .map(|holder| {
                        let (fence, pttl, label) = <(i64, i64, Option<Vec<u8>>)>::from_redis_value(holder)?;
                        Ok(([fence, pttl], label))
                    })
                    .collect::<Result<_, redis::ParsingError>>()?;
                Ok(StatusReply::Semaphore(head, holders))
            }
            label => Ok(StatusReply::Lock(head, label.map(Vec::<u8>::from_redis_value).transpose()?)),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use fencedlock_protocol::PermitStatus;

    #[test]
    fn status_replies_are_decoded_and_broken_ones_are_typed_errors() {
        let node = Node::new("redis://127.0.0.1:1").expect("a valid URL");
        assert_eq!(node.decode_status(None).ok(), Some(None));
        let ints = |v: [i64; 3]| v.map(redis::Value::Int).to_vec();
        let parse = |items: Vec<redis::Value>| {
            Option::<StatusReply>::from_redis_value(redis::Value::Array(items)).expect("a STATUS shape")
        };
        let held =
            LockStatus { fence: 7, held: true, remaining: Some(Duration::from_millis(250)), label: None };
        assert_eq!(node.decode_status(parse(ints([7, 1, 250]))).ok(), Some(Some(Status::Lock(held.clone()))));
        let labelled = [ints([7, 1, 250]), vec![redis::Value::BulkString(b"node-a".to_vec())]].concat();
        let with_label = LockStatus { label: Some(b"node-a".to_vec()), ..held };
        assert_eq!(node.decode_status(parse(labelled)).ok(), Some(Some(Status::Lock(with_label))));
        for shape in [ints([7, 1, 250])[..2].to_vec(), [ints([7, 1, 250]), ints([1, 2, 3])].concat()] {
            assert!(Option::<StatusReply>::from_redis_value(redis::Value::Array(shape)).is_err());
        }
        let free_with_label = [ints([7, 0, -1]), vec![redis::Value::BulkString(b"x".to_vec())]].concat();
        let broken_ones = [[0, 0, -1], [7, 2, -1], [7, 1, -1], [7, 0, 5]].map(ints);
        for broken in broken_ones.into_iter().chain([free_with_label]) {
            let err = node.decode_status(parse(broken)).expect_err("broken");
            assert!(matches!(&err, Error::BadReply { node, .. } if node == "127.0.0.1:1"), "{err:?}");
            assert!(!err.is_retryable());
        }
    }

    fn holder(fence: i64, pttl: i64, label: Option<&[u8]>) -> redis::Value {
        let label = label.map_or(redis::Value::Nil, |l| redis::Value::BulkString(l.to_vec()));
        redis::Value::Array(vec![redis::Value::Int(fence), redis::Value::Int(pttl), label])
    }

    fn semaphore_reply(head: [i64; 3], holders: Vec<redis::Value>) -> Option<StatusReply> {
        let items = [head.map(redis::Value::Int).to_vec(), vec![redis::Value::Array(holders)]].concat();
        Option::<StatusReply>::from_redis_value(redis::Value::Array(items)).expect("a STATUS shape")
    }

    #[test]
    fn semaphore_status_replies_are_decoded_and_broken_ones_are_typed_errors() {
        let node = Node::new("redis://127.0.0.1:1").expect("a valid URL");
        let reply = semaphore_reply([9, 2, 3], vec![holder(4, 100, Some(b"w-1")), holder(9, 250, None)]);
        let expected = SemaphoreStatus {
            fence: 9,
            permits: 3,
            holders: vec![
                PermitStatus {
                    fence: 4,
                    remaining: Duration::from_millis(100),
                    label: Some(b"w-1".to_vec()),
                },
                PermitStatus { fence: 9, remaining: Duration::from_millis(250), label: None },
            ],
        };
        assert_eq!(node.decode_status(reply).ok(), Some(Some(Status::Semaphore(expected))));
        let idle = semaphore_reply([9, 0, 3], vec![]);
        let idle_status = SemaphoreStatus { fence: 9, permits: 3, holders: vec![] };
        assert_eq!(node.decode_status(idle).ok(), Some(Some(Status::Semaphore(idle_status))));
        // Counts that disagree, fences out of order, more holders than permits.
        for (head, holders) in [
            ([9, 1, 3], vec![holder(4, 100, None), holder(9, 250, None)]),
            ([9, 2, 3], vec![holder(9, 100, None), holder(4, 250, None)]),
            ([9, 2, 1], vec![holder(4, 100, None), holder(9, 250, None)]),
            ([9, 1, 3], vec![holder(10, 100, None)]),
        ] {
            let err = node.decode_status(semaphore_reply(head, holders)).expect_err("broken");
            assert!(matches!(err, Error::BadReply { .. }), "{err:?}");
        }
        // A holder that is not [fence, pttl, label]: a parse error, not a panic.
        let items = [
            [9, 1, 3].map(redis::Value::Int).to_vec(),
            vec![redis::Value::Array(vec![redis::Value::Int(1)])],
        ];
        assert!(Option::<StatusReply>::from_redis_value(redis::Value::Array(items.concat())).is_err());
    }

    /// A command's arguments as text, for assertions (here and in `confirm`'s tests).
    pub(crate) fn words(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<other>".into(),
            })
            .collect()
    }

    #[test]
    fn permits_are_sent_only_above_one() {
        use fencedlock_protocol::command::{ACQUIRE, LABEL, PERMITS};
        let plain = Acquire::mutex(b"k", b"t", 500);
        let mutex = words(&command(Engine::Module, &plain));
        assert_eq!(mutex, [ACQUIRE.name, "k", "t", "500"]);
        let one = words(&command(Engine::Module, &Acquire { label: None, permits: 1, ..plain }));
        assert_eq!(one, mutex, "PERMITS 1 is the mutex: the request stays byte for byte the same");
        let labelled = words(&command(Engine::Module, &Acquire { label: Some(b"w"), permits: 3, ..plain }));
        assert_eq!(labelled, [ACQUIRE.name, "k", "t", "500", LABEL, "w", PERMITS, "3"]);
    }
}
