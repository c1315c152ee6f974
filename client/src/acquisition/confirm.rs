//! Replica-confirmed grants ([`LockConfigBuilder::confirm_replicas`]): a grant is handed out
//! only once `WAIT replicas timeout` says that many replicas have it, so a failover to one of
//! them keeps the lease and its fence. A grant not confirmed in time is released (by our
//! token) and reported as [`Error::NotConfirmed`].
//!
//! `WAIT` counts the replicas that acknowledged the replication offset of the *calling
//! connection's* last write. The module replicates every grant (a re-entry too) as an effect
//! record, written by the ACQUIRE's own connection; a lease handed to a blocked waiter is
//! written while another client releases, and Redis moves the waiter's offset to the current
//! one when it wakes it (so the waiter's `WAIT` covers the handoff). So the ACQUIRE and its
//! `WAIT` run on one connection, and since `WAIT` blocks that connection for up to the confirm
//! timeout, it is a dedicated connection from the node's waiting pool (the one
//! `ACQUIRE … BLOCK` uses), never the shared one that carries every other lease's renewals.
//! Confirmations therefore share [`max_blocking`](crate::LockConfigBuilder::max_blocking)'s
//! limit, and need it above 0.
//!
//! What is confirmed, and what is not:
//! - The grant only. A renewal only moves an already confirmed lease's end; if a failover
//!   loses it, the new primary ends the lease at most one renewal interval earlier than the
//!   holder believes, and the next renewal (sent to the new primary) finds it lost or extends
//!   it. Confirming renewals would hold a dedicated connection per renewal for that.
//! - A single server only. A Redis Cluster connection sends `WAIT` to every primary, not the
//!   key's; Redlock's votes would each need their own confirmation, its raise step too. Both
//!   are refused ([`Error::Config`]) when the locker is built.
//! - Replication, not disk: `WAITAOF` (Redis 7.2+, Valkey 8+) is not offered. A failover
//!   promotes a replica that *has* the grant in memory, which is what `WAIT` checks; `WAITAOF`
//!   would add a restart of that replica before it is promoted, needs appendonly on every
//!   replica, and is missing from Redis 7.0.
//!
//! `WAIT` narrows the asynchronous-replication gap; it does not close it: a replica that
//! acknowledged may still lose the write (restart without persistence), and a failover may
//! promote a replica that did not acknowledge. Fences remain what protects the resource.

use std::sync::Arc;
use std::time::Instant;

use crate::acquisition::rounds::{Grant, Rounds};
use crate::acquisition::terms::Request;
use crate::cause;
use crate::error::Error;
use crate::node::replicas::Confirm;
use crate::node::{AcquireReply, Failure, Node};
use crate::quorum::Phase;
use crate::token::Token;

/// One non-waiting acquisition round on the single `node` with `confirm`: `request`'s ACQUIRE
/// and WAIT on a dedicated connection; the grant when it was confirmed, released otherwise.
pub(crate) async fn attempt(
    rounds: &Rounds,
    node: &Node,
    request: Request<'_>,
    confirm: &Confirm,
) -> Result<Grant, Error> {
    // Never overtake a release of an earlier round still in flight (see the `trailing` module).
    if rounds.release_left_behind(0, request.key, request.token).await {
        return Err(node.error("ACQUIRE", Failure::TimedOut));
    }
    let mut guard = Unsettled::new(rounds, request.key, request.token);
    let sent = Instant::now();
    let answer = node.acquire(request.acquire, None, Some(confirm)).await;
    match answer {
        Ok(AcquireReply::Granted { fence }) => {
            let grant = rounds.single_grant(request.key, fence, sent);
            if grant.report.validity.is_some() {
                guard.disarm();
                return Ok(grant);
            }
            // Confirmed too late to be of use: give it back like any expired round.
            if node.release(request.key, request.token).await.is_ok() {
                guard.disarm();
            }
            Err(rounds.round_error(grant.report, Phase::Acquire))
        }
        // Released by the node already, unless that release got no answer.
        Ok(AcquireReply::Unconfirmed { error, may_hold }) => {
            if !may_hold {
                guard.disarm();
            }
            Err(error)
        }
        // Without BLOCK, the module cannot answer "unsupported": only nil (busy).
        Ok(AcquireReply::Nil | AcquireReply::Unsupported) => {
            guard.disarm();
            Err(Error::Contended { key: request.key.to_owned() })
        }
        // An error reply: the server answered, nothing was granted. Anything else (no answer,
        // a broken connection) leaves a grant possible: the guard releases it.
        Err(Failure::Redis(e)) if cause::answered(&e) => {
            guard.disarm();
            Err(node.error("ACQUIRE", Failure::Redis(e)))
        }
        Err(failure) => Err(node.error("ACQUIRE", failure)),
    }
}

/// Releases `token` on `key` in the background unless disarmed: a confirmed acquisition
/// dropped (or failed) while its ACQUIRE or WAIT was unanswered may have left a grant.
///
/// The ACQUIRE ran on a dedicated connection, closed when dropped; the release goes out on
/// the shared one and may reach the server first, so it is sent again one node timeout
/// later (as the lease's claim does after a waiting request). Releasing by our token cannot
/// end anyone else's lease.
struct Unsettled {
    rounds: Option<Arc<Rounds>>,
    key: String,
    token: Token,
}

impl Unsettled {
    fn new(rounds: &Rounds, key: &str, token: &Token) -> Unsettled {
        Unsettled { rounds: rounds.shared(), key: key.to_owned(), token: token.clone() }
    }

    fn disarm(&mut self) {
        self.rounds = None;
    }
}

impl Drop for Unsettled {
    fn drop(&mut self) {
        let Some(rounds) = self.rounds.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(key = %self.key, "no Tokio runtime to release on drop; the lease expires after its ttl");
            return;
        };
        let (key, token) = (std::mem::take(&mut self.key), self.token.clone());
        runtime.spawn(async move {
            let _ = rounds.release_report(&key, &token).await;
            tokio::time::sleep(rounds.config.node_timeout()).await;
            let _ = rounds.release_report(&key, &token).await;
        });
    }
}
