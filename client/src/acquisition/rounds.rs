//! The rounds every locker runs, on one server or on N independent masters.
//!
//! A single server is simply N = 1 (quorum 1), so [`Locker`](crate::Locker) and
//! [`Redlock`](crate::Redlock) share this code: send the command to every node in parallel
//! (each bounded by the per-node timeout), count votes until the outcome is certain (a majority
//! said yes, or enough said no or failed to rule one out; slower nodes are not waited for), and
//! charge the time the round took against the lease: `validity = ttl - elapsed - drift`, with
//! `elapsed` measured from *before* the first request.
//!
//! Each method here is one round. Which rounds an acquisition runs (plain, replica-confirmed,
//! waiting) is the coordinator's choice; retrying rounds, and releasing what a caller gave up
//! on midway, belong to the lease being taken (the lease module's `Claim`).
//!
//! Releases never make a caller wait for a node the majority already outvoted: a release
//! round returns once a majority's answer is known, and a failed acquisition round returns
//! once the nodes that answered it have released; the releases still owed to the others
//! finish in the background, bounded by the per-node timeout (see the `trailing` module for
//! why they cannot undo a later grant).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures::future::{join, join_all, BoxFuture};
use futures::FutureExt;

use crate::acquisition::fenced;
use crate::acquisition::round::{self, Stragglers};
use crate::acquisition::terms::Request;
use crate::acquisition::trailing::Trailing;
use crate::config::LockConfig;
use crate::error::{Error, LossCause};
use crate::node::{AcquireReply, Failure, Node};
use crate::quorum::{quorum, NodeVote, Phase, QuorumReport, Vote};
use crate::token::Token;
use crate::validity;

/// The nodes of a locker and its options, and the rounds run on them.
#[derive(Debug)]
pub(crate) struct Rounds {
    pub(crate) nodes: Vec<Node>,
    pub(crate) config: LockConfig,
    /// Whether a granted round takes fenced Redlock's raise step (the coordinator decides).
    raise: bool,
    /// Releases finishing in the background.
    trailing: Trailing,
    /// These rounds, for the background tasks that finish their releases.
    me: Weak<Rounds>,
}

/// A successful acquisition round.
pub(crate) struct Grant {
    pub(crate) fence: u64,
    pub(crate) deadline: Instant,
    pub(crate) report: QuorumReport,
}

impl Rounds {
    /// Rounds over `nodes`, already configured by the coordinator; `raise`: fenced Redlock.
    pub(crate) fn new(nodes: Vec<Node>, config: LockConfig, raise: bool) -> Arc<Rounds> {
        Arc::new_cyclic(|me| Rounds { nodes, config, raise, trailing: Trailing::new(), me: me.clone() })
    }

    /// The grant of a round sent at `sent` with fence `fence`, as `report` tells it: the
    /// deadline runs from `sent`, minus drift. Every grant is made here.
    pub(crate) fn grant(&self, fence: u64, sent: Instant, report: QuorumReport) -> Grant {
        let deadline = validity::deadline(sent, self.config.ttl(), self.config.drift());
        Grant { fence, deadline, report }
    }

    /// [`Rounds::grant`] of a single server's `fence`, its report one granting vote measured
    /// from `sent`.
    pub(crate) fn single_grant(&self, key: &str, fence: u64, sent: Instant) -> Grant {
        let (ttl, drift) = (self.config.ttl(), self.config.drift());
        let report = self.report(key, Phase::Acquire, vec![Vote::Granted { fence }], sent, ttl, drift);
        self.grant(fence, sent, report)
    }

    /// These rounds as an `Arc`, for background work that outlives the caller (`None` while
    /// it is being dropped).
    pub(crate) fn shared(&self) -> Option<Arc<Rounds>> {
        self.me.upgrade()
    }

    /// Waits for the releases still finishing in the background (see the `trailing` module).
    pub(crate) async fn settle(&self) {
        self.trailing.drained().await;
    }

    pub(crate) fn quorum(&self) -> usize {
        quorum(self.nodes.len())
    }

    /// Whether a background release of `token` on `key` to node `i` was in flight and got
    /// no answer: waits for such releases to end first (bounded by the node timeout). A
    /// request waiting on that node runs on a connection of its own and could overtake a
    /// release left unanswered on the shared one, so Redlock's waiting step passes the node
    /// over, as a round counts it timed out (see the `trailing` module).
    pub(crate) async fn release_left_behind(&self, i: usize, key: &str, token: &Token) -> bool {
        self.trailing.timed_out(i, key, token).await
    }

