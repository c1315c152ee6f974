//! One request sent to several nodes at once and decided by majority: votes are gathered as
//! they arrive, and the round ends the moment its outcome is certain instead of waiting for
//! the slowest node up to the per-node timeout.

use std::future::Future;

use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;

use crate::quorum::{Tally, Vote};

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
    let mut pending: FuturesUnordered<_> =
        requests.into_iter().enumerate().map(|(i, request)| request.map(move |vote| (i, vote))).collect();
    let mut votes: Vec<Option<Vote>> = (0..pending.len()).map(|_| None).collect();
    let mut tally = Tally::new(quorum, pending.len());
    while !tally.decided() {
        let Some((i, vote)) = pending.next().await else {
            break;
        };
        tally.record(&vote);
        votes[i] = Some(vote);
    }
    // Whatever already arrived costs nothing to report.
    while let Some(Some((i, vote))) = pending.next().now_or_never() {
        votes[i] = Some(vote);
    }
    votes.into_iter().map(|vote| vote.unwrap_or(Vote::NotAwaited)).collect()
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

    #[tokio::test]
    async fn nothing_to_ask_is_decided_at_once() {
        let none: Vec<std::future::Ready<Vote>> = Vec::new();
        assert!(until_decided(none, 2).await.is_empty());
    }
}
