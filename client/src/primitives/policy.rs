//! The declared failure policy: what an acquisition hands back when the lock service cannot
//! answer ([`OnUnavailable`]).

use std::sync::Arc;
use std::time::Instant;

use crate::acquisition::coordinator::Coordinator;
use crate::acquisition::lease::{Attempts, Lease};
use crate::acquisition::terms::Terms;
use crate::config::OnUnavailable;
use crate::error::Error;
use crate::metrics::{self, Outcome};

/// The result of [`Locker::acquire_with_policy`](crate::Locker::acquire_with_policy) or
/// [`Redlock`](crate::Redlock)'s: a lease, or (only
/// under [`OnUnavailable::FailOpen`], only when the lock service could not answer) explicit
/// permission to run without one.
///
/// There is no fence without a lease: an unlocked run must not write with a made-up fence,
/// since any number it invented could be larger than a real holder's and lock that holder out
/// of the resource.
#[derive(Debug)]
#[must_use = "a lease is released as soon as it is dropped"]
pub enum Acquisition {
    /// The lock is held.
    Locked(Lease),
    /// The lock service could not answer ([`Error::is_unavailable`], the error inside) and the
    /// policy is [`OnUnavailable::FailOpen`]: the work may run, unprotected by the lock.
    Unlocked(Error),
}

impl Acquisition {
    /// Whether a lease is held.
    pub fn is_locked(&self) -> bool {
        matches!(self, Acquisition::Locked(_))
    }

    /// The lease, if one is held.
    pub fn lease(&self) -> Option<&Lease> {
        match self {
            Acquisition::Locked(lease) => Some(lease),
            Acquisition::Unlocked(_) => None,
        }
    }

    /// The lease, if one is held, by value (to renew, keep alive or release it).
    pub fn into_lease(self) -> Option<Lease> {
        match self {
            Acquisition::Locked(lease) => Some(lease),
            Acquisition::Unlocked(_) => None,
        }
    }

    /// The lease's fence; `None` when running unlocked (a write then carries no fence).
    pub fn fence(&self) -> Option<u64> {
        self.lease().map(Lease::fence)
    }

    /// Why the work runs unlocked; `None` when a lease is held.
    pub fn unavailable(&self) -> Option<&Error> {
        match self {
            Acquisition::Locked(_) => None,
            Acquisition::Unlocked(err) => Some(err),
        }
    }
}

/// `acquire` under the locker's declared policy, every ACQUIRE on `terms`.
pub(crate) async fn acquire(
    coordinator: &Arc<Coordinator>,
    key: &str,
    terms: Terms<'_>,
) -> Result<Acquisition, Error> {
    let start = Instant::now();
    let give_up = start + coordinator.config().max_wait();
    let token = coordinator.config().new_token();
    let result = Lease::take(coordinator, key, token, Attempts::UntilMaxWait, give_up, terms).await;
    let outcome = match &result {
        Err(err)
            if err.is_unavailable() && coordinator.config().on_unavailable() == OnUnavailable::FailOpen =>
        {
            tracing::warn!(key, error = %err, "lock service unavailable; running unlocked (fail open)");
            Outcome::Unlocked
        }
        other => Outcome::of(other),
    };
    metrics::acquired(start, true, outcome);
    match result {
        Ok(lease) => Ok(Acquisition::Locked(lease)),
        Err(err) if outcome == Outcome::Unlocked => Ok(Acquisition::Unlocked(err)),
        Err(err) => Err(err),
    }
}
