//! Redlock over N independent masters, and the one lease algorithm every locker runs.
//!
//! A single server is simply N = 1 (quorum 1), so [`Locker`](crate::Locker) and [`Redlock`]
//! share this code: send the command to every node in parallel (each bounded by the per-node
//! timeout), count votes until the outcome is certain (a majority said yes, or enough said no
//! or failed to rule one out; slower nodes are not waited for), and charge the time the round
//! took against the lease: `validity = ttl - elapsed - drift`, with `elapsed` measured from
//! *before* the first request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;

use crate::config::LockConfig;
use crate::error::{Error, LossCause};
use crate::fenced::{self, Fencing};
use crate::keepalive::{self, LeaseHandle};
use crate::lease::Lease;
use crate::node::{Failure, Node};
use crate::quorum::{quorum, NodeVote, Phase, QuorumReport, Vote};
use crate::round;
use crate::token::Token;
use crate::validity;

/// Takes leases by majority vote of N independent masters (Redlock), with a fence that
/// increases across successive grants (fenced Redlock, see the [crate docs](crate)).
///
/// Cheap to clone; clones share the nodes' connections.
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
        self.engine.acquire(key, false).await
    }

    /// Acquisition rounds with jittered backoff until one succeeds, a non-retryable error
    /// occurs, or the configured maximum wait runs out (then the last round's error is
    /// returned). Cancel-safe: dropping the future leaves no lease behind on any node.
    pub async fn acquire(&self, key: &str) -> Result<Lease, Error> {
        self.engine.acquire(key, true).await
    }

    /// Runs `work` under a kept-alive lease on `key` and releases it afterwards.
    ///
    /// If the lease is lost (a renewal fails), `work`'s future is dropped at its next
    /// `.await` and the result is [`Error::LeaseLost`].
    pub async fn with_lease<F, Fut, T>(&self, key: &str, work: F) -> Result<T, Error>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        keepalive::with_lease(self.engine.acquire(key, true).await?, work).await
    }

    /// One acquisition round with a token the caller chose, e.g. one persisted by a process
    /// that restarted. ACQUIRE is idempotent for the holder: if `token` still holds the lease,
    /// the same fence is returned and the lease restarts for a full ttl.
    pub async fn try_acquire_with_token(&self, key: &str, token: &Token) -> Result<Lease, Error> {
        self.engine.acquire_as(key, token.clone(), false).await
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
}

/// The shared state of a locker: its nodes and options.
#[derive(Debug)]
pub(crate) struct Engine {
    pub(crate) nodes: Vec<Node>,
    pub(crate) config: LockConfig,
    pub(crate) fencing: Fencing,
}

/// A successful acquisition round.
pub(crate) struct Grant {
    pub(crate) fence: u64,
    pub(crate) deadline: Instant,
    pub(crate) report: QuorumReport,
}

/// Our claim on a key: the locker, the key and our token. While armed, dropping it releases
/// on every node in a background task, so neither a cancelled acquisition (dropped while a
/// round is in flight) nor a dropped [`Lease`] (which owns the claim after the grant) leaves
/// a node holding a lease nobody knows about. Dropping never blocks a runtime thread; without
/// a runtime the lease simply expires after its ttl.
pub(crate) struct Claim {
    pub(crate) engine: Arc<Engine>,
    pub(crate) key: String,
    pub(crate) token: Token,
    pub(crate) armed: bool,
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (engine, key, token) = (Arc::clone(&self.engine), self.key.clone(), self.token.clone());
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    let _ = engine.release_report(&key, &token).await;
                });
            }
            Err(_) => {
                tracing::debug!(key, "no Tokio runtime to release on drop; the lease expires after its ttl");
            }
        }
    }
}

impl Engine {
    pub(crate) fn new(nodes: Vec<Node>, config: LockConfig, fencing: Fencing) -> Arc<Engine> {
        let nodes = nodes.into_iter().map(|n| n.with_timeout(config.node_timeout())).collect();
        Arc::new(Engine { nodes, config, fencing })
    }

    pub(crate) fn quorum(&self) -> usize {
        quorum(self.nodes.len())
    }

