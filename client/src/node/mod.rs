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
//!
//! One file per job: this one the node itself (its construction, settings and the one bounded,
//! redacted `query` every request goes through), the lease requests (`requests`), the
//! connections (`connection`: shared and dedicated; `send`: what they send, and the one
//! `NOSCRIPT` retry; `timeout`: connecting within the node timeout; `deadlines`: every request's
//! node timeout, kept without a runtime timer per request), the engine found on the
//! server (`detect`), `STATUS` decoding (`status`), the requests that wait on a dedicated
//! connection (`blocking`), a session's renewals in one pipeline (`batch`), the Functions engine's wake-ups (`wake`), the waiting connections' pool
//! (`pool`), a cluster (`cluster`), Sentinel (`sentinel`), replica confirmation's `WAIT`
//! (`replicas`), and the commands sent to every primary (`every_primary`).

mod batch;
mod blocking;
#[cfg(feature = "cluster")]
mod cluster;
mod connection;
mod deadlines;
mod detect;
mod every_primary;
pub(crate) mod pool;
pub(crate) mod replicas;
mod requests;
mod send;
#[cfg(feature = "sentinel")]
pub(crate) mod sentinel;
mod status;
mod timeout;
mod wake;

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, FromRedisValue, RedisError};
use tokio::sync::{Mutex, OnceCell};

use crate::backend::{Engine, EngineChoice};
use crate::cause::Cause;
use crate::config::{DEFAULT_MAX_BLOCKING, DEFAULT_NODE_TIMEOUT};
use crate::error::Error;
use crate::quorum::Vote;
use crate::redact;
use crate::tls::{self, Tls};
use connection::{Cached, Dedicated, Target, Transport};
use pool::Pool;

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
    /// Whether the server's module serves `ACQUIREALL`, asked by the first `acquire_all`.
    acquire_all: Arc<OnceCell<bool>>,
}

/// What an ACQUIRE came back with.
#[derive(Debug)]
pub(crate) enum AcquireReply {
    /// Granted with this fence (confirmed by enough replicas, where that was asked for).
    Granted { fence: u64 },
    /// Granted, but too few replicas confirmed it (the `error` says how many, or why the
    /// `WAIT` got no count) and the grant was released; `may_hold` when that release got no
    /// answer, so the lease may still be held until it expires.
    Unconfirmed { error: Error, may_hold: bool },
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
        #[cfg(feature = "sentinel")]
        if sentinel::is_sentinel_url(url) {
            let url = sentinel::SentinelUrl::parse(url)?;
            return Ok(Node::standalone(url.name(), Target::Sentinel(sentinel::Primary::new(&url, tls)?)));
        }
        #[cfg(not(feature = "sentinel"))]
        if url.to_ascii_lowercase().contains("+sentinel://") {
            return Err(Error::Config(
                "this build of fencedlock has no Sentinel support: enable the client's `sentinel` feature"
                    .into(),
            ));
        }
        tls.check_url(url)?;
        let client = tls.client(url).map_err(|e| Error::Config(format!("bad server URL {url:?}: {e}")))?;
        Ok(Node::standalone(client.get_connection_info().addr().to_string(), Target::Fixed(Box::new(client))))
    }

    fn standalone(name: String, target: Target) -> Node {
        Node::with_transport(
            name,
            Transport::Standalone { target, slot: Arc::new(Mutex::new(Cached::new())) },
        )
    }

    fn with_transport(name: String, transport: Transport) -> Node {
        Node {
            name,
            transport,
            timeout: DEFAULT_NODE_TIMEOUT,
            pool: Pool::new(DEFAULT_MAX_BLOCKING),
            choice: EngineChoice::Auto,
            engine: Arc::new(OnceCell::new()),
            acquire_all: Arc::new(OnceCell::new()),
        }
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
        #[cfg(feature = "cluster")]
        let transport = cluster::ClusterTarget::new(&urls, tls).map(|target| Transport::Cluster {
            target: Box::new(target),
            slot: Arc::new(Mutex::new(Cached::new())),
        });
        #[cfg(not(feature = "cluster"))]
        let transport = Err(Error::Config(
            "this build of fencedlock has no Redis Cluster support: enable the client's `cluster` feature"
                .into(),
        ));
        Ok(Node::with_transport(format!("cluster({})", urls.join(",")), transport?))
    }

    /// The same node with another per-node timeout, for a node used on its own
    /// ([`Node::status`], [`Node::detect_engine`]). A locker built over the node replaces it
    /// with its configured [`node_timeout`](crate::LockConfigBuilder::node_timeout), which is
    /// where to set it for leases.
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

    /// The node's pool of waiting connections, for what Redlock remembers about it.
    pub(crate) fn pool(&self) -> &Pool<Dedicated> {
        &self.pool
    }

    /// Whether this is a Redis Cluster (whose connection routes `WAIT` to every primary).
    pub(crate) fn is_cluster(&self) -> bool {
        match self.transport {
            Transport::Standalone { .. } => false,
            #[cfg(feature = "cluster")]
            Transport::Cluster { .. } => true,
        }
    }

    /// The node's address, as used in reports and errors.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The per-node timeout applied to every request.
    pub fn timeout(&self) -> Duration {
        self.timeout
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
        match deadlines::within(self.timeout, self.query_unbounded(cmd)).await {
            Ok(Err(e)) if secret.is_some() && e.kind() == redis::ErrorKind::Parse => {
                Err(self.unparsable(self.failure(e, secret)).await)
            }
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
        matches!(&self.transport, Transport::Standalone { target, .. } if target.follows_sentinels())
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
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("name", &self.name).field("timeout", &self.timeout).finish()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use fencedlock_protocol::Acquire;

    use super::*;

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
        let mutex = words(&Engine::Module.call(&plain));
        assert_eq!(mutex, [ACQUIRE.name, "k", "t", "500"]);
        let one = words(&Engine::Module.call(&Acquire { label: None, permits: 1, ..plain }));
        assert_eq!(one, mutex, "PERMITS 1 is the mutex: the request stays byte for byte the same");
        let labelled = words(&Engine::Module.call(&Acquire { label: Some(b"w"), permits: 3, ..plain }));
        assert_eq!(labelled, [ACQUIRE.name, "k", "t", "500", LABEL, "w", PERMITS, "3"]);
    }

    #[cfg(not(feature = "sentinel"))]
    #[test]
    fn without_the_feature_a_sentinel_url_is_a_configuration_error() {
        let refused = Node::new("redis+sentinel://127.0.0.1:26379/locks");
        assert!(matches!(refused, Err(Error::Config(why)) if why.contains("`sentinel` feature")));
    }
}
