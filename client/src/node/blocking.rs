//! The requests that wait: an `ACQUIRE … BLOCK` (or the Functions engine's attempts and
//! wake-ups) and replica confirmation's `WAIT`, each on a dedicated connection of the pool
//! that is given back only when every request on it was answered.

use std::time::{Duration, Instant};

use fencedlock_protocol::request::Status;
use fencedlock_protocol::{Acquire, Release};
use redis::{Cmd, FromRedisValue, RedisError};

use super::connection::Dedicated;
use super::replicas::Confirm;
use super::status::StatusReply;
use super::{pool, wake, AcquireReply, Failure, Node};
use crate::backend::Engine;
use crate::cause;
use crate::error::Error;
use crate::redact;

impl Node {
    /// `request` on a connection of the pool (with `BLOCK` until `block`, if given), then
    /// `confirm`'s WAIT on the same connection after a grant. A connection is given back only
    /// when every request on it was answered: one dropped with a request in flight is closed,
    /// so the server forgets a waiter and a WAIT alike.
    pub(super) async fn acquire_dedicated(
        &self,
        engine: Engine,
        request: Acquire<'_>,
        block: Option<Instant>,
        checkout_until: Instant,
        confirm: Option<&Confirm>,
    ) -> Result<AcquireReply, Failure> {
        let Some(_checkout) = self.pool.check_out(checkout_until).await else {
            // Waiting for the server: nothing granted by the deadline. Not waiting: the node's
            // waiting connections are all busy, which the caller sees as a slow node.
            return if block.is_some() { Ok(AcquireReply::Nil) } else { Err(Failure::TimedOut) };
        };
        let mut idle = self.pool.take_idle();
        loop {
            let reused = idle.is_some();
            let mut conn = match idle.take() {
                Some(conn) => conn,
                None => self.dedicated().await.map_err(|e| self.failure(e, Some(request.token)))?,
            };
            let reply = match (engine, block) {
                (engine, Some(until)) if !engine.blocks() => {
                    self.woken(engine, &mut conn, request, until).await
                }
                _ => {
                    let block_ms =
                        block.map(|until| pool::block_ms(until.saturating_duration_since(Instant::now())));
                    let cmd = engine.call(&Acquire { block_ms, ..request });
                    let answer = block_ms
                        .map_or(self.timeout, |ms| Duration::from_millis(ms).saturating_add(self.timeout));
                    tokio::time::timeout(answer, conn.query(&cmd)).await.ok()
                }
            };
            // No answer in time: dropping the connection closes it, so the server forgets the
            // waiter.
            let Some(reply) = reply else { return Err(Failure::TimedOut) };
            match reply {
                Ok(Some(fence)) => {
                    if block.is_some() {
                        self.pool.mark_supported();
                    }
                    let Some(confirm) = confirm else {
                        self.pool.give_back(conn);
                        return Ok(AcquireReply::Granted { fence });
                    };
                    let acked = self.wait_replicas(&mut conn, confirm).await;
                    // A WAIT without an answer leaves the connection out of step (or broken):
                    // close it.
                    let in_step = match &acked {
                        Ok(_) => true,
                        Err(Failure::Redis(e)) => cause::answered(e),
                        Err(Failure::TimedOut) => false,
                    };
                    if in_step {
                        self.pool.give_back(conn);
                    }
                    return Ok(self.settle(request, fence, confirm, acked).await);
                }
                Ok(None) => {
                    if block.is_some() {
                        self.pool.mark_supported();
                    }
                    self.pool.give_back(conn);
                    return Ok(AcquireReply::Nil);
                }
                Err(e) if cause::answered(&e) => {
                    // The server answered: the connection is in step and no waiter is queued
                    // (but one to a demoted primary is of no more use).
                    if !self.is_demoted(&e) {
                        self.pool.give_back(conn);
                    }
                    if block.is_some() && pool::lacks_block(&e) {
                        self.pool.mark_unsupported(&self.name);
                        return Ok(AcquireReply::Unsupported);
                    }
                    return Err(Failure::Redis(redact::error(e, Some(request.token))));
                }
                Err(e) if reused && cause::breaks_connection(&e) => {
                    tracing::debug!(node = %self.name, "idle waiting connection was closed; opening another");
                }
                Err(e) => return Err(self.failure(e, Some(request.token))),
            }
        }
    }

