//! A held lease: what the holder needs to do fenced work and to give the lock back.

use std::time::{Duration, Instant};

use crate::error::{Error, LossCause};
use crate::keepalive::KeptLease;
use crate::quorum::QuorumReport;
use crate::redlock::{Claim, Grant};
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
    /// Engine, key and token; disarmed once released or detached, else dropping releases.
    claim: Claim,
    fence: u64,
    deadline: Instant,
    report: QuorumReport,
}

impl Lease {
    /// The lease for a granted round, taking over the (armed) claim the round was made with.
    pub(crate) fn new(claim: Claim, grant: Grant) -> Lease {
        Lease { claim, fence: grant.fence, deadline: grant.deadline, report: grant.report }
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
        match self.claim.engine.renew(&self.claim.key, &self.claim.token).await {
            Ok(deadline) => {
                self.deadline = deadline;
                Ok(())
            }
            Err(err) => {
                if err.is_lease_lost() {
                    self.deadline = self.deadline.min(Instant::now());
                }
                Err(err)
            }
        }
    }

    /// Ends the lease on every node. `Ok(true)` if the server (a majority) still held it,
    /// `Ok(false)` if it had already expired or been taken over (there), and an error when
    /// too few nodes answered to tell.
    pub async fn release(mut self) -> Result<bool, Error> {
        self.claim.armed = false;
        self.claim.engine.release(&self.claim.key, &self.claim.token).await
    }

    /// Keeps the lease alive in a background task that renews every
    /// [`renew_interval`](crate::LockConfig::renew_interval) (ttl / 3 by default) and signals
    /// loss on the first failed renewal. Must be called inside a Tokio runtime.
    pub fn keep_alive(self) -> KeptLease {
        KeptLease::start(self)
    }

    /// Gives up responsibility for the lease without releasing it: it stays held until its
    /// ttl runs out or someone releases it with the returned token.
    pub fn detach(mut self) -> Token {
        self.claim.armed = false;
        self.claim.token.clone()
    }

    fn lost(&self, cause: LossCause) -> Error {
        Error::LeaseLost { key: self.claim.key.clone(), cause }
    }

    /// When the keep-alive should renew next: one renew interval after the request that
    /// produced the current deadline was sent (`deadline - (ttl - drift)`), so a lease kept
    /// alive late in its life is renewed at once rather than a full interval later.
    pub(crate) fn renewal_due(&self) -> Instant {
        let config = &self.claim.engine.config;
        let window = config.ttl().saturating_sub(config.drift());
        self.deadline.checked_sub(window).map_or(self.deadline, |sent| sent + config.renew_interval())
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
