//! What waiting on a server (`FENCEDLOCK.ACQUIRE … BLOCK`) needs besides the command: a small
//! pool of connections of its own per node, the memory of whether the node's module can wait
//! at all, and the conversion of a wait into the command's timeout argument.
//!
//! A blocked request holds its connection until the server answers: Redis answers a
//! connection's requests in order, so on the node's shared, multiplexed connection it would
//! hold back every request behind it — renewals of other leases included. Each blocked request
//! therefore runs on a dedicated connection, checked out of the node's [`Pool`] together with
//! one of `limit` slots and given back only after the server answered. A connection whose
//! request was cancelled (its future dropped) or timed out is dropped instead, which closes it:
//! that is what tells the server to take the waiter out of the queue.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencedlock_protocol::limits::MAX_BLOCK_MS;
use redis::{ErrorKind, RedisError, ServerErrorKind};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a node whose module could not wait is polled before it is asked to wait again
/// (its module may have been upgraded meanwhile). One refused request per period is all the
/// check costs.
pub(crate) const RECHECK_AFTER: Duration = Duration::from_secs(60);

/// How long a Redlock waiter passes over a node that could not queue it (no answer, no
/// connection) when choosing where to wait, so a silent node costs one node timeout per this
/// period rather than one per acquisition.
pub(crate) const PASS_OVER_FOR: Duration = Duration::from_secs(5);

/// The start of the arity error Redis and Valkey send for a command called with an argument
/// count its table does not allow (`ERR wrong number of arguments for 'fencedlock.acquire'
/// command`). It is the server's own error, not the module's, so the protocol crate does not
/// define it: a v1 module registered `FENCEDLOCK.ACQUIRE` with exactly three arguments, and the
/// server refuses the `BLOCK` form before the module sees it.
const ARITY_ERROR: &str = "wrong number of arguments";

/// Whether `err` says the server's `FENCEDLOCK.ACQUIRE` takes no `BLOCK` option (a module
/// older than the blocking form): code `ERR` and the server's arity refusal. Nothing was
/// changed on the server, so the same request without `BLOCK` may follow at once.
pub(crate) fn lacks_block(err: &RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
        && err.detail().is_some_and(|d| d.starts_with(ARITY_ERROR))
}

/// The `BLOCK` argument for a wait of `left`: whole milliseconds rounded *up* (so the server
/// never answers nil before the caller's deadline), at least 1 (`0` would mean "no limit"),
/// at most [`MAX_BLOCK_MS`] (a longer wait asks again when that runs out).
pub(crate) fn block_ms(left: Duration) -> u64 {
    let ms = left.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX).clamp(1, MAX_BLOCK_MS)
}

/// One node's dedicated connections for blocked requests, at most `limit` in use at once.
///
/// Requests beyond the limit wait here for a slot, in arrival order (Tokio's semaphore is
/// fair), within their own deadline. Waiting here rather than falling back to polling is
/// deliberate: while others are queued on the server, a non-blocking ACQUIRE is refused
/// (nobody barges past the queue), so a poller could only get in once the queue drained —
/// it would burn requests and starve. A slot is held for one request; idle connections
/// (at most `limit`) are kept for the next one.
pub(crate) struct Pool<C> {
    limit: usize,
    in_use: Arc<Semaphore>,
    idle: Mutex<Vec<C>>,
    support: Support,
    /// When this node last failed to queue a waiter (for [`PASS_OVER_FOR`]).
    failed_at: Mutex<Option<Instant>>,
}

/// The right to run one blocked request on the pool; dropping it frees the slot. (Not a
/// semaphore's permit: those are leases.)
pub(crate) struct Checkout {
    _slot: OwnedSemaphorePermit,
}

