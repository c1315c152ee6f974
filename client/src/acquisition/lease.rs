//! A held lease: what the holder needs to do fenced work and to give the lock back, and the
//! claim that releases it on every node when nobody holds it any more.
//!
//! Taking a lease is here too, not in the coordinator: the claim is armed across the rounds, so a
//! caller that gives up midway (drops the future) leaves no lease behind — nor a waiter in a
//! server's queue, since a waiting request's connection is closed when its future is dropped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::acquisition::coordinator::Coordinator;
use crate::acquisition::rounds::Grant;
use crate::acquisition::terms::Terms;
use crate::acquisition::waiting::Turn;
use crate::error::{Error, LossCause};
use crate::metrics::{self, Outcome};
use crate::quorum::QuorumReport;
use crate::token::Token;
use crate::validity;

/// A lease on one key, granted by one server or by a Redlock majority.
///
/// Pass [`Lease::fence`] to the resource with every write; the resource must refuse writes
/// whose fence is lower than one it has already seen. [`Lease::ensure_valid`] is a cheap local
/// check against the validity measured on this process's monotonic clock from *before* the
/// grant request was sent, minus clock drift.
///
/// Dropping a lease that was not released starts a background release (when a Tokio runtime
/// is available; otherwise the lease simply expires after its ttl). Dropping never blocks.
#[must_use = "a lease is released as soon as it is dropped"]
pub struct Lease {
    /// Coordinator, key and token; disarmed once released or detached, else dropping releases.
    claim: Claim,
    fence: u64,
    deadline: Instant,
    report: QuorumReport,
    /// When the lease was handed to the caller: hold time runs from here.
    granted_at: Instant,
    /// Whether the loss of this lease was counted already (each lease counts once).
    loss_recorded: AtomicBool,
}

/// How many acquisition rounds one call may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempts {
    /// A single round.
    Once,
    /// Waiting on the server where it can (see the `waiting` module), otherwise rounds with
    /// jittered backoff, until granted, an error is final, or the configured maximum wait
    /// runs out.
    UntilMaxWait,
}

impl Lease {
    /// Takes a lease on `key` for `token` in rounds the `coordinator` picks, waiting on the server where
    /// it can, and records the call's outcome and duration. Every ACQUIRE is on `terms` (a
    /// label, a semaphore's permits; [`Terms::mutex`] for a plain lock).
    pub(crate) async fn acquire(
        coordinator: &Arc<Coordinator>,
        key: &str,
        token: Token,
        attempts: Attempts,
        terms: Terms<'_>,
    ) -> Result<Lease, Error> {
        let start = Instant::now();
        let give_up = start + coordinator.config().max_wait();
        let result = Lease::take(coordinator, key, token, attempts, give_up, terms).await;
        metrics::acquired(start, attempts == Attempts::UntilMaxWait, Outcome::of(&result));
        result
    }

    /// [`Lease::acquire`] without recording the call (the failure policy records its own
    /// outcome; an election's campaign is no acquisition to time), giving up at `give_up`;
    /// each failed attempt is counted. Every ACQUIRE is on `terms`: the public label, if any
    /// (an election's candidate: the label is the leader's name, and `STATUS` shows it while
    /// the lease is held), and the key's permits (a semaphore's).
    ///
    /// One token serves every round of the call: ACQUIRE is idempotent for its holder, so a
    /// node that granted in a round whose reply (or release) was lost simply grants again.
    pub(crate) async fn take(
        coordinator: &Arc<Coordinator>,
        key: &str,
        token: Token,
        attempts: Attempts,
        give_up: Instant,
        terms: Terms<'_>,
    ) -> Result<Lease, Error> {
        Error::check_key(key)?;
        let mut claim = Claim {
            coordinator: Arc::clone(coordinator),
            key: key.to_owned(),
            token,
            armed: false,
            waited: false,
        };
        let request = terms.request(key, &claim.token, coordinator.config().ttl_ms());
        let mut round = 0u32;
        loop {
            // Armed while anything may be held, a waiting request in flight included: the
            // server may grant it just before it sees the connection close.
            claim.armed = true;
            let waits = attempts == Attempts::UntilMaxWait && Instant::now() < give_up;
            let turn = if waits {
                claim.waited = true;
                // Boxed: the waiting step's state would make every lease's future (and each
                // copy of it) larger, waiting or not.
                Box::pin(coordinator.take_turn(request, give_up)).await
            } else {
                Turn::Poll
            };
            // `held`: whether a failure may have left something of ours on a node that the
            // round did not release afterwards.
            let (result, held, last) = match turn {
                Turn::Granted(grant) => (Ok(grant), true, true),
                Turn::Again => continue,
                Turn::Reserved => {
                    // Not-awaited waiting requests of the round are closed as it ends, and the
                    // round's release may reach a node before the close does: stay armed.
                    let block = Some(coordinator.config().node_timeout());
                    let result = coordinator.attempt(request, block).await;
                    (result, true, false)
                }
                Turn::Poll => (coordinator.attempt(request, None).await, false, false),
                Turn::TimedOut if coordinator.timed_out_is_final() => {
                    (Err(Error::Contended { key: key.to_owned() }), false, true)
                }
                // Redlock: the designated node kept us waiting to the end; one last plain round
                // tells how every node stands (and may still be granted).
                Turn::TimedOut => (coordinator.attempt(request, None).await, false, true),
                Turn::Failed { error, may_hold } => (Err(error), may_hold, false),
            };
            let err = match result {
                Ok(grant) => return Ok(Lease::granted(claim, grant)),
                Err(err) => err,
            };
            metrics::attempt_failed(&err);
            claim.armed = held;
            let now = Instant::now();
            if last || attempts == Attempts::Once || !err.is_retryable() || now >= give_up {
                return Err(err);
            }
            let delay = coordinator.config().backoff().delay(round, &mut rand::rng());
            tracing::debug!(key, round, ?delay, error = %err, "lock busy, retrying");
            tokio::time::sleep(delay.min(give_up - now)).await;
            round = round.saturating_add(1);
        }
    }