    /// Waiting for `request` until `until` on an engine that cannot block (the Functions
    /// library, as a library or as a script; see the `wake` module):
    /// attempts on `conn`, each refused one followed by a `BLPOP` on the key's wake-up list
    /// for as long as `STATUS` shows the holders' leases to last. `None`: a request got no
    /// answer within its bound.
    async fn woken(
        &self,
        engine: Engine,
        conn: &mut Dedicated,
        request: Acquire<'_>,
        until: Instant,
    ) -> Option<Result<Option<u64>, RedisError>> {
        let request = Acquire { block_ms: None, ..request };
        // The first attempt: most are granted.
        let attempt = engine.call(&request);
        // The attempt before a nap names the wake-up list, so the releases until the leases
        // that refused it end push a wake-up; it follows the STATUS the nap is timed by, so a
        // lease renewed in between cannot outlast what the refusal asked for. The attempt
        // after a wake-up names it too: a reader granted then passes the wake-up on to the
        // readers waiting behind it.
        let registering = engine.waiting_call(&request);
        let status = engine.call(&Status { key: request.key });
        let mut reply = self.bounded(conn, &attempt).await?;
        loop {
            if !matches!(reply, Ok(None)) {
                return Some(reply);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Some(Ok(None));
            }
            let held_for = match self
                .bounded::<Option<StatusReply>>(conn, &status)
                .await?
                .map(|r| self.decode_status(r))
            {
                Ok(Ok(status)) => status.map_or(Duration::ZERO, |status| status.held_for()),
                Ok(Err(_broken)) => Duration::ZERO,
                Err(e) => return Some(Err(e)),
            };
            reply = self.bounded(conn, &registering).await?;
            if !matches!(reply, Ok(None)) {
                return Some(reply);
            }
            let nap = wake::nap(held_for, left);
            let blpop = wake::blpop(request.key, nap);
            let woken = conn.query::<redis::Value>(&blpop);
            if let Err(e) = tokio::time::timeout(nap.saturating_add(self.timeout), woken).await.ok()? {
                return Some(Err(e));
            }
            reply = self.bounded(conn, &registering).await?;
        }
    }

    /// `cmd` on `conn` within the node timeout; `None` without an answer by then.
    async fn bounded<T: FromRedisValue>(
        &self,
        conn: &mut Dedicated,
        cmd: &Cmd,
    ) -> Option<Result<T, RedisError>> {
        tokio::time::timeout(self.timeout, conn.query(cmd)).await.ok()
    }

    /// `confirm`'s WAIT on `conn`, which just carried a grant: how many replicas acknowledged
    /// it, bounded by the confirm timeout plus the per-node timeout.
    async fn wait_replicas(&self, conn: &mut Dedicated, confirm: &Confirm) -> Result<usize, Failure> {
        let bound = confirm.timeout().saturating_add(self.timeout);
        match tokio::time::timeout(bound, conn.query::<usize>(&confirm.command())).await {
            Ok(Ok(acked)) => Ok(acked),
            Ok(Err(e)) => Err(self.failure(e, None)),
            Err(_elapsed) => Err(Failure::TimedOut),
        }
    }

    /// What a grant's `WAIT` answer (`acked`) makes of it: the grant when enough replicas
    /// confirmed it; otherwise it is released here (by our token, so no one else's lease can
    /// end), and the answer says why and whether the release got an answer.
    async fn settle(
        &self,
        request: Acquire<'_>,
        fence: u64,
        confirm: &Confirm,
        acked: Result<usize, Failure>,
    ) -> AcquireReply {
        let error = match acked {
            Ok(acked) if acked >= confirm.replicas() => return AcquireReply::Granted { fence },
            Ok(acked) => {
                Error::NotConfirmed { node: self.name.clone(), wanted: confirm.replicas(), confirmed: acked }
            }
            Err(failure) => self.error("WAIT", failure),
        };
        let key = String::from_utf8_lossy(request.key);
        tracing::debug!(%key, node = %self.name, %error, "grant not confirmed by replicas; releasing it");
        let release = Release { key: request.key, token: request.token };
        let may_hold = match self.release_request(release).await {
            Ok(_held) => false,
            Err(failure) => {
                tracing::debug!(%key, node = %self.name, error = %self.error("RELEASE", failure), "could not release an unconfirmed grant; it expires after the ttl");
                true
            }
        };
        AcquireReply::Unconfirmed { error, may_hold }
    }
}