impl<C> Pool<C> {
    /// A pool of at most `limit` connections in use; `0` turns waiting on the server off.
    pub(crate) fn new(limit: usize) -> Pool<C> {
        Pool {
            limit,
            in_use: Arc::new(Semaphore::new(limit.min(Semaphore::MAX_PERMITS))),
            idle: Mutex::new(Vec::new()),
            support: Support::default(),
            failed_at: Mutex::new(None),
        }
    }

    /// Whether a request should wait on this node: waiting is on, and the node's module was
    /// not found unable to wait within [`RECHECK_AFTER`].
    pub(crate) fn may_block(&self) -> bool {
        self.limit > 0 && self.support.may_block(Instant::now())
    }

    /// A checkout, waiting in arrival order until `until` at the latest (`None` then).
    pub(crate) async fn check_out(&self, until: Instant) -> Option<Checkout> {
        let acquire = Arc::clone(&self.in_use).acquire_owned();
        match tokio::time::timeout_at(until.into(), acquire).await {
            Ok(Ok(slot)) => Some(Checkout { _slot: slot }),
            // The semaphore is never closed; running out of time is the only other outcome.
            Ok(Err(_)) | Err(_) => None,
        }
    }

    /// An idle connection, if one is kept.
    pub(crate) fn take_idle(&self) -> Option<C> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    /// Keeps `conn`, whose request was answered, for the next blocked request.
    pub(crate) fn give_back(&self, conn: C) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < self.limit {
            idle.push(conn);
        }
    }

    /// Records that the node's module cannot wait; `node` names it in the log line.
    pub(crate) fn mark_unsupported(&self, node: &str) {
        self.support.mark_unsupported(node, Instant::now());
    }

    /// Records that the node could not queue a waiter (it did not answer, or could not be
    /// reached); Redlock waiters pass over it for [`PASS_OVER_FOR`].
    pub(crate) fn mark_failed(&self) {
        *self.failed_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// Whether the node failed to queue a waiter within [`PASS_OVER_FOR`].
    pub(crate) fn recently_failed(&self) -> bool {
        let failed_at = *self.failed_at.lock().unwrap_or_else(|p| p.into_inner());
        failed_at.is_some_and(|at| at.elapsed() < PASS_OVER_FOR)
    }

    /// Records that the node's module answered a blocking request.
    pub(crate) fn mark_supported(&self) {
        self.support.mark_supported();
        *self.failed_at.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// Whether a node's module can wait, as last seen.
#[derive(Default)]
struct Support {
    /// When the node last refused the `BLOCK` form.
    refused_at: Mutex<Option<Instant>>,
    /// Whether that was already logged at info level (later ones go to debug).
    logged: AtomicBool,
}

impl Support {
    fn may_block(&self, now: Instant) -> bool {
        let refused_at = *self.refused_at.lock().unwrap_or_else(|p| p.into_inner());
        refused_at.is_none_or(|at| now.saturating_duration_since(at) >= RECHECK_AFTER)
    }

    fn mark_unsupported(&self, node: &str, now: Instant) {
        *self.refused_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
        if self.logged.swap(true, Ordering::Relaxed) {
            tracing::debug!(node, "the server's fencedlock module still cannot wait (no BLOCK); polling");
        } else {
            tracing::info!(
                node,
                recheck_after = ?RECHECK_AFTER,
                "the server's fencedlock module is older than FENCEDLOCK.ACQUIRE … BLOCK; acquisitions poll with backoff"
            );
        }
    }

    fn mark_supported(&self) {
        let mut refused_at = self.refused_at.lock().unwrap_or_else(|p| p.into_inner());
        if refused_at.take().is_some() {
            tracing::info!("the server's fencedlock module can wait now (BLOCK)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cause::tests::replied;

    #[test]
    fn only_the_servers_arity_refusal_means_no_block() {
        // What Redis 7.0 and Valkey 9 answer a v1 module's ACQUIRE with six arguments.
        assert!(lacks_block(&replied("ERR wrong number of arguments for 'fencedlock.acquire' command")));
        for line in [
            "ERR syntax error: the only option is BLOCK timeout_ms",
            "ERR timeout must be an integer number of milliseconds from 0 (no limit) to 4398046511104",
            "ERR unknown command 'FENCEDLOCK.ACQUIRE', with args beginning with: <redacted>",
            "TRYAGAIN fencedlock wait interrupted: the lock key was deleted",
            "WRONGTYPE wrong number of arguments",
            "NOPERM User app has no permissions to run the 'fencedlock.acquire' command",
        ] {
            assert!(!lacks_block(&replied(line)), "{line}");
        }
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(!lacks_block(&io));
    }

    #[test]
    fn block_timeouts_round_up_and_never_mean_forever() {
        assert_eq!(block_ms(Duration::ZERO), 1, "0 would be no limit");
        assert_eq!(block_ms(Duration::from_micros(1)), 1);
        assert_eq!(block_ms(Duration::from_millis(250)), 250);
        assert_eq!(block_ms(Duration::from_micros(250_001)), 251);
        assert_eq!(block_ms(Duration::from_secs(10)), 10_000);
        assert_eq!(block_ms(Duration::MAX), MAX_BLOCK_MS);
    }

    #[test]
    fn a_node_that_cannot_wait_is_polled_then_asked_again() {
        let support = Support::default();
        let t0 = Instant::now();
        assert!(support.may_block(t0));
        support.mark_unsupported("n", t0);
        assert!(!support.may_block(t0));
        assert!(!support.may_block(t0 + RECHECK_AFTER - Duration::from_millis(1)));
        assert!(support.may_block(t0 + RECHECK_AFTER));
        support.mark_unsupported("n", t0 + RECHECK_AFTER);
        assert!(!support.may_block(t0 + RECHECK_AFTER));
        support.mark_supported();
        assert!(support.may_block(t0 + RECHECK_AFTER));
        let off: Pool<u8> = Pool::new(0);
        assert!(!off.may_block(), "a limit of 0 turns waiting off");
    }

    #[test]
    fn a_node_that_failed_to_queue_is_passed_over_until_it_answers() {
        let pool: Pool<u8> = Pool::new(1);
        assert!(!pool.recently_failed());
        pool.mark_failed();
        assert!(pool.recently_failed());
        pool.mark_supported();
        assert!(!pool.recently_failed());
    }

    #[tokio::test(start_paused = true)]
    async fn permits_are_limited_fair_and_bounded_by_the_deadline() {
        let pool: Arc<Pool<u8>> = Arc::new(Pool::new(2));
        let deadline = Instant::now() + Duration::from_secs(3600);
        let a = pool.check_out(deadline).await.expect("first");
        let b = pool.check_out(deadline).await.expect("second");
        // The third waits until its deadline, then gives up.
        let started = tokio::time::Instant::now();
        assert!(pool.check_out(Instant::now() + Duration::from_millis(50)).await.is_none());
        assert!(started.elapsed() >= Duration::from_millis(50));
        // Waiters get permits in arrival order as they free up.
        let order = Arc::new(Mutex::new(Vec::new()));
        let waiters: Vec<_> = (0..3)
            .map(|i| {
                let (pool, order) = (Arc::clone(&pool), Arc::clone(&order));
                tokio::spawn(async move {
                    let checkout = pool.check_out(deadline).await.expect("a checkout");
                    order.lock().unwrap().push(i);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    drop(checkout);
                })
            })
            .collect();
        for _ in 0..3 {
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(a);
        drop(b);
        for w in waiters {
            w.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
    }

    #[test]
    fn idle_connections_are_kept_up_to_the_limit() {
        let pool: Pool<u8> = Pool::new(2);
        assert_eq!(pool.take_idle(), None);
        for c in 1..=3 {
            pool.give_back(c);
        }
        assert_eq!(pool.take_idle(), Some(2));
        assert_eq!(pool.take_idle(), Some(1));
        assert_eq!(pool.take_idle(), None, "the third was closed, not kept");
    }
}
