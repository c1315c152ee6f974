//! The one lock façade over the shared engine: [`Locker`], leases from one server (or a Redis
//! Cluster, routed by key), and [`Redlock`], the same locker built over N independent masters
//! (by majority, with fenced Redlock's raise step by default).

use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;

use crate::acquisition::coordinator::Coordinator;
use crate::acquisition::fenced::Fencing;
use crate::acquisition::lease::{Attempts, Lease};
use crate::acquisition::terms::Terms;
use crate::backend::Engine;
use crate::config::LockConfig;
use crate::error::Error;
use crate::node::Node;
use crate::primitives::keepalive::{self, LeaseHandle};
use crate::primitives::policy::{self, Acquisition};
use crate::token::Token;

/// Takes leases from one server, or from one Redis Cluster (the key's slot owner); built as a
/// [`Redlock`](crate::Redlock), by majority vote of N independent masters (every method here
/// is a Redlock's too).
///
/// On one server, the server is the only authority, so its fence is the lease's fence and it
/// strictly increases per key. Cheap to clone; clones share the connections.
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
    coordinator: Arc<Coordinator>,
}

impl Locker {
    /// A locker over `node`, applying `config` (including its per-node timeout).
    /// [`Error::Config`] for options the node cannot honour (replica confirmation on a
    /// Redis Cluster), before anything connects.
    pub fn new(node: Node, config: LockConfig) -> Result<Locker, Error> {
        Locker::over(vec![node], config, Fencing::QuorumMax)
    }

    /// A locker over a standalone server URL such as `redis://127.0.0.1:6379`.
    /// Nothing connects until the first request.
    pub fn open(url: &str, config: LockConfig) -> Result<Locker, Error> {
        Locker::new(Node::with_tls(url, config.tls())?, config)
    }

    /// A locker over a Redis Cluster reached through any of `seeds`.
    pub fn open_cluster<S: AsRef<str>>(seeds: &[S], config: LockConfig) -> Result<Locker, Error> {
        Locker::new(Node::cluster_with_tls(seeds, config.tls())?, config)
    }

    /// A locker over `nodes` with `fencing`: what a [`Redlock`](crate::Redlock) is.
    pub(crate) fn over(nodes: Vec<Node>, config: LockConfig, fencing: Fencing) -> Result<Locker, Error> {
        Ok(Locker { coordinator: Arc::new(Coordinator::new(nodes, config, fencing)?) })
    }

    /// One attempt: [`Error::Contended`] if another token holds the key. Over several masters,
    /// one round: on failure every node is asked to release, and the error
    /// ([`Error::QuorumNotReached`]) reports how each node voted.
    pub async fn try_acquire(&self, key: &str) -> Result<Lease, Error> {
        Lease::acquire(
            &self.coordinator,
            key,
            self.coordinator.config().new_token(),
            Attempts::Once,
            self.terms(),
        )
        .await
    }

