//! One request sent to several nodes at once and decided by majority: votes are gathered as
//! they arrive, and the round ends the moment its outcome is certain instead of waiting for
//! the slowest node up to the per-node timeout.

use std::future::{ready, Future, Ready};

use futures::future::{join, Join};
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;

use crate::quorum::{Tally, Vote};

/// The requests of a round still in flight when it was decided, each with its node's index.
/// Not dropped but handed back, for requests that must still reach their node (releases).
pub(crate) struct Stragglers<Fut: Future<Output = Vote>> {
    /// Each request joined with its (ready) index, so the index comes back with the vote;
    /// `None` when there was only one request, awaited on its own.
    pending: Option<FuturesUnordered<Join<Ready<usize>, Fut>>>,
}

impl<Fut: Future<Output = Vote>> Stragglers<Fut> {
    /// `requests`, each with its node's index, not yet polled.
    pub(crate) fn new(requests: impl IntoIterator<Item = (usize, Fut)>) -> Self {
        Stragglers {
            pending: Some(requests.into_iter().map(|(i, request)| join(ready(i), request)).collect()),
        }
    }

    /// The next request to finish, with its node's index; `None` once all have.
    pub(crate) async fn next(&mut self) -> Option<(usize, Vote)> {
        self.pending.as_mut()?.next().await
    }

    /// How many requests are still in flight.
    fn len(&self) -> usize {
        self.pending.as_ref().map_or(0, FuturesUnordered::len)
    }

    /// Whether every request finished.
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.as_ref().is_none_or(FuturesUnordered::is_empty)
    }
}

/// Awaits `requests` (one per node, in node order) together until `quorum` of them said yes
/// or the others can no longer make up a quorum, and returns every node's vote in that order.
///
/// Answers that are already in when the round is decided are recorded too; requests still in
/// flight are dropped and reported as [`Vote::NotAwaited`]. Such a request may or may not
/// reach its node: the `redis` client skips a queued request whose caller has gone unless it
/// was already being written, and one still waiting for the connection to open is never sent.
/// Either way it cannot overtake a later request on the same connection, so a RELEASE sent
/// afterwards is processed after it if it is processed at all.
pub(crate) async fn until_decided<I, Fut>(requests: I, quorum: usize) -> Vec<Vote>
where
    I: IntoIterator<Item = Fut>,
    Fut: Future<Output = Vote>,
{
    let (votes, _dropped) = gather(requests, |n| Tally::new(quorum, n)).await;
    votes
}

/// Like [`until_decided`], but decided only once whether a majority said yes *or a majority
/// refused* can no longer change ([`Tally::either_way`]), and the requests still in flight are
/// handed back instead of dropped, for the caller to finish in the background.
pub(crate) async fn until_settled<I, Fut>(requests: I, quorum: usize) -> (Vec<Vote>, Stragglers<Fut>)
where
    I: IntoIterator<Item = Fut>,
    Fut: Future<Output = Vote>,
{
    gather(requests, |n| Tally::either_way(quorum, n)).await
}