    /// The lease on `key` that a grant made outside the rounds gives (a set of keys taken in
    /// one `ACQUIREALL`): armed from now on, released on drop like any other.
    pub(crate) fn from_grant(coordinator: &Arc<Coordinator>, key: &str, token: Token, grant: Grant) -> Lease {
        let claim = Claim {
            coordinator: Arc::clone(coordinator),
            key: key.to_owned(),
            token,
            armed: true,
            waited: false,
        };
        Lease::granted(claim, grant)
    }

    /// The lease `grant` gives; it owns the (still armed) claim's release from now on.
    fn granted(mut claim: Claim, grant: Grant) -> Lease {
        // Every waiting request of the acquisition was answered or closed long before this
        // lease is released.
        claim.waited = false;
        claim.armed = true;
        Lease {
            claim,
            fence: grant.fence,
            deadline: grant.deadline,
            report: grant.report,
            granted_at: Instant::now(),
            loss_recorded: AtomicBool::new(false),
        }
    }

    /// The lock key.
    pub fn key(&self) -> &str {
        &self.claim.key
    }

    /// The fencing token: strictly greater than the fence of every earlier grant on this key
    /// (for Redlock, with [`Fencing::Raise`](crate::Fencing::Raise) and a majority that keeps
    /// its state).
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The secret that proves ownership to the servers.
    pub fn token(&self) -> &Token {
        &self.claim.token
    }

    /// The instant (monotonic clock) after which the lease must not be relied on.
    pub fn valid_until(&self) -> Instant {
        self.deadline
    }

    /// Validity left; zero once expired.
    pub fn remaining(&self) -> Duration {
        validity::remaining(self.deadline, Instant::now())
    }

