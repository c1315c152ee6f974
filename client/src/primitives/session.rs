//! Sessions: many leases kept alive by one keep-alive, lost together when it fails (etcd's
//! `Session` model).
//!
//! Every [`KeptLease`](crate::KeptLease) renews itself: a process holding 1,000 leases sends
//! 1,000 renewals per interval, each its own round trip. A [`Session`] renews all its leases
//! in one pipeline per server per interval: one round trip (on a Redis Cluster, one pipeline
//! per slot, sent together), and the server does exactly a `RENEW`'s work per lease.
//!
//! **Why pipelined renewal, not a session object on the server.** A server-side session that
//! leases reference would renew them all with one command, but it would be a second kind of
//! state with its own expiry, replication, persistence and slot story on both engines, and a
//! lease's validity would then depend on two keys. Pipelining keeps every lease an ordinary
//! lease (fences, `STATUS`, waiting, reclaim and failover unchanged) and costs the server
//! what a `RENEW` costs; the round trips, which are what 1,000 keep-alives pay for, are gone.
//!
//! **Lost together.** A renewal round that fails — a server unreachable or too slow, no
//! majority, the validity run out before the answers came — loses the session: every lease's
//! handle reports the loss, the session's own [`Session::lost`] fires once, the keep-alive
//! stops, and the leases are released in the background. A lease refused on its own (deleted,
//! taken over) is lost alone: its handle reports it and the others carry on.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio_util::sync::CancellationToken;

use crate::acquisition::lease::Lease;
use crate::error::{Error, LossCause};
use crate::metrics;
use crate::primitives::keepalive::LeaseHandle;
use crate::primitives::locker::Locker;
use crate::token::Token;

/// Leases kept alive together; see the module docs. Cloning shares the session, and each of
/// its leases holds it too: once the session and all its leases are dropped (or at
/// [`Session::close`]) the keep-alive stops and every lease is released.
#[derive(Debug, Clone)]
pub struct Session {
    shared: Arc<Shared>,
}

/// One lease of a session: its [`LeaseHandle`] (key, fence, validity, loss; it derefs to it)
/// and its release. Dropping it releases the lease in the background.
#[derive(Debug)]
pub struct SessionLease {
    handle: LeaseHandle,
    id: u64,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    locker: Locker,
    table: Mutex<Table>,
    /// Cancelled when the session is lost or closed.
    ended: CancellationToken,
    loss: Mutex<Option<Error>>,
}

#[derive(Debug, Default)]
struct Table {
    next: u64,
    held: BTreeMap<u64, (Lease, LeaseHandle)>,
}

impl Locker {
    /// A new session on this locker's servers, renewing every
    /// [`renew_interval`](crate::LockConfig::renew_interval). Must be called inside a Tokio
    /// runtime.
    pub fn session(&self) -> Session {
        let shared = Arc::new(Shared {
            locker: self.clone(),
            table: Mutex::new(Table::default()),
            ended: CancellationToken::new(),
            loss: Mutex::new(None),
        });
        tokio::spawn(keep_alive(Arc::downgrade(&shared)));
        Session { shared }
    }
}

impl Session {
    /// [`Locker::acquire`] (waiting up to the locker's `max_wait`), kept alive by this session.
    pub async fn acquire(&self, key: &str) -> Result<SessionLease, Error> {
        self.ensure_valid()?;
        let lease = self.shared.locker.acquire(key).await?;
        self.join(lease).await
    }

    /// [`Locker::try_acquire`], kept alive by this session.
    pub async fn try_acquire(&self, key: &str) -> Result<SessionLease, Error> {
        self.ensure_valid()?;
        let lease = self.shared.locker.try_acquire(key).await?;
        self.join(lease).await
    }

    /// Puts `lease` under the keep-alive; a session that ended meanwhile releases it at once.
    async fn join(&self, lease: Lease) -> Result<SessionLease, Error> {
        let handle = LeaseHandle::of(&lease);
        // Checked under the lock with which the keep-alive ends the session: a lease joins a
        // live session, or none.
        let joined = {
            let mut table = self.shared.lock();
            if self.shared.ended.is_cancelled() {
                Err(lease)
            } else {
                table.next += 1;
                let id = table.next;
                table.held.insert(id, (lease, handle.clone()));
                Ok(id)
            }
        };
        match joined {
            Ok(id) => Ok(SessionLease { handle, id, shared: Arc::clone(&self.shared) }),
            Err(lease) => {
                let _ = lease.release().await;
                Err(self.ended_error())
            }
        }
    }

    /// How many leases the session keeps alive.
    pub fn len(&self) -> usize {
        self.shared.lock().held.len()
    }

    /// Whether the session keeps no lease alive.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `Err` with the reason once the session is lost or closed.
    pub fn ensure_valid(&self) -> Result<(), Error> {
        match self.shared.ended.is_cancelled() {
            true => Err(self.ended_error()),
            false => Ok(()),
        }
    }

    /// A token cancelled when the session ends (lost, or closed).
    pub fn cancellation(&self) -> CancellationToken {
        self.shared.ended.clone()
    }

    /// Completes when the session ends, with the reason: the one loss signal for all its
    /// leases.
    pub async fn lost(&self) -> Error {
        self.shared.ended.cancelled().await;
        self.ended_error()
    }

