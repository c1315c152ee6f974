//! Releases that finish after their caller moved on, and the one rule they must keep: a
//! release left behind must not overtake a later request of the same token on the same node.
//!
//! A Redlock caller gets its outcome as soon as a majority decided it. The releases still
//! owed to nodes that did not answer (silent, slow, or not waited for) are not dropped — a
//! node that did grant must not be left holding the lease if it can be reached — but finish
//! in a background task, each bounded by the per-node timeout. They are polled once before
//! the caller moves on, which puts each on its node's connection when one is open; a process
//! that exits right away (the CLI) has then at least handed them to the kernel.
//!
//! # Why a release left behind cannot undo a later grant
//!
//! The rounds of one acquisition share a token (ACQUIRE is idempotent for its holder), so a
//! RELEASE of round k that a node processed *after* round k+1's ACQUIRE would end round
//! k+1's grant there while round k+1 counts the node's vote. Requests to one node travel in
//! order on its shared, multiplexed connection: the server answers them in the order they
//! were written. So it is enough that round k+1's request is *written after* round k's
//! release — and a background release is written the moment it is first polled only when the
//! connection is already open; one that waits for a connection could be overtaken. Hence the
//! rule enforced here: while a background release of a token on a key is in flight to a node,
//! the next acquisition request of that token on that key to that node waits for it
//! ([`Trailing::timed_out`]), and
//!
//! - if it ended any other way (answered, or failed together with its connection), it is not
//!   on the connection any more: the request goes out after it;
//! - if it timed out, it either sits on the connection unprocessed (written, so ahead of
//!   anything written later on that connection) or was never written (it was dropped while
//!   waiting for the connection, and the `redis` client skips requests whose caller has
//!   gone). The node has not answered for a whole node timeout, so the request is not sent
//!   this round and the node counts as timed out: a round never waits two timeouts for a
//!   node, and a lost majority retries once per node timeout.
//!
//! Once a release ended, nothing needs to wait for it: timed out, it is ahead of every later
//! request on its connection or was never sent.
//!
//! What stays open: a request that waits on the server (`ACQUIRE … BLOCK`) runs on a
//! connection of its own, so it is not ordered behind a release that timed out on the shared
//! connection of a node that is frozen and thaws later (this was so before releases went to
//! the background: a release that timed out was left on the connection just the same). If
//! the thawed node runs that ACQUIRE first, fenced Redlock's raise, sent on the shared
//! connection after the grant and so behind the old release, finds the token no longer
//! holding the lease there, and the node does not count towards the confirming majority.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::quorum::Vote;
use crate::token::Token;

/// Background releases one engine may have in flight at once. Each ends within the per-node
/// timeout, so only thousands of releases per node timeout to nodes that do not answer reach
/// it; beyond it the caller waits for its own releases, as before.
pub(crate) const MAX_TRAILING: usize = 1024;

/// The background releases of one engine still in flight.
pub(crate) struct Trailing {
    inner: Arc<Inner>,
}

struct Inner {
    /// By node, key and token: each release in flight (by ticket number) and its outcome once
    /// known (`Some(timed_out)`).
    pending: Mutex<HashMap<ReleaseTarget, Vec<(u64, Outcome)>>>,
    next: std::sync::atomic::AtomicU64,
    permits: Arc<Semaphore>,
}

/// How a release ended, once it did: `Some(timed_out)`.
type Outcome = watch::Receiver<Option<bool>>;

/// One release's target. Holds the token (a secret): never printed, so no `Debug`.
#[derive(Clone, PartialEq, Eq, Hash)]
struct ReleaseTarget {
    node: usize,
    key: String,
    token: Token,
}

/// The background releases of one round: a ticket per node, and how many went unanswered.
/// Dropping it unfinished (its task was cancelled) counts the releases still out as timed out.
pub(crate) struct Batch {
    key: String,
    tickets: Vec<(usize, Option<Ticket>)>,
    unanswered: usize,
}

/// A background release in flight. [`Ticket::finish`] records how it ended; dropping it
/// unfinished counts as timed out.
pub(crate) struct Ticket {
    inner: Arc<Inner>,
    slot: ReleaseTarget,
    number: u64,
    done: watch::Sender<Option<bool>>,
    _permit: OwnedSemaphorePermit,
}

