//! Waiting for a busy lock on the server (`FENCEDLOCK.ACQUIRE … BLOCK`) instead of polling:
//! one step of an acquisition that may wait, taken by the lease module's loop.
//!
//! **One server** (N = 1): the blocked ACQUIRE is the whole acquisition. The server queues it in
//! arrival order and answers it with a fence the moment the lease ends (release, expiry,
//! deletion), or nil when the wait runs out. The lease began at the handoff, somewhere between
//! sending and the reply, so its validity is measured, conservatively, from sending; if the
//! wait used up more than a quarter of the usable lease time, one RENEW re-anchors it (the
//! validity then runs from before the RENEW).
//!
//! **Redlock** (N > 1): waiting on every node's queue at once splits the votes — contender A
//! first in two queues, B in the other three, nobody with a majority — and everyone stalls
//! until the leases expire. So every contender waits on *one* node, the same for everyone: the
//! key's designated node, the first in a ranking of the nodes by a hash of key and node
//! address (rendezvous hashing: independent of the order in which a client lists the nodes,
//! and spread over the nodes across keys). The designated node's queue orders the contenders;
//! its grant is only a reservation. The holder of the reservation then runs a regular round on
//! every node (the designated one re-enters at once for its own token), each node allowed to
//! wait up to one node timeout (the previous holder's releases to the other nodes may still be
//! in flight, or its leases there end a moment later than on the designated node). The round's
//! validity is measured from its own start, as for any round; on failure it releases
//! everywhere, which passes the reservation to the next in the queue, and the caller backs off
//! with jitter before queueing again.
//!
//! A designated node that cannot queue us (unreachable, silent, refusing) is passed over for
//! the next in the ranking — every client that sees the same failure picks the same node —
//! and one that did not answer is passed over for a while
//! ([`PASS_OVER_FOR`](crate::node::pool::PASS_OVER_FOR)) before it is tried first again. A node
//! that answers nothing while we wait on it would stall everyone who queued there, so it is
//! watched: a `PING` on its shared connection at once and then every [`WATCH_EVERY`]; a ping
//! without an answer within the node timeout abandons the wait (closing its connection) for
//! the next node. A node to which a release of ours from an earlier round is still
//! unanswered is passed over too: the waiting request, on a connection of its own, could
//! overtake that release (see the `trailing` module). If the designated node's module cannot
//! wait, the acquisition polls in rounds with backoff; so it does when no candidate could
//! queue us (those after `N - quorum + 1` failures could not make a majority anyway).

use std::future::Future;
use std::time::{Duration, Instant};

use fencedlock_protocol::ReplyError;

use crate::acquisition::rounds::{Grant, Rounds};
use crate::acquisition::terms::Request;
use crate::cause;
use crate::error::Error;
use crate::node::replicas::Confirm;
use crate::node::{AcquireReply, Failure, Node};
use crate::token::Token;

/// How often a Redlock waiter checks that the node it waits on still answers.
pub(crate) const WATCH_EVERY: Duration = Duration::from_secs(1);

/// What one waiting step came to.
pub(crate) enum Turn {
    /// One server granted the lease: the acquisition is done.
    Granted(Grant),
    /// Redlock: the designated node granted us; take the majority with a round that may wait
    /// briefly on each node.
    Reserved,
    /// Waiting on the server is not possible here (turned off, the module is older, or no
    /// candidate node could queue us): run a plain round, and back off if it fails.
    Poll,
    /// The server answered nil at the deadline: nothing was granted, nothing is held.
    TimedOut,
    /// A cluster node's wait was interrupted (the key was deleted or its slot moved): nothing
    /// was granted; ask again at once (the cluster connection routes to the slot's new owner).
    Again,
    /// The step failed. `may_hold` when the server may have granted without our hearing of it
    /// (no answer, or a broken connection), so the lease must still be released.
    Failed { error: Error, may_hold: bool },
}