    /// Waits until granted, a non-retryable error occurs, or the configured maximum wait
    /// runs out (then the last error, usually [`Error::Contended`], is returned).
    ///
    /// The wait is the server's: one `FENCEDLOCK.ACQUIRE … BLOCK` on a connection of its own,
    /// queued in arrival order and answered with a fence the moment the lease ends (see the
    /// crate docs, *Waiting for a busy lock*). Over several masters, the wait is in the key's
    /// designated master's queue, then the majority is taken in a round (see
    /// [Waiting without splitting the votes](crate::Redlock#waiting-without-splitting-the-votes)).
    /// Against a module too old to wait, or with
    /// [`max_blocking`](crate::LockConfigBuilder::max_blocking)`(0)`, it polls (in rounds) with
    /// jittered backoff. Cancel-safe: dropping the future leaves no lease behind on any node
    /// and no queued waiter in any queue.
    pub async fn acquire(&self, key: &str) -> Result<Lease, Error> {
        Lease::acquire(
            &self.coordinator,
            key,
            self.coordinator.config().new_token(),
            Attempts::UntilMaxWait,
            self.terms(),
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
    /// Over several masters, a round that failed with a refusal (another owner holds the lock
    /// on some master) is an error after the maximum wait; no majority because too many
    /// masters could not answer and none refused is "unavailable".
    pub async fn acquire_with_policy(&self, key: &str) -> Result<Acquisition, Error> {
        policy::acquire(&self.coordinator, key, self.terms()).await
    }

    /// Runs fallible `work` under a kept-alive lease on `key`, then releases it; `work`'s own
    /// result, or the lock's error converted into the work's error type (`E: From<Error>`,
    /// which `fencedlock::Error` itself is), so there is one `?` for both.
    ///
    /// If a renewal fails, `work`'s future is dropped at its next `.await` and the result is
    /// [`Error::LeaseLost`]. The lease is released whether `work` succeeded or failed.
    ///
    /// ```no_run
    /// # async fn demo(locker: fencedlock::Locker) -> Result<(), Box<dyn std::error::Error>> {
    /// # async fn build_report(_fence: u64) -> std::io::Result<u64> { Ok(0) }
    /// #[derive(Debug)]
    /// enum JobError { Lock(fencedlock::Error), Io(std::io::Error) }
    /// impl From<fencedlock::Error> for JobError {
    ///     fn from(e: fencedlock::Error) -> Self { JobError::Lock(e) }
    /// }
    /// let rows = locker
    ///     .with_lease("report", |lease| async move { build_report(lease.fence()).await.map_err(JobError::Io) })
    ///     .await;
    /// # let _ = rows; Ok(()) }
    /// ```
    pub async fn with_lease<F, Fut, T, E>(&self, key: &str, work: F) -> Result<T, E>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        keepalive::with_lease(self.acquire(key).await?, work).await
    }

    /// One attempt with a token the caller chose, e.g. one persisted by a process that
    /// restarted. ACQUIRE is idempotent for the holder: if `token` still holds the lease, the
    /// same fence is returned and the lease restarts for a full ttl.
    pub async fn try_acquire_with_token(&self, key: &str, token: &Token) -> Result<Lease, Error> {
        Lease::acquire(&self.coordinator, key, token.clone(), Attempts::Once, self.terms()).await
    }

    /// Waits for the releases still finishing in the background: those to nodes that had not
    /// answered when a majority decided a round (each ends within the node timeout). A process
    /// about to exit calls this, bounded as it likes, so that its last releases are not cut off
    /// with the runtime and a node is not left holding a lease until its ttl runs out.
    pub async fn settle(&self) {
        self.coordinator.rounds.settle().await;
    }

    /// Releases `key` for a token obtained elsewhere (for example printed by another process).
    /// `Ok(true)` if that token held it (over several masters: if a majority still held it,
    /// `Ok(false)` if a majority no longer did; an error when the nodes that did not answer
    /// could tip it).
    pub async fn release_token(&self, key: &str, token: &Token) -> Result<bool, Error> {
        self.coordinator.rounds.release(key, token).await
    }

    /// Renews `key` for a token obtained elsewhere (for example printed by another process),
    /// as [`Lease::renew`] does for a lease object.
    ///
    /// `Ok(true)` if `token` still held the lease and it now runs a full ttl from now;
    /// `Ok(false)` if it no longer did (expired, released or taken over — where
    /// [`Lease::renew`] reports [`Error::LeaseLost`]); `Err` ([`Error::Timeout`],
    /// [`Error::Server`]) when the server's answer is unknown. Over several masters it is the
    /// same quorum round as [`Lease::renew`]: `Ok(true)` when a majority still held it, and
    /// `Err` when too many nodes timed out or failed, or the round took longer than the lease.
    pub async fn renew_token(&self, key: &str, token: &Token) -> Result<bool, Error> {
        self.coordinator.rounds.renew_token(key, token).await
    }

    /// The server (over several masters: the first).
    pub fn node(&self) -> &Node {
        &self.coordinator.rounds.nodes[0]
    }

    /// The servers, in configuration order: one, or a Redlock's masters.
    pub fn nodes(&self) -> &[Node] {
        &self.coordinator.rounds.nodes
    }

    /// The engine the server serves leases with (over several masters: the first's; each
    /// master's is [`Node::engine`] of [`nodes`](Self::nodes)), once a request has found it
    /// out; `None` before that. See [`Node::detect_engine`] to ask at once.
    pub fn engine(&self) -> Option<Engine> {
        self.node().engine()
    }

    /// Votes needed for a grant: `N / 2 + 1` (1 for one server).
    pub fn quorum(&self) -> usize {
        self.coordinator.rounds.quorum()
    }

    /// The fencing mode (its raise step runs only over several masters).
    pub fn fencing(&self) -> Fencing {
        self.coordinator.fencing
    }

    /// The options.
    pub fn config(&self) -> &LockConfig {
        self.coordinator.config()
    }

    /// A plain lock's terms: one permit, labelled as configured
    /// ([`LockConfigBuilder::label`](crate::LockConfigBuilder::label)).
    fn terms(&self) -> Terms<'_> {
        Terms::mutex(self.coordinator.config().label())
    }