impl Trailing {
    pub(crate) fn new() -> Trailing {
        Trailing {
            inner: Arc::new(Inner {
                pending: Mutex::new(HashMap::new()),
                next: std::sync::atomic::AtomicU64::new(0),
                permits: Arc::new(Semaphore::new(MAX_TRAILING)),
            }),
        }
    }

    /// A ticket for a release of `token` on `key` to node `node` that is to finish in the
    /// background; `None` when [`MAX_TRAILING`] are in flight (the caller then waits for this
    /// release itself).
    pub(crate) fn start(&self, node: usize, key: &str, token: &Token) -> Option<Ticket> {
        let permit = Arc::clone(&self.inner.permits).try_acquire_owned().ok()?;
        let slot = ReleaseTarget { node, key: key.to_owned(), token: token.clone() };
        let number = self.inner.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (done, outcome) = watch::channel(None);
        let mut pending = self.inner.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.entry(slot.clone()).or_default().push((number, outcome));
        Some(Ticket { inner: Arc::clone(&self.inner), slot, number, done, _permit: permit })
    }

    /// Tickets for releases of `token` on `key` to each of `nodes`, all or none ([`Trailing::start`]).
    pub(crate) fn batch(&self, nodes: &[usize], key: &str, token: &Token) -> Option<Batch> {
        let tickets = nodes
            .iter()
            .map(|&node| Some((node, Some(self.start(node, key, token)?))))
            .collect::<Option<_>>()?;
        Some(Batch { key: key.to_owned(), tickets, unanswered: 0 })
    }

    /// Waits until no background release of `token` on `key` to node `node` is in flight, and
    /// says whether one of those it waited for timed out (or was abandoned). `false` at once
    /// when there was none. Bounded: a release ends within the node timeout.
    pub(crate) async fn timed_out(&self, node: usize, key: &str, token: &Token) -> bool {
        let outcomes: Vec<Outcome> = {
            let pending = self.inner.pending.lock().unwrap_or_else(PoisonError::into_inner);
            if pending.is_empty() {
                return false;
            }
            match pending.get(&ReleaseTarget { node, key: key.to_owned(), token: token.clone() }) {
                Some(releases) => releases.iter().map(|(_, outcome)| outcome.clone()).collect(),
                None => return false,
            }
        };
        let mut timed_out = false;
        for mut outcome in outcomes {
            timed_out |= match outcome.wait_for(Option::is_some).await {
                Ok(ended) => *ended == Some(true),
                Err(_ticket_dropped) => true,
            };
        }
        timed_out
    }

    /// Waits until every background release in flight has ended (each does within the node
    /// timeout): every one holds a permit, so all permits free means none is left.
    pub(crate) async fn drained(&self) {
        let _all = self.inner.permits.acquire_many(MAX_TRAILING as u32).await;
    }

    /// Background releases in flight.
    fn in_flight(&self) -> usize {
        MAX_TRAILING - self.inner.permits.available_permits()
    }
}

impl fmt::Debug for Trailing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trailing").field("in_flight", &self.in_flight()).finish()
    }
}

impl Batch {
    /// Records how the release to `node` ended (a timeout keeps the node's next acquisition
    /// request of the token back for a round).
    pub(crate) fn ended(&mut self, node: usize, vote: &Vote) {
        self.unanswered += usize::from(!vote.answered());
        let ticket = self.tickets.iter_mut().find(|(n, _)| *n == node).and_then(|(_, ticket)| ticket.take());
        if let Some(ticket) = ticket {
            ticket.finish(matches!(vote, Vote::TimedOut));
        }
    }

    /// Every release of the batch ended.
    pub(crate) fn close(self) {
        if self.unanswered > 0 {
            tracing::debug!(
                key = self.key,
                unanswered = self.unanswered,
                "background release did not reach every node; their leases expire after the ttl"
            );
        }
    }
}