/// N = 1: the blocked ACQUIRE is the grant; with replica confirmation, once its `WAIT` on
/// the same dedicated connection (see the `confirm` module) says enough replicas have it.
pub(crate) async fn single(
    rounds: &Rounds,
    node: &Node,
    request: Request<'_>,
    until: Instant,
    confirm: Option<&Confirm>,
) -> Turn {
    let sent = Instant::now();
    let fence = match node.acquire(request.acquire, Some(until), confirm).await {
        Ok(AcquireReply::Granted { fence }) => fence,
        Ok(AcquireReply::Unconfirmed { error, may_hold }) => return Turn::Failed { error, may_hold },
        Ok(AcquireReply::Nil) => return Turn::TimedOut,
        Ok(AcquireReply::Unsupported) => return Turn::Poll,
        Err(failure) => return failed(node, failure),
    };
    match anchor(rounds, request.key, request.token, fence, sent).await {
        Ok(grant) => Turn::Granted(grant),
        Err(error) => Turn::Failed { error, may_hold: true },
    }
}

/// The grant of a blocked ACQUIRE sent at `sent`, re-anchored by a RENEW if the wait ate
/// more than a quarter of the usable lease time.
async fn anchor(
    rounds: &Rounds,
    key: &str,
    token: &Token,
    fence: u64,
    sent: Instant,
) -> Result<Grant, Error> {
    let (ttl, drift) = (rounds.config.ttl(), rounds.config.drift());
    let granted = |from: Instant| rounds.single_grant(key, fence, from);
    let grant = granted(sent);
    if !needs_anchor(grant.report.elapsed, ttl.saturating_sub(drift)) {
        return Ok(grant);
    }
    match rounds.renew(key, token).await {
        // The RENEW's deadline runs from before it was sent.
        Ok(deadline) => Ok(granted(deadline.checked_sub(ttl.saturating_sub(drift)).unwrap_or(sent))),
        Err(error) if grant.report.validity.is_some() && !error.is_lease_lost() => {
            tracing::debug!(key, %error, "could not re-anchor a lease after a long wait; keeping the shorter validity");
            Ok(grant)
        }
        Err(error) => Err(error),
    }
}

/// Whether a grant that took `waited` from sending to reply should be re-anchored: the wait
/// used more than a quarter of the `window` (ttl minus drift) the lease can be relied on.
fn needs_anchor(waited: Duration, window: Duration) -> bool {
    waited > window / 4
}

/// N > 1: queue on the designated node (or the next in the ranking) for a reservation.
pub(crate) async fn reserve(rounds: &Rounds, nodes: &[Node], request: Request<'_>, until: Instant) -> Turn {
    // Once this many candidates failed, too few nodes are left for a majority anyway.
    let candidates = nodes.len() - rounds.quorum() + 1;
    let ranked = ranking(request.key, nodes.iter().map(Node::name));
    // A node that recently failed to queue anyone is passed over while a later one has not.
    let (fresh, passed_over): (Vec<usize>, Vec<usize>) =
        ranked.into_iter().take(candidates).partition(|&i| !nodes[i].pool().recently_failed());
    for i in fresh.into_iter().chain(passed_over) {
        let node = &nodes[i];
        if !node.may_block() {
            return Turn::Poll;
        }
        if rounds.release_left_behind(i, request.key, request.token).await {
            tracing::debug!(
                request.key,
                node = node.name(),
                "a release of ours is unanswered there; trying the next"
            );
            continue;
        }
        let wait = node.acquire(request.acquire, Some(until), None);
        match watched(node, wait).await {
            Ok(AcquireReply::Granted { .. }) => return Turn::Reserved,
            // Not asked for: Redlock's nodes have no replica confirmation (the coordinator refuses it).
            Ok(AcquireReply::Unconfirmed { error, may_hold }) => return Turn::Failed { error, may_hold },
            Ok(AcquireReply::Nil) => return Turn::TimedOut,
            Ok(AcquireReply::Unsupported) => return Turn::Poll,
            Err(failure) => match failed(node, failure) {
                Turn::Failed { error, may_hold } => {
                    if may_hold {
                        node.pool().mark_failed();
                    }
                    // Whatever it may have granted is released by the rounds that follow.
                    tracing::debug!(request.key, node = node.name(), %error, "cannot wait on this node; trying the next");
                }
                again => return again,
            },
        }
    }
    Turn::Poll
}