    /// One round, or rounds with backoff when `retry`. One token serves every round of the
    /// call: ACQUIRE is idempotent for its holder, so a node that granted in a round whose
    /// reply (or release) was lost simply grants again.
    pub(crate) async fn acquire(self: &Arc<Self>, key: &str, retry: bool) -> Result<Lease, Error> {
        self.acquire_as(key, self.config.new_token(), retry).await
    }

    /// [`Engine::acquire`] with a given token (a holder re-taking its own lease gets it back).
    pub(crate) async fn acquire_as(
        self: &Arc<Self>,
        key: &str,
        token: Token,
        retry: bool,
    ) -> Result<Lease, Error> {
        let mut claim = Claim { engine: Arc::clone(self), key: key.to_owned(), token, armed: false };
        let give_up = Instant::now() + self.config.max_wait();
        let mut round = 0u32;
        loop {
            claim.armed = true;
            let err = match self.attempt(key, &claim.token).await {
                // Still armed: the lease owns the release now.
                Ok(grant) => return Ok(Lease::new(claim, grant)),
                Err(err) => err,
            };
            // The failed round released already.
            claim.armed = false;
            let now = Instant::now();
            if !retry || !err.is_retryable() || now >= give_up {
                return Err(err);
            }
            let delay = self.config.backoff().delay(round, &mut rand::rng());
            tracing::debug!(key, round, ?delay, error = %err, "lock busy, retrying");
            tokio::time::sleep(delay.min(give_up - now)).await;
            round = round.saturating_add(1);
        }
    }

    /// One acquisition round: ACQUIRE everywhere, then (fenced Redlock) RAISE on the granting
    /// nodes. Releases everywhere unless the lease is handed out.
    pub(crate) async fn attempt(&self, key: &str, token: &Token) -> Result<Grant, Error> {
        let ttl = self.config.ttl();
        let ttl_ms = self.config.ttl_ms();
        let drift = self.config.drift();
        let sent = Instant::now();
        let requests = self.nodes.iter().map(|node| async move {
            match node.acquire(key, token, ttl_ms).await {
                Ok(Some(fence)) => Vote::Granted { fence },
                Ok(None) => Vote::Refused,
                Err(failure) => failure.into_vote(),
            }
        });
        let votes = round::until_decided(requests, self.quorum()).await;
        let mut report = self.report(key, Phase::Acquire, votes, sent, ttl, drift);

        if report.reached() && report.validity.is_some() {
            let fence = match self.fencing {
                Fencing::Raise if self.nodes.len() > 1 => {
                    fenced::raise(&self.nodes, key, token, &mut report).await
                }
                _ => report.max_fence(),
            };
            report.elapsed = sent.elapsed();
            report.validity = validity::validity(ttl, report.elapsed, drift);
            if let (Some(fence), Some(_)) = (fence, report.validity) {
                return Ok(Grant { fence, deadline: validity::deadline(sent, ttl, drift), report });
            }
        }
        // No usable majority: give back what we got (and what a node that timed out, or was
        // not waited for, may have granted after all; the RELEASE follows the ACQUIRE on the
        // node's connection). RELEASE by our token cannot hurt another holder. A node that
        // refused holds another token's lease, so it holds nothing of ours.
        let skip: Vec<bool> = report.votes.iter().map(|v| matches!(v.vote, Vote::Refused)).collect();
        if skip.iter().any(|s| !s) {
            self.release_some(key, token, &skip).await;
        }
        Err(self.round_error(report, Phase::Acquire))
    }

    /// RENEW everywhere; the new deadline on success.
    pub(crate) async fn renew(&self, key: &str, token: &Token) -> Result<Instant, Error> {
        let ttl = self.config.ttl();
        let drift = self.config.drift();
        let sent = Instant::now();
        let ttl_ms = self.config.ttl_ms();
        let requests =
            self.nodes.iter().map(|node| async move { yes_no(node.renew(key, token, ttl_ms).await) });
        let votes = round::until_decided(requests, self.quorum()).await;
        let report = self.report(key, Phase::Renew, votes, sent, ttl, drift);
        if report.reached() && report.validity.is_some() {
            return Ok(validity::deadline(sent, ttl, drift));
        }
        Err(self.round_error(report, Phase::Renew))
    }

