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

use crate::cause;
use crate::engine::{Engine, Grant};
use crate::error::Error;
use crate::node::{Answer, Failure, Node};
use crate::quorum::Phase;
use crate::replicas::Confirm;
use crate::terms::Terms;
use crate::token::Token;

/// One non-waiting acquisition round on the engine's single `node` with `confirm`: ACQUIRE
/// (on `terms`) and WAIT on a dedicated connection; the grant when it was confirmed,
/// released otherwise.
pub(crate) async fn attempt(
    engine: &Engine,
    node: &Node,
    key: &str,
    token: &Token,
    confirm: &Confirm,
    terms: Terms<'_>,
) -> Result<Grant, Error> {
    // Never overtake a release of an earlier round still in flight (see the `trailing` module).
    if engine.release_left_behind(0, key, token).await {
        return Err(node.error("ACQUIRE", Failure::TimedOut));
    }
    let mut guard = Unsettled::new(engine, key, token);
    let sent = Instant::now();
    let request = terms.request(key, token, engine.config.ttl_ms());
    let answer = node.acquire(request, None, Some(confirm)).await;
    match answer {
        Ok(Answer::Granted { fence, acked }) => match settle(node, key, token, confirm, acked).await {
            Ok(()) => {
                let grant = engine.single_grant(key, fence, sent);
                if grant.report.validity.is_some() {
                    guard.disarm();
                    return Ok(grant);
                }
                // Confirmed too late to be of use: give it back like any expired round.
                if node.release(key, token).await.is_ok() {
                    guard.disarm();
                }
                Err(engine.round_error(grant.report, Phase::Acquire))
            }
            Err(Unconfirmed { error, may_hold }) => {
                if !may_hold {
                    guard.disarm();
                }
                Err(error)
            }
        },
        // Without BLOCK, the module cannot answer "unsupported": only nil (busy).
        Ok(Answer::Nil | Answer::Unsupported) => {
            guard.disarm();
            Err(Error::Contended { key: key.to_owned() })
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

/// A grant that could not be handed out: the error, and whether the lease may still be held
/// (the release did not get an answer).
pub(crate) struct Unconfirmed {
    pub(crate) error: Error,
    pub(crate) may_hold: bool,
}

/// What a grant's `WAIT` answer (`acked`) means: `Ok` when enough replicas confirmed it;
/// otherwise the grant is released on `node`, and the error says why.
pub(crate) async fn settle(
    node: &Node,
    key: &str,
    token: &Token,
    confirm: &Confirm,
    acked: Option<Result<usize, Failure>>,
) -> Result<(), Unconfirmed> {
    let error = match acked {
        Some(Ok(acked)) if acked >= confirm.replicas() => return Ok(()),
        Some(Ok(acked)) => {
            Error::NotConfirmed { node: node.name().to_owned(), wanted: confirm.replicas(), confirmed: acked }
        }
        Some(Err(failure)) => node.error("WAIT", failure),
        // The caller asked for no confirmation: nothing to settle.
        None => return Ok(()),
    };
    tracing::debug!(key, node = node.name(), %error, "grant not confirmed by replicas; releasing it");
    let may_hold = match node.release(key, token).await {
        Ok(_held) => false,
        Err(failure) => {
            tracing::debug!(key, node = node.name(), error = %node.error("RELEASE", failure), "could not release an unconfirmed grant; it expires after the ttl");
            true
        }
    };
    Err(Unconfirmed { error, may_hold })
}

/// Releases `token` on `key` in the background unless disarmed: a confirmed acquisition
/// dropped (or failed) while its ACQUIRE or WAIT was unanswered may have left a grant.
///
/// The ACQUIRE ran on a dedicated connection, closed when dropped; the release goes out on
/// the shared one and may reach the server first, so it is sent again one node timeout
/// later (as the lease's claim does after a waiting request). Releasing by our token cannot
/// end anyone else's lease.
struct Unsettled {
    engine: Option<Arc<Engine>>,
    key: String,
    token: Token,
}

impl Unsettled {
    fn new(engine: &Engine, key: &str, token: &Token) -> Unsettled {
        Unsettled { engine: engine.shared(), key: key.to_owned(), token: token.clone() }
    }

    fn disarm(&mut self) {
        self.engine = None;
    }
}

impl Drop for Unsettled {
    fn drop(&mut self) {
        let Some(engine) = self.engine.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(key = %self.key, "no Tokio runtime to release on drop; the lease expires after its ttl");
            return;
        };
        let (key, token) = (std::mem::take(&mut self.key), self.token.clone());
        runtime.spawn(async move {
            let _ = engine.release_report(&key, &token).await;
            tokio::time::sleep(engine.config.node_timeout()).await;
            let _ = engine.release_report(&key, &token).await;
        });
    }
}