    /// Whether some validity is left.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.deadline
    }

    /// `Err(Error::LeaseLost)` once the validity ran out.
    pub fn ensure_valid(&self) -> Result<(), Error> {
        if self.is_valid() {
            Ok(())
        } else {
            self.record_loss();
            Err(self.lost(LossCause::Expired))
        }
    }

    /// How each node voted for this lease (and, for fenced Redlock, confirmed the raise).
    /// Minority failures show up here.
    pub fn report(&self) -> &QuorumReport {
        &self.report
    }

    /// Extends the lease to a full ttl from now (measured from before the request).
    ///
    /// [`Error::LeaseLost`] if the validity already ran out locally or the server (a majority
    /// of masters) no longer holds our token. A timeout or server error leaves the lease as it
    /// was: it may still be held until [`Lease::valid_until`]. A Redlock renewal ends as soon
    /// as a majority confirmed (or can no longer confirm); when it fails early because some
    /// nodes failed, the error is [`Error::QuorumNotReached`] rather than a loss even if the
    /// nodes not waited for would have refused. [`Locker::renew_token`](crate::Locker::renew_token)
    /// is the same round for a token without a lease.
    pub async fn renew(&mut self) -> Result<(), Error> {
        self.ensure_valid()?;
        match self.claim.coordinator.rounds.renew(&self.claim.key, &self.claim.token).await {
            Ok(deadline) => {
                metrics::renewed(true);
                self.deadline = deadline;
                Ok(())
            }
            Err(err) => {
                metrics::renewed(false);
                if err.is_lease_lost() {
                    self.record_loss();
                    self.deadline = self.deadline.min(Instant::now());
                }
                Err(err)
            }
        }
    }

    /// Asks for this lease's key again with its own token on `terms` (a write lease turning
    /// into a read lease), one attempt. The server keeps the fence while the lease holds, and
    /// the lease runs a fresh ttl. A lease that ended first is not continued: the key may have
    /// had another writer since, so a new grant (another fence) is released again and, like
    /// a refusal, reported as [`Error::LeaseLost`].
    pub(crate) async fn reask(&mut self, terms: Terms<'_>) -> Result<(), Error> {
        self.ensure_valid()?;
        let coordinator = Arc::clone(&self.claim.coordinator);
        let request = terms.request(&self.claim.key, &self.claim.token, coordinator.config().ttl_ms());
        let lost = match coordinator.attempt(request, None).await {
            Ok(grant) if grant.fence == self.fence => {
                self.deadline = grant.deadline;
                return Ok(());
            }
            Ok(_) => {
                // Best effort: what is not released now expires after its ttl.
                let _ = coordinator.rounds.release(&self.claim.key, &self.claim.token).await;
                LossCause::Refused
            }
            Err(Error::Contended { .. }) => LossCause::Refused,
            Err(err) => return Err(err),
        };
        self.record_loss();
        self.deadline = self.deadline.min(Instant::now());
        Err(self.lost(lost))
    }

    /// Ends the lease on every node. `Ok(true)` if the server (a majority) still held it,
    /// `Ok(false)` if it had already expired or been taken over (there), and an error when
    /// too few nodes answered to tell.
    pub async fn release(mut self) -> Result<bool, Error> {
        self.claim.armed = false;
        metrics::released(self.granted_at.elapsed(), self.claim.coordinator.config().ttl());
        let held = self.claim.coordinator.rounds.release(&self.claim.key, &self.claim.token).await;
        if let Ok(false) = held {
            self.record_loss();
        }
        held
    }

    /// Gives up responsibility for the lease without releasing it: it stays held until its
    /// ttl runs out or someone releases it with the returned token.
    pub fn detach(mut self) -> Token {
        self.claim.armed = false;
        self.claim.token.clone()
    }

    /// Counts this lease as lost, once.
    pub(crate) fn record_loss(&self) {
        if !self.loss_recorded.swap(true, Ordering::Relaxed) {
            metrics::lease_lost();
        }
    }

    fn lost(&self, cause: LossCause) -> Error {
        Error::LeaseLost { key: self.claim.key.clone(), cause }
    }

    /// When the keep-alive should renew next: one renew interval after the request that
    /// produced the current deadline was sent (`deadline - (ttl - drift)`), so a lease kept
    /// alive late in its life is renewed at once rather than a full interval later.
    pub(crate) fn renewal_due(&self) -> Instant {
        let config = self.claim.coordinator.config();
        let window = config.ttl().saturating_sub(config.drift());
        self.deadline.checked_sub(window).map_or(self.deadline, |sent| sent + config.renew_interval())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Dropped while held: the claim releases it in the background, which ends the hold.
        if self.claim.armed {
            metrics::released(self.granted_at.elapsed(), self.claim.coordinator.config().ttl());
        }
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.claim.key)
            .field("fence", &self.fence)
            .field("remaining", &self.remaining())
            .field("token", &self.claim.token)
            .finish()
    }
}

/// Our claim on a key: the coordinator, the key and our token. While armed, dropping it releases
/// on every node in a background task, so neither a cancelled acquisition (dropped while a
/// round is in flight) nor a dropped [`Lease`] (which owns the claim after the grant) leaves
/// a node holding a lease nobody knows about. Dropping never blocks a runtime thread; without
/// a runtime the lease simply expires after its ttl.
///
/// A cancelled acquisition that waited on a server released twice: at once, and again one
/// node timeout later. The waiting request's connection is closed when its future is
/// dropped, but the release goes out on another connection and may reach the server first;
/// if the lease is handed to the waiter between the two, only the later release ends it.
struct Claim {
    coordinator: Arc<Coordinator>,
    key: String,
    token: Token,
    armed: bool,
    /// Whether a waiting request of this acquisition may still be queued on a server.
    waited: bool,
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (rounds, key, token) =
            (Arc::clone(&self.coordinator.rounds), self.key.clone(), self.token.clone());
        let waited = self.waited;
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    let _ = rounds.release_report(&key, &token).await;
                    if waited {
                        tokio::time::sleep(rounds.config.node_timeout()).await;
                        let _ = rounds.release_report(&key, &token).await;
                    }
                });
            }
            Err(_) => {
                tracing::debug!(key, "no Tokio runtime to release on drop; the lease expires after its ttl");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{LockConfig, Locker, Redlock};

    /// A lease's future is built, then moved several times before it completes (into each
    /// caller's state, and into a task when spawned), and every move copies all of it: the
    /// rarer paths (waiting, replica confirmation, the raise step, giving back) are boxed so
    /// that their state does not weigh on every lease. Was 20 KB, a tenth of the client's
    /// own instructions per lease in copies (callgrind, issue #44).
    #[test]
    fn a_leases_future_stays_small() {
        const LIMIT: usize = 8 * 1024;
        let config = || LockConfig::builder().build().unwrap();
        let locker = Locker::open("redis://127.0.0.1:1", config()).unwrap();
        let redlock =
            Redlock::open(&["redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:3"], config())
                .unwrap();
        for (what, size) in [
            ("Locker::try_acquire", std::mem::size_of_val(&locker.try_acquire("k"))),
            ("Locker::acquire", std::mem::size_of_val(&locker.acquire("k"))),
            ("Redlock::try_acquire", std::mem::size_of_val(&redlock.try_acquire("k"))),
        ] {
            assert!(size <= LIMIT, "{what}'s future is {size} bytes (limit {LIMIT})");
        }
    }
}