    /// Stops the keep-alive and releases every lease; the number still held.
    pub async fn close(self) -> usize {
        let leases = self.shared.end(None);
        let released = futures::future::join_all(leases.into_iter().map(Lease::release)).await;
        released.into_iter().filter(|r| matches!(r, Ok(true))).count()
    }

    /// The loss that ended the session; a closed session's names no key.
    fn ended_error(&self) -> Error {
        let loss = self.shared.loss.lock().unwrap_or_else(PoisonError::into_inner).clone();
        loss.unwrap_or(Error::LeaseLost { key: String::new(), cause: LossCause::KeepAliveStopped })
    }
}

impl std::ops::Deref for SessionLease {
    type Target = LeaseHandle;

    /// The lease's handle: key, fence, validity and loss, as for a kept-alive lease.
    fn deref(&self) -> &LeaseHandle {
        &self.handle
    }
}

impl SessionLease {
    /// A handle on the lease (key, fence, validity, loss) to hand to other tasks.
    pub fn handle(&self) -> LeaseHandle {
        self.handle.clone()
    }

    /// Takes the lease out of the session and releases it; see [`Lease::release`].
    pub async fn release(self) -> Result<bool, Error> {
        self.handle.ensure_valid()?;
        match self.shared.take(self.id) {
            Some(lease) => lease.release().await,
            None => Err(self
                .handle
                .loss()
                .unwrap_or_else(|| self.handle.lost_because(LossCause::KeepAliveStopped))),
        }
    }
}

impl Drop for SessionLease {
    fn drop(&mut self) {
        // Dropping the lease releases it in the background (a no-op after `release`).
        drop(self.shared.take(self.id));
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn take(&self, id: u64) -> Option<Lease> {
        self.lock().held.remove(&id).map(|(lease, _)| lease)
    }

    /// Ends the session (lost with `loss`, or closed): every handle is told, and the leases
    /// are handed back for release.
    fn end(&self, loss: Option<Error>) -> Vec<Lease> {
        // All under the table's lock, and the handles told before the session's own signal:
        // whoever sees the session ended finds every lease lost, and no lease joins after.
        let mut table = self.lock();
        if self.ended.is_cancelled() {
            return Vec::new();
        }
        let held = std::mem::take(&mut table.held);
        for (_, handle) in held.values() {
            let err = loss.clone().unwrap_or_else(|| handle.lost_because(LossCause::KeepAliveStopped));
            handle.declare_lost(err);
        }
        *self.loss.lock().unwrap_or_else(PoisonError::into_inner) = loss;
        self.ended.cancel();
        held.into_values().map(|(lease, _)| lease).collect()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The session and all its leases are gone: what the table still holds is dropped
        // with it, each lease releasing itself in the background.
        self.ended.cancel();
    }
}

/// Renews every lease of the session once per renew interval, in one round of pipelines,
/// until the session ends or its last clone is dropped.
async fn keep_alive(shared: std::sync::Weak<Shared>) {
    loop {
        let (interval, ended) = match shared.upgrade() {
            Some(s) => (s.locker.config().renew_interval(), s.ended.clone()),
            None => return,
        };
        tokio::select! {
            biased;
            _ = ended.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let Some(session) = shared.upgrade() else { return };
        if !renew_round(&session).await {
            return;
        }
    }
}

/// One renewal of every lease; `false` once the session ended.
async fn renew_round(session: &Shared) -> bool {
    let snapshot: Vec<(u64, String, Token, LeaseHandle)> = session
        .lock()
        .held
        .iter()
        .map(|(&id, (lease, handle))| (id, lease.key().to_owned(), lease.token().clone(), handle.clone()))
        .collect();
    // The lease whose validity ends first: answers after that come too late for it.
    let Some(first) = snapshot.iter().map(|(.., handle)| handle).min_by_key(|handle| handle.valid_until())
    else {
        return !session.ended.is_cancelled();
    };
    let leases: Vec<(&str, &Token)> =
        snapshot.iter().map(|(_, key, token, _)| (key.as_str(), token)).collect();
    let rounds = &session.locker.coordinator().rounds;
    let renewed = tokio::select! {
        biased;
        _ = session.ended.cancelled() => return false,
        renewed = rounds.renew_many(&leases) => renewed,
        _ = tokio::time::sleep_until(first.valid_until().into()) => {
            return lose(session, first.lost_because(LossCause::Expired));
        }
    };
    for ((id, _, _, handle), result) in snapshot.iter().zip(renewed) {
        match result {
            Ok(deadline) => {
                metrics::renewed(true);
                handle.renewed(deadline);
            }
            // Refused: this lease alone is gone (deleted, taken over); the others carry on.
            Err(err) if err.is_lease_lost() => {
                metrics::renewed(false);
                tracing::warn!(key = handle.key(), fence = handle.fence(), error = %err, "session lease lost");
                handle.declare_lost(err);
                if let Some(lease) = session.take(*id) {
                    lease.record_loss();
                }
            }
            // The keep-alive itself failed: the whole session is lost.
            Err(err) => {
                metrics::renewed(false);
                return lose(session, handle.lost_because(LossCause::RenewFailed(Box::new(err))));
            }
        }
    }
    !session.ended.is_cancelled()
}

/// Ends the session as lost with `err`; its leases are released in the background (each
/// lease's drop does it). Always `false`: the keep-alive stops.
fn lose(session: &Shared, err: Error) -> bool {
    tracing::warn!(error = %err, "session lost; every lease of it is lost");
    for lease in session.end(Some(err)) {
        lease.record_loss();
    }
    false
}