/// `wait` on `node`, abandoned (its connection dropped, so the server forgets the waiter) as
/// soon as the node stops answering pings on its shared connection.
async fn watched(
    node: &Node,
    wait: impl Future<Output = Result<AcquireReply, Failure>>,
) -> Result<AcquireReply, Failure> {
    let watchdog = async {
        loop {
            match node.ping().await {
                // Any answer, an error reply included (an ACL without PING), is a sign of life.
                Ok(()) => {}
                Err(Failure::Redis(e)) if cause::answered(&e) => {}
                Err(failure) => return failure,
            }
            tokio::time::sleep(WATCH_EVERY).await;
        }
    };
    tokio::select! {
        biased;
        waited = wait => waited,
        failure = watchdog => Err(failure),
    }
}

/// The turn for a failed blocking request on `node`.
fn failed(node: &Node, failure: Failure) -> Turn {
    // An error reply means the server answered, so nothing was granted; anything else
    // (no answer, a broken connection) leaves that open.
    let may_hold = !matches!(&failure, Failure::Redis(e) if cause::answered(e));
    let error = node.error("ACQUIRE", failure);
    if error.reply_error() == Some(ReplyError::WaitInterrupted) {
        return Turn::Again;
    }
    Turn::Failed { error, may_hold }
}

/// The nodes (by index) in the order in which contenders for `key` wait on them: the
/// protocol's rendezvous ranking (`fencedlock_protocol::ranking`), the same in every client.
pub(crate) use fencedlock_protocol::ranking::ranking;

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: [&str; 5] =
        ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003", "127.0.0.1:7004", "127.0.0.1:7005"];

    fn ranked_names(key: &str, names: &[&'static str]) -> Vec<&'static str> {
        ranking(key, names.iter().copied()).into_iter().map(|i| names[i]).collect()
    }

    #[test]
    fn every_client_ranks_the_nodes_alike_whatever_their_order() {
        for key in ["invoice:42", "job", "", "ключ"] {
            let forward = ranked_names(key, &NAMES);
            let mut reversed = NAMES;
            reversed.reverse();
            assert_eq!(ranked_names(key, &reversed), forward, "{key}");
            let mut rotated = NAMES;
            rotated.rotate_left(2);
            assert_eq!(ranked_names(key, &rotated), forward, "{key}");
            let mut sorted = forward.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, NAMES.to_vec(), "a permutation of the nodes");
        }
    }

    #[test]
    fn keys_spread_over_the_nodes() {
        let mut first = [0usize; 5];
        for k in 0..5_000 {
            first[ranking(&format!("key:{k}"), NAMES.iter().copied())[0]] += 1;
        }
        for (i, n) in first.iter().enumerate() {
            assert!((700..1300).contains(n), "node {i} designated for {n} of 5000 keys: {first:?}");
        }
    }

    #[test]
    fn losing_a_node_moves_only_its_keys() {
        // Rendezvous hashing: dropping a node changes the first choice only for keys whose
        // first choice it was; those move to their second choice.
        let four = &NAMES[..4];
        for k in 0..1_000 {
            let key = format!("key:{k}");
            let all = ranked_names(&key, &NAMES);
            let without = ranked_names(&key, four);
            let expected: Vec<_> = all.iter().copied().filter(|n| *n != NAMES[4]).collect();
            assert_eq!(without, expected, "{key}");
        }
    }

    #[test]
    fn long_waits_are_re_anchored() {
        let window = Duration::from_millis(9_898);
        assert!(!needs_anchor(Duration::from_millis(5), window));
        assert!(!needs_anchor(window / 4, window));
        assert!(needs_anchor(window / 4 + Duration::from_millis(1), window));
        assert!(needs_anchor(window * 2, window));
    }
}
