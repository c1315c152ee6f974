//! Leases by majority of N independent masters: the Redlock façade over the shared engine.

use std::future::Future;
use std::sync::Arc;

use crate::config::LockConfig;
use crate::engine::Engine;
use crate::error::Error;
use crate::fenced::Fencing;
use crate::keepalive::{self, LeaseHandle};
use crate::lease::{Attempts, Lease};
use crate::locker::Locker;
use crate::node::Node;
use crate::policy::{self, Acquisition};
use crate::terms::Terms;
use crate::token::Token;

/// Takes leases by majority vote of N independent masters (Redlock), with a fence that
/// increases across successive grants (fenced Redlock, see [`Fencing`] for the raise step and
/// its safety argument).
///
/// Cheap to clone; clones share the nodes' connections.
///
/// # Waiting without splitting the votes
///
/// [`Redlock::acquire`] waits on the servers, but not on all of them: if every contender
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
    engine: Arc<Engine>,
}

impl Redlock {
    /// A Redlock over `nodes` with fenced Redlock's raise step ([`Fencing::Raise`]).
    pub fn new(nodes: Vec<Node>, config: LockConfig) -> Result<Redlock, Error> {
        Redlock::with_fencing(nodes, config, Fencing::Raise)
    }

    /// A Redlock over `nodes` with an explicit fencing mode.
    pub fn with_fencing(nodes: Vec<Node>, config: LockConfig, fencing: Fencing) -> Result<Redlock, Error> {
        if nodes.is_empty() {
            return Err(Error::Config("Redlock needs at least one node".into()));
        }
        Ok(Redlock { engine: Engine::new(nodes, config, fencing) })
    }

    /// A Redlock over standalone servers given by URL. Nothing connects yet.
    pub fn open<S: AsRef<str>>(urls: &[S], config: LockConfig) -> Result<Redlock, Error> {
        let nodes = urls.iter().map(|u| Node::new(u.as_ref())).collect::<Result<Vec<_>, _>>()?;
        Redlock::new(nodes, config)
    }

    /// One acquisition round. On failure every node is asked to release, and the error
    /// ([`Error::QuorumNotReached`]) reports how each node voted.
    pub async fn try_acquire(&self, key: &str) -> Result<Lease, Error> {
        Lease::acquire(&self.engine, key, self.engine.config.new_token(), Attempts::Once, Terms::MUTEX).await
    }

    /// Waits in the key's designated master's queue, then takes the majority in a round
    /// (see [Waiting without splitting the votes](Redlock#waiting-without-splitting-the-votes)),
    /// until granted, a non-retryable error occurs, or the configured maximum wait runs out
    /// (then the error of a last round is returned). Without waiting on the servers (module
    /// too old, or [`max_blocking`](crate::LockConfigBuilder::max_blocking)`(0)`): rounds with
    /// jittered backoff. Cancel-safe: dropping the future leaves no lease behind on any node
    /// and no waiter in any queue.
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
    /// A round that failed with a refusal (another owner holds the lock on some master) is an
    /// error after the maximum wait, never "unlocked". No majority because too many masters
    /// could not answer and none refused ([`Error::is_unavailable`]) is returned as the error
    /// under
    /// [`OnUnavailable::FailClosed`](crate::OnUnavailable::FailClosed), and is
    /// `Ok(`[`Acquisition::Unlocked`]`)` (no fence, a warning logged) under
    /// [`OnUnavailable::FailOpen`](crate::OnUnavailable::FailOpen).
    pub async fn acquire_with_policy(&self, key: &str) -> Result<Acquisition, Error> {
        policy::acquire(&self.engine, key, Terms::MUTEX).await
    }

    /// Runs `work` under a kept-alive lease on `key` and releases it afterwards.
    ///
    /// If the lease is lost (a renewal fails), `work`'s future is dropped at its next
    /// `.await` and the result is [`Error::LeaseLost`].
    pub async fn with_lease<F, Fut, T>(&self, key: &str, work: F) -> Result<T, Error>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        keepalive::with_lease(self.acquire(key).await?, work).await
    }

    /// One acquisition round with a token the caller chose, e.g. one persisted by a process
    /// that restarted. ACQUIRE is idempotent for the holder: if `token` still holds the lease,
    /// the same fence is returned and the lease restarts for a full ttl.
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

    /// Releases `key` on every node for a token obtained elsewhere (for example printed by
    /// another process). `Ok(true)` if a majority still held it for that token, `Ok(false)` if
    /// a majority no longer did; an error when the nodes that did not answer could tip it.
    pub async fn release_token(&self, key: &str, token: &Token) -> Result<bool, Error> {
        self.engine.release(key, token).await
    }

    /// Renews `key` for a token obtained elsewhere (for example printed by another process):
    /// the same quorum round as [`Lease::renew`], for a caller that holds only the token.
    ///
    /// - `Ok(true)`: a majority still held the lease for `token`, and it now runs a full ttl
    ///   from before the request (minus drift) on each of them.
    /// - `Ok(false)`: a majority no longer holds it (expired, released or taken over) — the
    ///   case in which [`Lease::renew`] reports [`Error::LeaseLost`].
    /// - `Err`: the answer is unknown (too many nodes timed out or failed, or the round took
    ///   longer than the lease), as for [`Lease::renew`].
    pub async fn renew_token(&self, key: &str, token: &Token) -> Result<bool, Error> {
        self.engine.renew_token(key, token).await
    }

    /// The masters, in configuration order.
    pub fn nodes(&self) -> &[Node] {
        &self.engine.nodes
    }

    /// Votes needed for a grant: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.engine.quorum()
    }

    /// The fencing mode.
    pub fn fencing(&self) -> Fencing {
        self.engine.fencing
    }

    /// The options.
    pub fn config(&self) -> &LockConfig {
        &self.engine.config
    }

    /// A Redlock over a single server *is* a [`Locker`] (quorum 1, no raise step): that locker,
    /// sharing this one's connections and background releases, for what only one server can
    /// do ([`Semaphore`](crate::Semaphore), [`Election`](crate::Election)). `None` over
    /// several masters.
    pub fn as_locker(&self) -> Option<Locker> {
        (self.engine.nodes.len() == 1).then(|| Locker::from_engine(Arc::clone(&self.engine)))
    }
}
