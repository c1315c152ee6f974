//! Pure vote counting for Redlock and the per-node report handed back to callers.

use std::fmt;
use std::time::Duration;

use crate::cause::Cause;

/// The majority of `nodes`: `nodes / 2 + 1`.
///
/// With one node the quorum is that node, so a single-server lock is Redlock with N = 1.
pub(crate) fn quorum(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// Which round of requests a [`QuorumReport`] describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `FENCEDLOCK.ACQUIRE` (followed by `FENCEDLOCK.RAISE` in fenced Redlock).
    Acquire,
    /// `FENCEDLOCK.RENEW`.
    Renew,
    /// `FENCEDLOCK.RELEASE`.
    Release,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Acquire => "acquire",
            Phase::Renew => "renew",
            Phase::Release => "release",
        })
    }
}

/// How one node answered one request.
#[derive(Debug, Clone)]
pub enum Vote {
    /// The node granted the lease (ACQUIRE) or confirmed the raised fence (RAISE) with this fence.
    Granted {
        /// The fence the node replied with.
        fence: u64,
    },
    /// The node confirmed that we still held the lease (RENEW or RELEASE replied 1); as a
    /// raise, that the node's grant already carried the quorum's fence (no RAISE was sent).
    Confirmed,
    /// The node refused: another token holds the lease, or ours is no longer held there.
    Refused,
    /// The node did not answer within the per-node timeout.
    TimedOut,
    /// The node answered with an error or could not be reached. The error never contains
    /// the lease token (see [`Error`](crate::Error)).
    Failed {
        /// The client or server error.
        error: redis::RedisError,
    },
    /// The round was decided (a majority said yes, or enough said no to rule one out) before
    /// this node answered, so its answer was not waited for. An ACQUIRE, RENEW or RAISE not
    /// waited for may or may not reach the node; a lease is released on every node either way,
    /// so a late grant is cleaned up. A RELEASE not waited for still goes out and finishes in
    /// the background, bounded by the per-node timeout.
    NotAwaited,
}

impl Vote {
    /// Whether this vote counts towards the quorum.
    pub fn is_yes(&self) -> bool {
        matches!(self, Vote::Granted { .. } | Vote::Confirmed)
    }

    /// Whether the node answered definitively (yes or no), as opposed to timing out, failing
    /// or not being waited for.
    pub fn answered(&self) -> bool {
        matches!(self, Vote::Granted { .. } | Vote::Confirmed | Vote::Refused)
    }

    /// Whether the node could not answer: timed out, or failed with an outage (unreachable,
    /// loading, out of memory, restart grace, ...).
    pub(crate) fn is_outage(&self) -> bool {
        match self {
            Vote::TimedOut => true,
            Vote::Failed { error } => Cause::of(error).is_outage(),
            _ => false,
        }
    }

    /// Whether the failure can never turn into a yes by retrying (e.g. `WRONGTYPE`, unknown command).
    pub(crate) fn is_permanent_failure(&self) -> bool {
        match self {
            Vote::Failed { error } => !Cause::of(error).is_retryable(),
            _ => false,
        }
    }
}

impl fmt::Display for Vote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Vote::Granted { fence } => write!(f, "granted fence {fence}"),
            Vote::Confirmed => f.write_str("confirmed"),
            Vote::Refused => f.write_str("refused"),
            Vote::TimedOut => f.write_str("timed out"),
            Vote::Failed { error } => write!(f, "failed ({error})"),
            Vote::NotAwaited => f.write_str("not awaited"),
        }
    }
}

/// Counts a round's votes as they arrive and says when its outcome can no longer change:
/// `quorum` yes votes are in, or so few requests are still out that the yes votes can no
/// longer reach `quorum` (refusals and failures exceed the `N - quorum` a majority can spare).
///
/// [`Tally::either_way`] also tells a definite no from an unknown: it is decided only once
/// the answer to "did a majority say yes, or did a majority refuse?" can no longer change
/// (what [`QuorumReport::majority_held`] reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tally {
    quorum: usize,
    outstanding: usize,
    yes: usize,
    /// Refusals; counted only by an `either_way` tally.
    refused: Option<usize>,
    /// Refusals that make a definite no: more than the `N - quorum` a majority can spare.
    definite_no: usize,
}

impl Tally {
    /// A round of `requests` requests needing `quorum` yes votes.
    pub(crate) fn new(quorum: usize, requests: usize) -> Tally {
        Tally { quorum, outstanding: requests, yes: 0, refused: None, definite_no: usize::MAX }
    }

    /// A round of `requests` requests (one per node) decided once a majority said yes, a
    /// majority refused, or neither can happen any more.
    pub(crate) fn either_way(quorum: usize, requests: usize) -> Tally {
        let definite_no = requests.saturating_sub(quorum) + 1;
        Tally { refused: Some(0), definite_no, ..Tally::new(quorum, requests) }
    }