    /// The shared coordinator, for the election and the semaphore built on this locker.
    pub(crate) fn coordinator(&self) -> &Arc<Coordinator> {
        &self.coordinator
    }
}

/// Takes leases by majority vote of N independent masters (Redlock), with a fence that
/// increases across successive grants (fenced Redlock, see [`Fencing`] for the raise step and
/// its safety argument).
///
/// A `Redlock` *is* a [`Locker`] over several masters: every lease method is the locker's
/// (through `Deref`), so the two cannot drift apart. Cheap to clone; clones share the nodes'
/// connections.
///
/// # Waiting without splitting the votes
///
/// [`Locker::acquire`] on a Redlock waits on the servers, but not on all of them: if every contender
/// queued on every master, the queues could order them differently (A first on two masters,
/// B first on three), each would hold a minority, and all would stall until the leases
/// expired. So every contender queues on one master, the key's *designated* one — the first
/// in a ranking of the masters by a fixed hash of key and master address (rendezvous
/// hashing), which every client computes alike — and the designated master's queue alone
/// decides the order. Being granted there is a reservation, not the lease: the reserved
/// contender then runs an ordinary round (ACQUIRE on every master, then the raise), in which
/// each master may wait up to one node timeout (the previous holder released everywhere at
/// once, so its releases to the other masters are at most a moment behind; its leases there
/// end within the skew of its own round). Mutual exclusion and the fence argument rest on
/// that round exactly as for a polling client; the queue only decides who runs it next.
///
/// Liveness: a failed round releases everywhere (which passes the reservation to the next in
/// the queue) and backs off with jitter before queueing again. A designated master that
/// cannot queue us — unreachable, refusing, or silent (a waiter pings it on its shared
/// connection every second and gives up on it after one node timeout without an answer) —
/// is passed over for the next in the ranking, for five seconds; clients that see the same
/// failure pick the same next master, and clients that disagree for a moment (one still
/// waits on a master another has given up on) can only split the reservation, which the
/// following round's failure and backoff resolve. Against a designated master whose module
/// cannot wait, acquisition polls in rounds with backoff. Use the same addresses for the
/// masters in every client: the ranking hashes them as written.
///
/// ```no_run
/// # async fn demo() -> Result<(), fencedlock::Error> {
/// use fencedlock::{LockConfig, Redlock};
/// let urls = ["redis://lock1:6379", "redis://lock2:6379", "redis://lock3:6379"];
/// let redlock = Redlock::open(&urls, LockConfig::default())?;
/// let lease = redlock.acquire("invoice:42").await?;
/// println!("fence {} valid for {:?}", lease.fence(), lease.remaining());
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Redlock {
    locker: Locker,
}

impl Redlock {
    /// A Redlock over `nodes` with fenced Redlock's raise step ([`Fencing::Raise`]).
    pub fn new(nodes: Vec<Node>, config: LockConfig) -> Result<Redlock, Error> {
        Redlock::with_fencing(nodes, config, Fencing::Raise)
    }

    /// A Redlock over `nodes` with an explicit fencing mode. [`Error::Config`] for no nodes,
    /// a server given twice, or options the masters cannot honour (replica confirmation),
    /// before anything connects.
    pub fn with_fencing(nodes: Vec<Node>, config: LockConfig, fencing: Fencing) -> Result<Redlock, Error> {
        Ok(Redlock { locker: Locker::over(nodes, config, fencing)? })
    }

    /// A Redlock over standalone servers given by URL. Nothing connects yet.
    pub fn open<S: AsRef<str>>(urls: &[S], config: LockConfig) -> Result<Redlock, Error> {
        let nodes =
            urls.iter().map(|u| Node::with_tls(u.as_ref(), config.tls())).collect::<Result<Vec<_>, _>>()?;
        Redlock::new(nodes, config)
    }

    /// A Redlock over a single server *is* a plain [`Locker`] (quorum 1, no raise step): that
    /// locker, sharing this one's connections and background releases, for what only one
    /// server can do ([`Semaphore`](crate::Semaphore), [`Election`](crate::Election)). `None`
    /// over several masters.
    pub fn as_locker(&self) -> Option<Locker> {
        (self.locker.nodes().len() == 1).then(|| self.locker.clone())
    }
}

impl Deref for Redlock {
    type Target = Locker;

    fn deref(&self) -> &Locker {
        &self.locker
    }
}
