//! A node's lease requests on the shared connection, each built by the protocol crate and
//! sent in the engine's form: `ACQUIRE` (which hands a waiting or confirmed one to `blocking`),
//! `ACQUIREALL`, `RENEW`, `RELEASE`, `RAISE`, and the `PING` that watches a node.

use std::time::Instant;

use fencedlock_protocol::command::ACQUIREALL;
use fencedlock_protocol::{Acquire, AcquireAll, Raise, Release, Renew};

use super::replicas::Confirm;
use super::{AcquireReply, Failure, Node};
use crate::backend::Engine;
use crate::token::Token;

impl Node {
    /// `FENCEDLOCK.ACQUIRE`, the one way every lease is asked for.
    ///
    /// - No `until`, no `confirm`: one request on the shared connection.
    /// - `until`: the request waits on the server (`BLOCK`, the time left until then, set at
    ///   each send) on a dedicated connection from the pool, the time spent waiting for a free
    ///   connection included; [`AcquireReply::Unsupported`] if this node cannot wait. The reply may
    ///   take the whole wait, so it is bounded by the wait plus the per-node timeout.
    /// - `confirm`: the ACQUIRE and, after a grant, `WAIT replicas timeout` on the same
    ///   dedicated connection (see the `confirm` module for why it must be that one); without
    ///   `until` the pool's connection is waited for up to one node timeout.
    ///
    /// Cancel-safe in the sense the server needs: dropping the future drops a dedicated
    /// connection, which closes it, and the server takes the waiter out of its queue. The
    /// server may have granted just before it saw the close, so the caller must release on
    /// cancellation (the lease module's claim does). A stale pooled connection (closed by the
    /// server while idle) is replaced once; the same token makes the repeat harmless (ACQUIRE
    /// is idempotent).
    pub(crate) async fn acquire(
        &self,
        request: Acquire<'_>,
        until: Option<Instant>,
        confirm: Option<&Confirm>,
    ) -> Result<AcquireReply, Failure> {
        let engine = self.engine_now().await?;
        match (until, confirm) {
            (None, None) => {
                let fence: Option<u64> = self.query(&engine.call(&request), Some(request.token)).await?;
                Ok(fence.map_or(AcquireReply::Nil, |fence| AcquireReply::Granted { fence }))
            }
            (Some(_), _) if !self.may_block() => Ok(AcquireReply::Unsupported),
            (until, confirm) => {
                let checkout_until = until.unwrap_or_else(|| Instant::now() + self.timeout);
                // Boxed: this path's state (a pooled connection, the wait, the `WAIT`) is most of
                // the request's size, and every lease's future would carry and copy it.
                Box::pin(self.acquire_dedicated(engine, request, until, checkout_until, confirm)).await
            }
        }
    }

    /// `PING` on the shared connection: whether the node answers within the timeout. A
    /// request waiting on the server says nothing about its liveness until it is answered;
    /// Redlock watches the node it waits on with this.
    pub(crate) async fn ping(&self) -> Result<(), Failure> {
        self.query::<String>(&redis::cmd("PING"), None).await.map(drop)
    }

    /// Whether the server takes a set of keys in one `ACQUIREALL`: the Functions library
    /// does (the one this client loads, or a newer one) for keys of one slot, which its floor
    /// requires; the module does where it knows the command (modules older than it do not; a
    /// server that hides `COMMAND` is not asked to), for keys of one slot on a Redis Cluster.
    /// The module is asked once, before any `ACQUIREALL` is sent: an unknown command's reply
    /// would echo the token.
    pub(crate) async fn serves_acquire_all(&self, one_slot: bool) -> Result<bool, Failure> {
        if self.engine_now().await? != Engine::Module {
            return Ok(one_slot);
        }
        if self.is_cluster() && !one_slot {
            return Ok(false);
        }
        let ask = || async { Ok(self.knows_command(ACQUIREALL.name).await? == Some(true)) };
        self.acquire_all.get_or_try_init(ask).await.copied()
    }

    /// `ACQUIREALL` (see [`Node::serves_acquire_all`]): a fence per key, in the request's
    /// order, or `None` when the server refused the set.
    pub(crate) async fn acquire_all(&self, request: &AcquireAll<'_>) -> Result<Option<Vec<u64>>, Failure> {
        let cmd = self.engine_now().await?.call(request);
        self.query(&cmd, Some(request.each.token)).await
    }

    /// `FENCEDLOCK.RENEW`: whether we still held the lease (it now runs `ttl_ms` from now).
    pub(crate) async fn renew(&self, key: &str, token: &Token, ttl_ms: u64) -> Result<bool, Failure> {
        let request = Renew { key: key.as_bytes(), token: token.as_bytes(), ttl_ms };
        let cmd = self.engine_now().await?.call(&request);
        self.query::<i64>(&cmd, Some(token.as_bytes())).await.map(|n| n == 1)
    }

    /// `FENCEDLOCK.RELEASE`: whether we held the lease and it ended now.
    pub(crate) async fn release(&self, key: &str, token: &Token) -> Result<bool, Failure> {
        self.release_request(Release { key: key.as_bytes(), token: token.as_bytes() }).await
    }

    pub(super) async fn release_request(&self, request: Release<'_>) -> Result<bool, Failure> {
        let cmd = self.engine_now().await?.call(&request);
        self.query::<i64>(&cmd, Some(request.token)).await.map(|n| n == 1)
    }

    /// `FENCEDLOCK.RAISE`: the key's fence after raising it to at least `fence`, or `None`
    /// when our token no longer holds the lease there.
    pub(crate) async fn raise(&self, key: &str, token: &Token, fence: u64) -> Result<Option<u64>, Failure> {
        let request = Raise { key: key.as_bytes(), token: token.as_bytes(), fence };
        let cmd = self.engine_now().await?.call(&request);
        self.query(&cmd, Some(token.as_bytes())).await
    }
}