    /// Counts one answer (a yes, or anything else).
    pub(crate) fn record(&mut self, vote: &Vote) {
        self.outstanding = self.outstanding.saturating_sub(1);
        if vote.is_yes() {
            self.yes += 1;
        } else if let (Some(refused), Vote::Refused) = (self.refused.as_mut(), vote) {
            *refused += 1;
        }
    }

    /// Whether the remaining answers cannot change whether the quorum is reached (and, for
    /// an `either_way` tally, whether a majority refused).
    pub(crate) fn decided(&self) -> bool {
        let yes_settled = self.yes >= self.quorum || self.yes + self.outstanding < self.quorum;
        match self.refused {
            None => yes_settled,
            Some(refused) => {
                self.yes >= self.quorum
                    || refused >= self.definite_no
                    || (yes_settled && refused + self.outstanding < self.definite_no)
            }
        }
    }
}

/// One node's part in a round: its vote and, for fenced Redlock, its answer to the raise.
#[derive(Debug, Clone)]
pub struct NodeVote {
    /// The node's address.
    pub node: String,
    /// The node's answer to the round's main command.
    pub vote: Vote,
    /// Fenced Redlock only: the node's answer to `FENCEDLOCK.RAISE`, asked only of granting
    /// nodes whose fence was below the quorum's maximum; [`Vote::Confirmed`] for a node that
    /// granted the maximum itself; `None` for a node not asked (it did not grant, or a
    /// majority had granted the maximum, so no RAISE was sent).
    pub raise: Option<Vote>,
}

/// How every node voted in one round, with the quorum and the timing that decided it.
#[derive(Debug, Clone)]
pub struct QuorumReport {
    /// The lock key.
    pub key: String,
    /// The round.
    pub phase: Phase,
    /// Votes needed (`N / 2 + 1`).
    pub quorum: usize,
    /// One entry per node, in the order the nodes were configured.
    pub votes: Vec<NodeVote>,
    /// Time from before the first request was sent until the round was decided (a round ends
    /// as soon as its outcome is certain; see [`Vote::NotAwaited`]).
    pub elapsed: Duration,
    /// The validity left at the end of the round; `None` when the round took longer than
    /// the ttl minus drift allowed.
    pub validity: Option<Duration>,
}

impl QuorumReport {
    /// Number of nodes that voted yes in the main round.
    pub fn yes(&self) -> usize {
        self.votes.iter().filter(|v| v.vote.is_yes()).count()
    }

    /// Number of nodes that refused in the main round.
    pub fn refused(&self) -> usize {
        self.votes.iter().filter(|v| matches!(v.vote, Vote::Refused)).count()
    }

    /// Number of nodes that confirmed the raise (fenced Redlock).
    pub fn raised(&self) -> usize {
        self.votes.iter().filter(|v| v.raise.as_ref().is_some_and(Vote::is_yes)).count()
    }

    /// The highest fence granted in the main round.
    pub fn max_fence(&self) -> Option<u64> {
        self.votes
            .iter()
            .filter_map(|v| match v.vote {
                Vote::Granted { fence } => Some(fence),
                _ => None,
            })
            .max()
    }

    /// Whether a majority voted yes.
    pub fn reached(&self) -> bool {
        self.yes() >= self.quorum
    }

    /// Whether so many nodes refused that no majority can have said yes: the answer is a
    /// definite no rather than "unknown".
    pub fn majority_refused(&self) -> bool {
        self.refused() > self.votes.len() - self.quorum
    }

    /// Whether a majority held what the round asked about: `Some(true)` once a majority said
    /// yes, `Some(false)` once so many refused that no majority can have, `None` while the
    /// nodes that timed out, failed or were not awaited could still tip it either way.
    pub(crate) fn majority_held(&self) -> Option<bool> {
        if self.reached() {
            Some(true)
        } else if self.majority_refused() {
            Some(false)
        } else {
            None
        }
    }

    /// Whether enough nodes failed in a way that retrying cannot fix to rule out a majority.
    pub(crate) fn could_still_succeed(&self) -> bool {
        let permanent = self.votes.iter().filter(|v| v.vote.is_permanent_failure()).count();
        self.votes.len() - permanent >= self.quorum
    }
}

impl fmt::Display for QuorumReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {:?}: {}/{} yes, need {}",
            self.phase,
            self.key,
            self.yes(),
            self.votes.len(),
            self.quorum
        )?;
        if self.votes.iter().any(|v| v.raise.is_some()) {
            write!(f, ", {} raised", self.raised())?;
        }
        if self.validity.is_none() && self.phase != Phase::Release {
            write!(f, ", validity exhausted after {:?}", self.elapsed)?;
        }
        f.write_str(" (")?;
        for (i, v) in self.votes.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{}: {}", v.node, v.vote)?;
            if let Some(raise) = &v.raise {
                write!(f, ", raise {raise}")?;
            }
        }
        f.write_str(")")
    }
}