    /// One plain acquisition round (the replica-confirmed one is the `confirm` module's):
    /// ACQUIRE everywhere, then (fenced Redlock) RAISE on the granting nodes.
    /// Releases everywhere unless the lease is handed out.
    ///
    /// With `block`, each node that can wait on the server does so for up to that long
    /// before it counts as refused (Redlock's second step, see the `waiting` module).
    ///
    /// Every ACQUIRE is `request`'s.
    pub(crate) async fn attempt(
        &self,
        request: Request<'_>,
        block: Option<Duration>,
    ) -> Result<Grant, Error> {
        let ttl = self.config.ttl();
        let drift = self.config.drift();
        let sent = Instant::now();
        let asked: Vec<AtomicBool> = self.nodes.iter().map(|_| AtomicBool::new(false)).collect();
        let requests = self.nodes.iter().zip(&asked).enumerate().map(|(i, (node, asked))| async move {
            // Never overtake a release of an earlier round still in flight to this node; one
            // that got no answer within the node timeout makes the node count as timed out
            // this round (see the `trailing` module).
            if self.trailing.timed_out(i, request.key, request.token).await {
                return Vote::TimedOut;
            }
            asked.store(true, Ordering::Relaxed);
            // A node that cannot wait is asked once without waiting.
            let answer = match block {
                // Boxed, as every rarer path of a round: the future of a plain round is
                // copied several times per lease, so its size is what the common case pays.
                Some(wait) => {
                    Box::pin(async {
                        match node.acquire(request.acquire, Some(Instant::now() + wait), None).await {
                            Ok(AcquireReply::Unsupported) => node.acquire(request.acquire, None, None).await,
                            answer => answer,
                        }
                    })
                    .await
                }
                None => node.acquire(request.acquire, None, None).await,
            };
            match answer {
                Ok(AcquireReply::Granted { fence }) => Vote::Granted { fence },
                Ok(AcquireReply::Nil | AcquireReply::Unsupported) => Vote::Refused,
                // Never asked for here (no confirmation on these rounds); should it come, the
                // round's release covers what may be held.
                Ok(AcquireReply::Unconfirmed { .. }) => Vote::TimedOut,
                Err(failure) => failure.into_vote(),
            }
        });
        let votes = round::until_decided(requests, self.quorum()).await;
        let mut report = self.report(request.key, Phase::Acquire, votes, sent, ttl, drift);

        if report.reached() && report.validity.is_some() {
            let fence = if self.raise {
                Box::pin(fenced::raise(&self.nodes, request.key, request.token, &mut report)).await
            } else {
                report.max_fence()
            };
            report.elapsed = sent.elapsed();
            report.validity = validity::validity(ttl, report.elapsed, drift);
            if let (Some(fence), Some(_)) = (fence, report.validity) {
                return Ok(self.grant(fence, sent, report));
            }
        }
        // No usable majority: give back what we got (and what a node that timed out, or was
        // not waited for, may have granted after all; the RELEASE follows the ACQUIRE on the
        // node's connection). RELEASE by our token cannot hurt another holder. A node that
        // refused holds another token's lease, so it holds nothing of ours; one not asked
        // holds nothing new.
        let owed: Vec<usize> = (0..report.votes.len())
            .filter(|&i| asked[i].load(Ordering::Relaxed) && !matches!(report.votes[i].vote, Vote::Refused))
            .collect();
        Box::pin(self.give_back(request.key, request.token, &report, &owed)).await;
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

    /// [`Rounds::renew`] of many leases at once, one pipeline per node (a session's keep-alive):
    /// each lease's new deadline, or its round's error, as `renew` would decide it. Every node
    /// is awaited (each within its timeout): the pipeline carries every lease's vote at once.
    pub(crate) async fn renew_many(&self, leases: &[(&str, &Token)]) -> Vec<Result<Instant, Error>> {
        let (ttl, drift) = (self.config.ttl(), self.config.drift());
        let sent = Instant::now();
        let ttl_ms = self.config.ttl_ms();
        let mut per_node: Vec<_> = join_all(self.nodes.iter().map(|node| node.renew_many(leases, ttl_ms)))
            .await
            .into_iter()
            .map(Vec::into_iter)
            .collect();
        leases
            .iter()
            .map(|(key, _)| {
                let votes = per_node
                    .iter_mut()
                    .map(|answers| yes_no(answers.next().unwrap_or(Err(Failure::TimedOut))))
                    .collect();
                let report = self.report(key, Phase::Renew, votes, sent, ttl, drift);
                if report.reached() && report.validity.is_some() {
                    Ok(validity::deadline(sent, ttl, drift))
                } else {
                    Err(self.round_error(report, Phase::Renew))
                }
            })
            .collect()
    }

    /// [`Rounds::renew`] for a token without a lease: a definite "no longer held" is
    /// `Ok(false)` rather than [`Error::LeaseLost`].
    pub(crate) async fn renew_token(&self, key: &str, token: &Token) -> Result<bool, Error> {
        Error::check_key(key)?;
        match self.renew(key, token).await {
            Ok(_deadline) => Ok(true),
            Err(Error::LeaseLost { cause: LossCause::Refused, .. }) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// RELEASE everywhere. `Ok(true)` if a majority (the node, for N = 1) still held the lease,
    /// `Ok(false)` if a majority no longer did, an error when the answers leave that open.
    ///
    /// Returns as soon as that answer is known; the RELEASEs to nodes that had not answered
    /// by then finish in the background (each bounded by the per-node timeout).
    pub(crate) async fn release(&self, key: &str, token: &Token) -> Result<bool, Error> {
        Error::check_key(key)?;
        let Some(rounds) = self.me.upgrade() else {
            return self.held(self.release_report(key, token).await);
        };
        let sent = Instant::now();
        let requests = (0..self.nodes.len()).map(|i| release_on(&rounds, i, key, token));
        let (votes, rest) = round::until_settled(requests, self.quorum()).await;
        let behind: Vec<usize> = (0..votes.len()).filter(|&i| matches!(votes[i], Vote::NotAwaited)).collect();
        let report = self.report(key, Phase::Release, votes, sent, Duration::ZERO, Duration::ZERO);
        self.trail(key, token, rest, &behind).await;
        self.held(report)
    }

    /// What a release round's report says: whether a majority held the lease, or the error.
    fn held(&self, report: QuorumReport) -> Result<bool, Error> {
        match report.majority_held() {
            Some(held) => Ok(held),
            None => Err(self.round_error(report, Phase::Release)),
        }
    }

    /// RELEASE everywhere, waiting for every node (up to its timeout), and how each answered:
    /// for callers already in the background (a dropped lease's release).
    pub(crate) async fn release_report(&self, key: &str, token: &Token) -> QuorumReport {
        let sent = Instant::now();
        let replies = join_all(self.nodes.iter().map(|n| n.release(key, token))).await;
        let votes = replies.into_iter().map(yes_no).collect();
        let report = self.report(key, Phase::Release, votes, sent, Duration::ZERO, Duration::ZERO);
        if !report.votes.iter().all(|v| v.vote.answered()) {
            tracing::debug!(%report, "release did not reach every node; their leases expire after the ttl");
        }
        report
    }

    /// A failed acquisition round's releases, to the nodes in `owed`: awaited for the nodes
    /// that answered the round (they answer again at once), left to finish in the background
    /// for the others, whose leases, if any, expire after the ttl should the release not
    /// reach them.
    async fn give_back(&self, key: &str, token: &Token, report: &QuorumReport, owed: &[usize]) {
        let (now, later): (Vec<usize>, Vec<usize>) =
            owed.iter().partition(|&&i| report.votes.get(i).is_some_and(|v| v.vote.answered()));
        let now =
            join_all(now.iter().filter_map(|&i| self.nodes.get(i)).map(|node| node.release(key, token)));
        let later = async {
            match self.me.upgrade() {
                Some(rounds) => {
                    let requests = later.iter().map(|&i| (i, release_on(&rounds, i, key, token)));
                    self.trail(key, token, Stragglers::new(requests), &later).await;
                }
                None => {
                    let nodes = later.iter().filter_map(|&i| self.nodes.get(i));
                    join_all(nodes.map(|node| node.release(key, token))).await;
                }
            }
        };
        let (replies, ()) = join(now, later).await;
        let unanswered = replies.iter().filter(|r| r.is_err()).count();
        if unanswered > 0 {
            tracing::debug!(key, unanswered, "release after a failed round did not reach every node");
        }
    }

    /// Lets `rest`, releases of `token` on `key` to the nodes `behind`, finish in a task of
    /// their own, each registered so that no acquisition request of the token overtakes it
    /// (see the `trailing` module). Without a Tokio runtime to spawn on, or with too many
    /// releases in the background already, they are awaited here instead.
    async fn trail(
        &self,
        key: &str,
        token: &Token,
        mut rest: Stragglers<BoxFuture<'static, Vote>>,
        behind: &[usize],
    ) {
        let batch = self.trailing.batch(behind, key, token);
        let (Some(mut batch), Ok(runtime)) = (batch, tokio::runtime::Handle::try_current()) else {
            while rest.next().await.is_some() {}
            return;
        };
        // Polled once here, in the caller's task, so that each RELEASE is on its node's
        // connection (when one is open) before the caller moves on.
        while let Some(Some((i, vote))) = rest.next().now_or_never() {
            batch.ended(i, &vote);
        }
        if rest.is_empty() {
            return batch.close();
        }
        runtime.spawn(async move {
            while let Some((i, vote)) = rest.next().await {
                batch.ended(i, &vote);
            }
            batch.close();
        });
    }

    pub(crate) fn report(
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
    pub(crate) fn round_error(&self, report: QuorumReport, phase: Phase) -> Error {
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

/// A RELEASE of `token` on `key` to node `i` of `rounds` that owns what it needs, so it can
/// finish in a background task.
fn release_on(rounds: &Arc<Rounds>, i: usize, key: &str, token: &Token) -> BoxFuture<'static, Vote> {
    let (rounds, key, token) = (Arc::clone(rounds), key.to_owned(), token.clone());
    async move {
        match rounds.nodes.get(i) {
            Some(node) => yes_no(node.release(&key, &token).await),
            None => Vote::NotAwaited,
        }
    }
    .boxed()
}

fn yes_no(reply: Result<bool, Failure>) -> Vote {
    match reply {
        Ok(true) => Vote::Confirmed,
        Ok(false) => Vote::Refused,
        Err(failure) => failure.into_vote(),
    }
}