/// Runs `requests` together until the tally `rule` makes for their number is decided.
async fn gather<I, Fut>(requests: I, rule: impl FnOnce(usize) -> Tally) -> (Vec<Vote>, Stragglers<Fut>)
where
    I: IntoIterator<Item = Fut>,
    Fut: Future<Output = Vote>,
{
    // One node (a `Locker` on one server, most leases): its answer decides any tally, so it
    // is awaited where it is. A set of futures copies each request's state into a task of its
    // own and allocates its queue: a third of the client's own instructions per lease
    // (callgrind, issue #44). (The iterator ends within the block: it may not live across an
    // await, which would make the round's future lose `Send`.)
    let several = {
        let mut requests = requests.into_iter();
        let first = requests.next();
        match requests.next() {
            None => Err(first),
            Some(second) => {
                Ok(Stragglers::new(first.into_iter().chain([second]).chain(requests).enumerate()))
            }
        }
    };
    let mut rest = match several {
        Ok(rest) => rest,
        Err(only) => {
            let votes = match only {
                Some(request) => vec![request.await],
                None => Vec::new(),
            };
            return (votes, Stragglers { pending: None });
        }
    };
    let mut votes: Vec<Option<Vote>> = (0..rest.len()).map(|_| None).collect();
    let mut tally = rule(votes.len());
    while !tally.decided() {
        let Some((i, vote)) = rest.next().await else {
            break;
        };
        tally.record(&vote);
        votes[i] = Some(vote);
    }
    // Whatever already arrived costs nothing to report.
    while let Some(Some((i, vote))) = rest.next().now_or_never() {
        votes[i] = Some(vote);
    }
    (votes.into_iter().map(|vote| vote.unwrap_or(Vote::NotAwaited)).collect(), rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn after(ms: u64, vote: Vote) -> Vote {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        vote
    }

    fn yes() -> Vote {
        Vote::Granted { fence: 1 }
    }

    fn kinds(votes: &[Vote]) -> Vec<&'static str> {
        votes
            .iter()
            .map(|v| match v {
                Vote::Granted { .. } => "yes",
                Vote::Refused => "no",
                Vote::NotAwaited => "-",
                _ => "other",
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn stops_at_a_majority_of_yes() {
        let started = tokio::time::Instant::now();
        let votes = until_decided(
            vec![
                after(1, yes()).boxed(),
                after(10_000, yes()).boxed(),
                after(2, yes()).boxed(),
                after(3, yes()).boxed(),
                after(10_000, yes()).boxed(),
            ],
            3,
        )
        .await;
        assert_eq!(kinds(&votes), ["yes", "-", "yes", "yes", "-"]);
        assert!(started.elapsed() < Duration::from_millis(10));
    }

    #[tokio::test(start_paused = true)]
    async fn stops_once_a_majority_is_impossible() {
        let started = tokio::time::Instant::now();
        let votes = until_decided(
            vec![
                after(1, Vote::Refused).boxed(),
                after(2, yes()).boxed(),
                after(3, Vote::TimedOut).boxed(),
                after(4, Vote::Refused).boxed(),
                after(10_000, yes()).boxed(),
            ],
            3,
        )
        .await;
        assert_eq!(kinds(&votes), ["no", "yes", "other", "no", "-"]);
        assert!(started.elapsed() < Duration::from_millis(10));
    }

    #[tokio::test(start_paused = true)]
    async fn waits_while_the_outcome_is_open_and_records_answers_already_in() {
        let votes = until_decided(
            vec![
                after(5, yes()).boxed(),
                after(500, yes()).boxed(),
                after(5, yes()).boxed(),
                after(5, Vote::Refused).boxed(),
            ],
            3,
        )
        .await;
        // Two yes and a no after 5 ms: the fourth node decides, so it is waited for. All
        // answers arrived by then.
        assert_eq!(kinds(&votes), ["yes", "yes", "yes", "no"]);
        let ready = until_decided(
            vec![
                std::future::ready(yes()).boxed(),
                std::future::ready(yes()).boxed(),
                std::future::ready(Vote::Refused).boxed(),
            ],
            2,
        )
        .await;
        assert_eq!(kinds(&ready), ["yes", "yes", "no"], "the ready third answer is kept");
    }

    #[tokio::test(start_paused = true)]
    async fn a_settled_round_hands_back_what_is_still_in_flight() {
        let started = tokio::time::Instant::now();
        let (votes, mut rest) = until_settled(
            vec![
                after(1, Vote::Confirmed).boxed(),
                after(500, Vote::Confirmed).boxed(),
                after(2, Vote::Confirmed).boxed(),
                after(3, Vote::Confirmed).boxed(),
                after(900, Vote::Refused).boxed(),
            ],
            3,
        )
        .await;
        assert!(started.elapsed() < Duration::from_millis(10));
        assert!(votes[1..2].iter().chain(&votes[4..]).all(|v| matches!(v, Vote::NotAwaited)), "{votes:?}");
        // The stragglers still run to the end, each with its node's index.
        let mut late = Vec::new();
        while let Some((i, vote)) = rest.next().await {
            late.push((i, vote.is_yes()));
        }
        assert_eq!(late, [(1, true), (4, false)]);
        assert!(rest.is_empty());
        assert!(started.elapsed() >= Duration::from_millis(900));

        // Two refusals and a timeout: a yes-only round would stop; this one waits to tell a
        // definite no from an unknown.
        let (votes, rest) = until_settled(
            vec![
                after(1, Vote::Refused).boxed(),
                after(2, Vote::Refused).boxed(),
                after(3, Vote::TimedOut).boxed(),
                after(50, Vote::Refused).boxed(),
                after(10_000, Vote::Confirmed).boxed(),
            ],
            3,
        )
        .await;
        assert_eq!(kinds(&votes), ["no", "no", "other", "no", "-"]);
        assert!(!rest.is_empty());
    }

    #[tokio::test]
    async fn nothing_to_ask_is_decided_at_once() {
        let none: Vec<std::future::Ready<Vote>> = Vec::new();
        assert!(until_decided(none, 2).await.is_empty());
    }
}