/// An acquisition round's report from `votes` (node names `n0`, `n1`, ...), for unit tests.
#[cfg(test)]
pub(crate) fn report(votes: Vec<Vote>) -> QuorumReport {
    QuorumReport {
        key: "k".into(),
        phase: Phase::Acquire,
        quorum: quorum(votes.len()),
        votes: votes
            .into_iter()
            .enumerate()
            .map(|(i, vote)| NodeVote { node: format!("n{i}"), vote, raise: None })
            .collect(),
        elapsed: Duration::from_millis(3),
        validity: Some(Duration::from_millis(900)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed() -> Vote {
        Vote::Failed { error: redis::RedisError::from((redis::ErrorKind::Io, "connection refused")) }
    }

    fn wrongtype() -> Vote {
        Vote::Failed {
            error: redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                "WRONGTYPE",
            )),
        }
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        assert_eq!(quorum(1), 1);
        assert_eq!(quorum(2), 2);
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(4), 3);
        assert_eq!(quorum(5), 3);
        assert_eq!(quorum(7), 4);
        // Two disjoint sets can never both reach the quorum.
        for n in 1..20 {
            assert!(2 * quorum(n) > n, "n={n}");
        }
    }

    #[test]
    fn three_of_five_reaches_two_of_five_does_not() {
        let g = |fence| Vote::Granted { fence };
        let r = report(vec![g(1), g(9), g(4), Vote::TimedOut, failed()]);
        assert!(r.reached());
        assert_eq!(r.yes(), 3);
        assert_eq!(r.max_fence(), Some(9));
        assert!(!r.majority_refused());

        let r = report(vec![g(1), g(9), Vote::Refused, Vote::TimedOut, failed()]);
        assert!(!r.reached());
        assert_eq!(r.max_fence(), Some(9));
        assert!(!r.majority_refused(), "one refusal does not rule out a majority");
    }

    #[test]
    fn refusals_beyond_the_minority_are_a_definite_no() {
        let r = report(vec![Vote::Confirmed, Vote::Refused, Vote::Refused, Vote::Refused, Vote::TimedOut]);
        assert!(r.majority_refused());
        let r = report(vec![Vote::Confirmed, Vote::Refused, Vote::Refused, Vote::TimedOut, Vote::TimedOut]);
        assert!(!r.majority_refused());
        let r = report(vec![Vote::Refused]);
        assert!(r.majority_refused());
    }

    #[test]
    fn a_majority_held_only_when_the_answers_decide_it() {
        let (yes, no) = (|| Vote::Confirmed, || Vote::Refused);
        assert_eq!(report(vec![yes(), yes(), Vote::TimedOut]).majority_held(), Some(true));
        assert_eq!(report(vec![no(), no(), Vote::TimedOut]).majority_held(), Some(false));
        assert_eq!(report(vec![yes()]).majority_held(), Some(true));
        assert_eq!(report(vec![no()]).majority_held(), Some(false));
        assert_eq!(report(vec![Vote::TimedOut]).majority_held(), None);
        // One yes, one no and one unknown: the unknown node decides, so nobody can say.
        assert_eq!(report(vec![yes(), no(), Vote::TimedOut]).majority_held(), None);
        assert_eq!(report(vec![yes(), no(), failed()]).majority_held(), None);
        assert_eq!(report(vec![yes(), yes(), no(), no(), Vote::TimedOut]).majority_held(), None);
    }

    #[test]
    fn raise_confirmations_are_counted_separately() {
        let mut r =
            report(vec![Vote::Granted { fence: 3 }, Vote::Granted { fence: 5 }, Vote::Granted { fence: 4 }]);
        r.votes[0].raise = Some(Vote::Granted { fence: 5 });
        r.votes[1].raise = Some(Vote::Refused);
        r.votes[2].raise = Some(Vote::TimedOut);
        assert_eq!(r.yes(), 3);
        assert_eq!(r.raised(), 1);
        let text = r.to_string();
        assert!(text.contains("1 raised"), "{text}");
        assert!(text.contains("n1: granted fence 5, raise refused"), "{text}");
    }

    #[test]
    fn permanent_failures_on_a_majority_stop_retries() {
        let r = report(vec![wrongtype(), wrongtype(), Vote::Refused]);
        assert!(!r.could_still_succeed());
        let r = report(vec![wrongtype(), failed(), Vote::Refused]);
        assert!(r.could_still_succeed());
    }

    #[test]
    fn a_round_is_decided_by_a_majority_of_yes_or_of_no() {
        let yes = Vote::Granted { fence: 1 };
        let no = Vote::Refused;
        // 5 nodes: decided after the third yes, however the others answer.
        let mut t = Tally::new(quorum(5), 5);
        for v in [&yes, &no, &yes] {
            t.record(v);
            assert!(!t.decided(), "{t:?}");
        }
        t.record(&yes);
        assert!(t.decided());
        // 5 nodes: three refusals or failures rule out a majority even with two out.
        let mut t = Tally::new(quorum(5), 5);
        t.record(&no);
        t.record(&failed());
        assert!(!t.decided(), "{t:?}");
        t.record(&Vote::TimedOut);
        assert!(t.decided(), "{t:?}");
        // 2 yes and 3 still out is undecided: those 3 may still say yes.
        let mut t = Tally::new(quorum(5), 5);
        t.record(&yes);
        t.record(&yes);
        assert!(!t.decided());
        // One node: decided by its answer only.
        let mut t = Tally::new(quorum(1), 1);
        assert!(!t.decided());
        t.record(&no);
        assert!(t.decided());
        // A raise sent to 3 granting nodes of 5 needs all 3.
        let mut t = Tally::new(quorum(5), 3);
        t.record(&yes);
        t.record(&yes);
        assert!(!t.decided());
        let mut u = t;
        t.record(&yes);
        u.record(&no);
        assert!(t.decided() && u.decided());
        // Nothing to ask: decided at once (and not reached).
        assert!(Tally::new(2, 0).decided());
    }

    #[test]
    fn an_either_way_round_waits_until_a_majority_answer_is_known() {
        let (yes, no) = (Vote::Confirmed, Vote::Refused);
        let tally = |votes: &[&Vote]| {
            let mut t = Tally::either_way(quorum(5), 5);
            for v in votes {
                t.record(v);
            }
            t
        };
        // Three yes: a majority held, whatever the rest say.
        assert!(tally(&[&yes, &yes, &yes]).decided());
        // Three refusals: a definite no.
        assert!(tally(&[&no, &no, &no]).decided());
        // A yes-only tally would stop at three non-yes votes; this one waits, because the two
        // nodes still out may make it a definite no.
        let t = tally(&[&no, &no, &Vote::TimedOut]);
        assert!(!t.decided(), "{t:?}");
        assert!(!tally(&[&yes, &no, &no, &Vote::TimedOut]).decided());
        // Neither is possible any more: two yes, two no and a failure; or three failures.
        assert!(tally(&[&yes, &yes, &no, &no, &Vote::TimedOut]).decided());
        let failed = Vote::TimedOut;
        assert!(!tally(&[&failed, &failed]).decided());
        assert!(tally(&[&failed, &failed, &failed]).decided(), "neither three yes nor three no");
        // Two yes and three out: open.
        assert!(!tally(&[&yes, &yes]).decided());
        // One node: its answer decides.
        let mut t = Tally::either_way(1, 1);
        assert!(!t.decided());
        t.record(&Vote::TimedOut);
        assert!(t.decided());
        // Every decided tally agrees with majority_held over the votes it saw, whatever the
        // votes still out would have been (checked over all 5-vote sequences of yes/no/fail).
        let kinds = [Vote::Confirmed, Vote::Refused, Vote::TimedOut];
        for code in 0..3usize.pow(5) {
            let votes: Vec<Vote> = (0..5).map(|i| kinds[(code / 3usize.pow(i)) % 3].clone()).collect();
            let mut t = Tally::either_way(quorum(5), 5);
            for (seen, v) in votes.iter().enumerate() {
                if t.decided() {
                    let mut partial: Vec<Vote> = votes[..seen].to_vec();
                    partial.resize(5, Vote::NotAwaited);
                    assert_eq!(
                        report(partial).majority_held(),
                        report(votes.clone()).majority_held(),
                        "{votes:?} decided after {seen}"
                    );
                    break;
                }
                t.record(v);
            }
        }
    }

    #[test]
    fn not_awaited_is_neither_yes_nor_no() {
        let r = report(vec![
            Vote::Granted { fence: 2 },
            Vote::Granted { fence: 3 },
            Vote::Granted { fence: 1 },
            Vote::NotAwaited,
            Vote::NotAwaited,
        ]);
        assert!(r.reached());
        assert_eq!(r.refused(), 0);
        assert!(!Vote::NotAwaited.answered() && !Vote::NotAwaited.is_yes());
        assert!(r.could_still_succeed());
        assert!(r.to_string().contains("n4: not awaited"), "{r}");
    }

    #[test]
    fn display_mentions_exhausted_validity() {
        let mut r = report(vec![Vote::Granted { fence: 1 }]);
        r.validity = None;
        assert!(r.to_string().contains("validity exhausted"), "{r}");
    }
}