    /// [`Engine::renew`] for a token without a [`Lease`]: a definite "no longer held" is
    /// `Ok(false)` rather than [`Error::LeaseLost`].
    pub(crate) async fn renew_token(&self, key: &str, token: &Token) -> Result<bool, Error> {
        match self.renew(key, token).await {
            Ok(_deadline) => Ok(true),
            Err(Error::LeaseLost { cause: LossCause::Refused, .. }) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// RELEASE everywhere. `Ok(true)` if a majority (the node, for N = 1) still held the lease,
    /// `Ok(false)` if a majority no longer did, an error when the answers leave that open.
    pub(crate) async fn release(&self, key: &str, token: &Token) -> Result<bool, Error> {
        let report = self.release_report(key, token).await;
        match report.majority_held() {
            Some(held) => Ok(held),
            None => Err(self.round_error(report, Phase::Release)),
        }
    }

    /// RELEASE on the nodes not marked in `skip`, ignoring the outcome (leases that could
    /// not be released expire after the ttl).
    async fn release_some(&self, key: &str, token: &Token, skip: &[bool]) {
        let releases =
            self.nodes.iter().zip(skip).filter(|(_, skip)| !**skip).map(|(node, _)| node.release(key, token));
        let replies = join_all(releases).await;
        let unanswered = replies.iter().filter(|r| r.is_err()).count();
        if unanswered > 0 {
            tracing::debug!(key, unanswered, "release after a failed round did not reach every node");
        }
    }

    async fn release_report(&self, key: &str, token: &Token) -> QuorumReport {
        let sent = Instant::now();
        let replies = join_all(self.nodes.iter().map(|n| n.release(key, token))).await;
        let votes = replies.into_iter().map(yes_no).collect();
        let report = self.report(key, Phase::Release, votes, sent, Duration::ZERO, Duration::ZERO);
        if !report.votes.iter().all(|v| v.vote.answered()) {
            tracing::debug!(%report, "release did not reach every node; their leases expire after the ttl");
        }
        report
    }

    fn report(
        &self,
        key: &str,
        phase: Phase,
        votes: Vec<Vote>,
        sent: Instant,
        ttl: Duration,
        drift: Duration,
    ) -> QuorumReport {
        let elapsed = sent.elapsed();
        QuorumReport {
            key: key.to_owned(),
            phase,
            quorum: self.quorum(),
            votes: self
                .nodes
                .iter()
                .zip(votes)
                .map(|(node, vote)| NodeVote { node: node.name().to_owned(), vote, raise: None })
                .collect(),
            elapsed,
            validity: if phase == Phase::Release { None } else { validity::validity(ttl, elapsed, drift) },
        }
    }

    /// The error for a failed round. With a single node the node's own answer is the error
    /// (contended, timed out, server error); with several, the whole report is.
    fn round_error(&self, report: QuorumReport, phase: Phase) -> Error {
        let lost =
            |report: &QuorumReport| Error::LeaseLost { key: report.key.clone(), cause: LossCause::Refused };
        if phase == Phase::Renew && report.majority_refused() {
            return lost(&report);
        }
        if let ([only], [node]) = (report.votes.as_slice(), self.nodes.as_slice()) {
            let operation = match phase {
                Phase::Acquire => "ACQUIRE",
                Phase::Renew => "RENEW",
                Phase::Release => "RELEASE",
            };
            match &only.vote {
                Vote::Refused if phase == Phase::Acquire => {
                    return Error::Contended { key: report.key.clone() }
                }
                Vote::TimedOut => return node.error(operation, Failure::TimedOut),
                Vote::Failed { error } => return node.error(operation, Failure::Redis(error.clone())),
                _ => {}
            }
        }
        Error::QuorumNotReached(Box::new(report))
    }
}

fn yes_no(reply: Result<bool, Failure>) -> Vote {
    match reply {
        Ok(true) => Vote::Confirmed,
        Ok(false) => Vote::Refused,
        Err(failure) => failure.into_vote(),
    }
}