impl Ticket {
    /// Records how the release ended and lets requests waiting for it go on.
    pub(crate) fn finish(self, timed_out: bool) {
        self.done.send_replace(Some(timed_out));
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // Unfinished (its task was cancelled: the runtime shut down), the sender's drop tells
        // the waiters, who count it as timed out.
        let mut pending = self.inner.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(releases) = pending.get_mut(&self.slot) {
            releases.retain(|(number, _)| *number != self.number);
            if releases.is_empty() {
                pending.remove(&self.slot);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::token::TokenFormat;

    #[tokio::test]
    async fn a_request_waits_for_the_releases_in_flight_to_its_node_and_learns_how_they_ended() {
        let trailing = Trailing::new();
        let token = Token::generate(TokenFormat::Raw);
        assert!(!trailing.timed_out(0, "k", &token).await, "nothing in flight");
        let ticket = trailing.start(1, "k", &token).expect("a ticket");
        assert!(!trailing.timed_out(0, "k", &token).await, "another node");
        assert!(!trailing.timed_out(1, "other", &token).await, "another key");
        assert!(!trailing.timed_out(1, "k", &Token::generate(TokenFormat::Raw)).await, "another token");

        let started = tokio::time::Instant::now();
        let waiter = trailing.timed_out(1, "k", &token);
        let finisher = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            ticket.finish(false);
        };
        let (timed_out, ()) = tokio::join!(waiter, finisher);
        assert!(!timed_out, "answered");
        assert!(started.elapsed() >= Duration::from_millis(20), "waited for the release");
        assert_eq!(trailing.in_flight(), 0, "finished releases are forgotten");

        // Two in flight to the same node: both are waited for; one timed out.
        let first = trailing.start(1, "k", &token).expect("a ticket");
        let second = trailing.start(1, "k", &token).expect("another ticket for the same node");
        let waiter = trailing.timed_out(1, "k", &token);
        let (timed_out, ()) = tokio::join!(waiter, async {
            second.finish(true);
            tokio::task::yield_now().await;
            first.finish(false);
        });
        assert!(timed_out);
        assert!(!trailing.timed_out(1, "k", &token).await, "nothing left in flight");

        // A task cancelled with its ticket: counts as timed out, and is forgotten.
        let ticket = trailing.start(2, "k", &token).expect("a ticket");
        let waiter = trailing.timed_out(2, "k", &token);
        let (timed_out, ()) = tokio::join!(waiter, async { drop(ticket) });
        assert!(timed_out);
        assert!(!trailing.timed_out(2, "k", &token).await);
        assert_eq!(trailing.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_batch_records_each_node_and_keeps_back_only_the_node_that_timed_out() {
        let trailing = Trailing::new();
        let token = Token::generate(TokenFormat::Raw);
        let mut batch = trailing.batch(&[1, 3, 4], "k", &token).expect("tickets");
        let waiters = futures::future::join3(
            trailing.timed_out(1, "k", &token),
            trailing.timed_out(3, "k", &token),
            trailing.timed_out(4, "k", &token),
        );
        let ending = async {
            tokio::task::yield_now().await;
            batch.ended(3, &Vote::TimedOut);
            batch.ended(
                1,
                &Vote::Failed {
                    error: redis::RedisError::from((redis::ErrorKind::Io, "connection refused")),
                },
            );
            // Dropped with the release to node 4 still out (its task cancelled).
            drop(batch);
        };
        let ((one, three, four), ()) = tokio::join!(waiters, ending);
        assert_eq!((one, three, four), (false, true, true));
        // Ended releases are forgotten: nothing holds a request back any more.
        assert!(!trailing.timed_out(3, "k", &token).await);
        assert_eq!(trailing.in_flight(), 0);
        // All or none: beyond the bound, no batch.
        let _most: Vec<Ticket> =
            (0..MAX_TRAILING - 1).map(|n| trailing.start(n, "k", &token).expect("below the bound")).collect();
        assert!(trailing.batch(&[7, 8], "k", &token).is_none());
        assert_eq!(trailing.in_flight(), MAX_TRAILING - 1, "the partial batch gave its ticket back");
    }

    #[test]
    fn background_releases_are_bounded() {
        let trailing = Trailing::new();
        let token = Token::generate(TokenFormat::Raw);
        let tickets: Vec<Ticket> =
            (0..MAX_TRAILING).map(|n| trailing.start(n, "k", &token).expect("below the bound")).collect();
        assert!(trailing.start(MAX_TRAILING, "k", &token).is_none(), "the caller waits itself");
        drop(tickets);
        assert!(trailing.start(MAX_TRAILING, "k", &token).is_some());
    }
}
