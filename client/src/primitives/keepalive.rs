//! Keep-alive: renew a lease in the background and tell the holder the moment it is lost.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::acquisition::lease::Lease;
use crate::error::{Error, LossCause};
use crate::metrics;
use crate::validity;

/// State shared between the keep-alive task and the holder's handles.
#[derive(Debug)]
struct Shared {
    key: String,
    fence: u64,
    deadline: Mutex<Instant>,
    loss: Mutex<Option<Error>>,
    lost: CancellationToken,
}

/// A cheap, cloneable view of a kept-alive lease for the code doing the protected work.
///
/// `select!` on [`LeaseHandle::lost`] (or the [`CancellationToken`] from
/// [`LeaseHandle::cancellation`]) to stop as soon as a renewal fails.
#[derive(Debug, Clone)]
pub struct LeaseHandle(Arc<Shared>);

impl LeaseHandle {
    /// The lock key.
    pub fn key(&self) -> &str {
        &self.0.key
    }

    /// The lease's fence; pass it to the resource with every write.
    pub fn fence(&self) -> u64 {
        self.0.fence
    }

    /// The current validity deadline (moves forward with every renewal).
    pub fn valid_until(&self) -> Instant {
        *self.0.deadline.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Validity left; zero once expired or lost.
    pub fn remaining(&self) -> Duration {
        if self.0.lost.is_cancelled() {
            return Duration::ZERO;
        }
        validity::remaining(self.valid_until(), Instant::now())
    }

    /// Whether the lease is lost (a renewal failed or the validity ran out).
    pub fn is_lost(&self) -> bool {
        self.0.lost.is_cancelled() || Instant::now() >= self.valid_until()
    }

    /// `Err(Error::LeaseLost)` once the lease is lost.
    pub fn ensure_valid(&self) -> Result<(), Error> {
        if let Some(err) = self.loss() {
            return Err(err);
        }
        if Instant::now() >= self.valid_until() {
            return Err(self.lost_because(LossCause::Expired));
        }
        Ok(())
    }

    /// The reason the lease was lost, once it was.
    pub fn loss(&self) -> Option<Error> {
        self.0.loss.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// A token cancelled when the lease is lost. Clones of it can be handed to sub-tasks.
    pub fn cancellation(&self) -> CancellationToken {
        self.0.lost.clone()
    }

    /// Completes when the lease is lost, with the reason.
    pub async fn lost(&self) -> Error {
        self.0.lost.cancelled().await;
        self.loss().unwrap_or_else(|| self.lost_because(LossCause::KeepAliveStopped))
    }

    /// A handle on `lease` as granted, not lost yet.
    pub(crate) fn of(lease: &Lease) -> LeaseHandle {
        LeaseHandle(Arc::new(Shared {
            key: lease.key().to_owned(),
            fence: lease.fence(),
            deadline: Mutex::new(lease.valid_until()),
            loss: Mutex::new(None),
            lost: CancellationToken::new(),
        }))
    }

    /// A renewal moved the validity to `deadline`.
    pub(crate) fn renewed(&self, deadline: Instant) {
        *self.0.deadline.lock().unwrap_or_else(PoisonError::into_inner) = deadline;
    }

    pub(crate) fn lost_because(&self, cause: LossCause) -> Error {
        Error::LeaseLost { key: self.0.key.clone(), cause }
    }

    /// Records why the lease is lost and cancels its token (the first reason stays).
    pub(crate) fn declare_lost(&self, err: Error) {
        if self.0.lost.is_cancelled() {
            return;
        }
        *self.0.loss.lock().unwrap_or_else(PoisonError::into_inner) = Some(err);
        self.0.lost.cancel();
    }
}

// Here rather than beside `Lease`: the lease module then needs nothing from this one, which
// needs the lease.
impl Lease {
    /// Keeps the lease alive in a background task that renews every
    /// [`renew_interval`](crate::LockConfig::renew_interval) (ttl / 3 by default) and signals
    /// loss on the first failed renewal. Must be called inside a Tokio runtime.
    pub fn keep_alive(self) -> KeptLease {
        KeptLease::start(self)
    }
}

/// A lease kept alive by a background task; see [`Lease::keep_alive`].
///
/// Dropping it stops the renewals and releases the lease in the background.
#[derive(Debug)]
pub struct KeptLease {
    handle: LeaseHandle,
    stop: CancellationToken,
    task: Option<JoinHandle<Lease>>,
}

impl KeptLease {
    fn start(lease: Lease) -> KeptLease {
        let handle = LeaseHandle::of(&lease);
        let stop = CancellationToken::new();
        let task = tokio::spawn(renew_loop(lease, handle.clone(), stop.clone()));
        KeptLease { handle, stop, task: Some(task) }
    }

    /// A cloneable handle for the protected work.
    pub fn handle(&self) -> LeaseHandle {
        self.handle.clone()
    }

    /// The lock key.
    pub fn key(&self) -> &str {
        self.handle.key()
    }

    /// The lease's fence.
    pub fn fence(&self) -> u64 {
        self.handle.fence()
    }

    /// Validity left; zero once lost.
    pub fn remaining(&self) -> Duration {
        self.handle.remaining()
    }

    /// `Err(Error::LeaseLost)` once the lease is lost.
    pub fn ensure_valid(&self) -> Result<(), Error> {
        self.handle.ensure_valid()
    }

    /// A token cancelled when the lease is lost.
    pub fn cancellation(&self) -> CancellationToken {
        self.handle.cancellation()
    }

    /// Completes when the lease is lost, with the reason.
    pub async fn lost(&self) -> Error {
        self.handle.lost().await
    }

    /// Stops renewing and hands the lease back (still held until its validity runs out).
    pub async fn stop(mut self) -> Result<Lease, Error> {
        self.stop.cancel();
        // `task` is an `Option` only so that `Drop` can coexist with moving it out here; it
        // is always present, and a task that did not return the lease (the runtime shut down)
        // means the keep-alive stopped.
        let returned = match self.task.take() {
            Some(task) => task.await.ok(),
            None => None,
        };
        returned.ok_or_else(|| self.handle.lost_because(LossCause::KeepAliveStopped))
    }

    /// Stops renewing and releases the lease; see [`Lease::release`].
    pub async fn release(self) -> Result<bool, Error> {
        self.stop().await?.release().await
    }
}

impl Drop for KeptLease {
    fn drop(&mut self) {
        // The task returns the lease and drops it, which releases it in the background.
        self.stop.cancel();
    }
}

enum Step {
    Stop,
    Renewed(Result<(), Error>),
}

/// Renews every interval; on the first failure records the loss, cancels the holder's token
/// and returns the lease (whose drop then releases whatever is left of it).
async fn renew_loop(mut lease: Lease, handle: LeaseHandle, stop: CancellationToken) -> Lease {
    loop {
        let next = lease.renewal_due();
        tokio::select! {
            biased;
            _ = stop.cancelled() => return lease,
            _ = tokio::time::sleep_until(next.into()) => {}
        }
        let deadline = lease.valid_until();
        let step = tokio::select! {
            biased;
            _ = stop.cancelled() => Step::Stop,
            result = lease.renew() => Step::Renewed(result),
            // A renewal still in flight when the validity runs out is too late.
            _ = tokio::time::sleep_until(deadline.into()) => {
                metrics::renewed(false);
                Step::Renewed(Err(handle.lost_because(LossCause::Expired)))
            }
        };
        match step {
            Step::Stop => return lease,
            Step::Renewed(Ok(())) => handle.renewed(lease.valid_until()),
            Step::Renewed(Err(err)) => {
                let err = if err.is_lease_lost() {
                    err
                } else {
                    handle.lost_because(LossCause::RenewFailed(Box::new(err)))
                };
                tracing::warn!(key = handle.key(), fence = handle.fence(), error = %err, "lease lost");
                lease.record_loss();
                handle.declare_lost(err);
                return lease;
            }
        }
    }
}

/// Keeps `lease` alive while `work` runs; drops `work` if the lease is lost. The lease is
/// released after `work` whether it succeeded or not.
pub(crate) async fn with_lease<F, Fut, T, E>(lease: Lease, work: F) -> Result<T, E>
where
    F: FnOnce(LeaseHandle) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: From<Error>,
{
    let kept = lease.keep_alive();
    let handle = kept.handle();
    // On a loss, dropping `kept` stops the keep-alive and releases what is left in the background.
    let output = while_held(&handle, work).await?;
    if let Err(err) = kept.release().await {
        tracing::warn!(key = handle.key(), error = %err, "release after work failed; the lease expires after its ttl");
    }
    output
}

/// `work` while `handle`'s lease is held: its output, or the loss the moment the lease is lost
/// (`work` is then dropped at its next `.await`).
pub(crate) async fn while_held<F, Fut>(handle: &LeaseHandle, work: F) -> Result<Fut::Output, Error>
where
    F: FnOnce(LeaseHandle) -> Fut,
    Fut: Future,
{
    tokio::select! {
        biased;
        loss = handle.lost() => Err(loss),
        output = work(handle.clone()) => Ok(output),
    }
}
