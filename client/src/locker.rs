//! Leases on a single server (or a Redis Cluster, routed by key): the shared engine with N = 1.

use std::future::Future;
use std::sync::Arc;

use crate::config::LockConfig;
use crate::engine::Engine;
use crate::error::Error;
use crate::fenced::Fencing;
use crate::keepalive::{self, LeaseHandle};
use crate::lease::{Attempts, Lease};
use crate::node::Node;
use crate::policy::{self, Acquisition};
use crate::terms::Terms;
use crate::token::Token;

/// Takes leases from one server, or from one Redis Cluster (the key's slot owner).
///
/// The server is the only authority, so its fence is the lease's fence and it strictly
/// increases per key. Cheap to clone; clones share the connection.
///
/// ```no_run
/// # async fn demo() -> Result<(), fencedlock::Error> {
/// use std::time::Duration;
/// use fencedlock::{LockConfig, Locker};
/// let config = LockConfig::builder().ttl(Duration::from_secs(5)).build()?;
/// let locker = Locker::open("redis://127.0.0.1:6379", config)?;
/// let lease = locker.acquire("report:daily").await?;
/// lease.ensure_valid()?;
/// println!("writing with fence {}", lease.fence());
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Locker {
    engine: Arc<Engine>,
}

impl Locker {
    /// A locker over `node`, applying `config` (including its per-node timeout).
    pub fn new(node: Node, config: LockConfig) -> Locker {
        Locker { engine: Engine::new(vec![node], config, Fencing::QuorumMax) }
    }

    /// A locker over a standalone server URL such as `redis://127.0.0.1:6379`.
    /// Nothing connects until the first request.
    pub fn open(url: &str, config: LockConfig) -> Result<Locker, Error> {
        Ok(Locker::new(Node::new(url)?, config))
    }

    /// A locker over a Redis Cluster reached through any of `seeds`.
    pub fn open_cluster<S: AsRef<str>>(seeds: &[S], config: LockConfig) -> Result<Locker, Error> {
        Ok(Locker::new(Node::cluster(seeds)?, config))
    }

    /// One attempt: [`Error::Contended`] if another token holds the key.
    pub async fn try_acquire(&self, key: &str) -> Result<Lease, Error> {
        Lease::acquire(&self.engine, key, self.engine.config.new_token(), Attempts::Once, Terms::MUTEX).await
    }

    /// Waits until granted, a non-retryable error occurs, or the configured maximum wait
    /// runs out (then the last error, usually [`Error::Contended`], is returned).
    ///
    /// The wait is the server's: one `FENCEDLOCK.ACQUIRE … BLOCK` on a connection of its own,
    /// queued in arrival order and answered with a fence the moment the lease ends (see the
    /// crate docs, *Waiting for a busy lock*). Against a module too old to wait, or with
    /// [`max_blocking`](crate::LockConfigBuilder::max_blocking)`(0)`, it polls with jittered
    /// backoff. Cancel-safe: dropping the future leaves no lease and no queued waiter behind.
    pub async fn acquire(&self, key: &str) -> Result<Lease, Error> {
        Lease::acquire(
            &self.engine,
            key,
            self.engine.config.new_token(),
            Attempts::UntilMaxWait,
            Terms::MUTEX,
        )
        .await
    }

    /// [`acquire`](Self::acquire) under the declared failure policy
    /// ([`LockConfigBuilder::on_unavailable`](crate::LockConfigBuilder::on_unavailable)).
    ///
    /// A busy lock is always [`Error::Contended`] after the maximum wait, never "unlocked".
    /// When the server cannot answer ([`Error::is_unavailable`]): under
    /// [`OnUnavailable::FailClosed`](crate::OnUnavailable::FailClosed) (the default) the error
    /// is returned; under [`OnUnavailable::FailOpen`](crate::OnUnavailable::FailOpen) the
    /// result is `Ok(`[`Acquisition::Unlocked`]`)`, with a warning logged and the outcome
    /// counted ([`metrics::UNLOCKED`](crate::metrics::UNLOCKED)). Unlocked work has no fence.
    pub async fn acquire_with_policy(&self, key: &str) -> Result<Acquisition, Error> {
        policy::acquire(&self.engine, key, Terms::MUTEX).await
    }

    /// Runs `work` under a kept-alive lease on `key`, then releases it.
    ///
    /// If a renewal fails, `work`'s future is dropped at its next `.await` and the result is
    /// [`Error::LeaseLost`].
    pub async fn with_lease<F, Fut, T>(&self, key: &str, work: F) -> Result<T, Error>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        keepalive::with_lease(self.acquire(key).await?, work).await
    }

    /// One attempt with a token the caller chose, e.g. one persisted by a process that
    /// restarted. ACQUIRE is idempotent for the holder: if `token` still holds the lease, the
    /// same fence is returned and the lease restarts for a full ttl.
    pub async fn try_acquire_with_token(&self, key: &str, token: &Token) -> Result<Lease, Error> {
        Lease::acquire(&self.engine, key, token.clone(), Attempts::Once, Terms::MUTEX).await
    }

    /// Waits for the releases still finishing in the background: those to nodes that had not
    /// answered when a majority decided a round (each ends within the node timeout). A process
    /// about to exit calls this, bounded as it likes, so that its last releases are not cut off
    /// with the runtime and a node is not left holding a lease until its ttl runs out.
    pub async fn settle(&self) {
        self.engine.settle().await;
    }

    /// Releases `key` for a token obtained elsewhere. `Ok(true)` if that token held it.
    pub async fn release_token(&self, key: &str, token: &Token) -> Result<bool, Error> {
        self.engine.release(key, token).await
    }

    /// Renews `key` for a token obtained elsewhere (for example printed by another process),
    /// as [`Lease::renew`] does for a lease object.
    ///
    /// `Ok(true)` if `token` still held the lease and it now runs a full ttl from now;
    /// `Ok(false)` if it no longer did (expired, released or taken over — where
    /// [`Lease::renew`] reports [`Error::LeaseLost`]); `Err` ([`Error::Timeout`],
    /// [`Error::Server`]) when the server's answer is unknown.
    pub async fn renew_token(&self, key: &str, token: &Token) -> Result<bool, Error> {
        self.engine.renew_token(key, token).await
    }

    /// The server.
    pub fn node(&self) -> &Node {
        &self.engine.nodes[0]
    }

    /// The options.
    pub fn config(&self) -> &LockConfig {
        &self.engine.config
    }

    /// The shared engine, for the election and the semaphore built on this locker.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// A locker over a single-node engine (a one-server Redlock's).
    pub(crate) fn from_engine(engine: Arc<Engine>) -> Locker {
        Locker { engine }
    }
}
