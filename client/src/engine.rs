//! The one lease algorithm every locker runs, on one server or on N independent masters.
//!
//! A single server is simply N = 1 (quorum 1), so [`Locker`](crate::Locker) and
//! [`Redlock`](crate::Redlock) share this code: send the command to every node in parallel
//! (each bounded by the per-node timeout), count votes until the outcome is certain (a majority
//! said yes, or enough said no or failed to rule one out; slower nodes are not waited for), and
//! charge the time the round took against the lease: `validity = ttl - elapsed - drift`, with
//! `elapsed` measured from *before* the first request.
//!
//! Each method here is one round. Retrying rounds, and releasing what a caller gave up on
//! midway, belong to the lease being taken (the lease module's `Claim`), which holds its engine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;

use crate::config::LockConfig;
use crate::error::{Error, LossCause};
use crate::fenced::{self, Fencing};
use crate::node::{Failure, Node};
use crate::quorum::{quorum, NodeVote, Phase, QuorumReport, Vote};
use crate::round;
use crate::token::Token;
use crate::validity;

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

impl Engine {
    /// An engine over `nodes`, each given the configured per-node timeout.
    pub(crate) fn new(nodes: Vec<Node>, config: LockConfig, fencing: Fencing) -> Arc<Engine> {
        let nodes = nodes.into_iter().map(|n| n.with_timeout(config.node_timeout())).collect();
        Arc::new(Engine { nodes, config, fencing })
    }

    pub(crate) fn quorum(&self) -> usize {
        quorum(self.nodes.len())
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

    /// [`Engine::renew`] for a token without a lease: a definite "no longer held" is
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

    /// RELEASE everywhere, waiting for every node (up to its timeout), and how each answered.
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
