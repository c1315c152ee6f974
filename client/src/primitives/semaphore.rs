//! Fenced semaphores: a key that admits up to N holders at once, each with its own token,
//! lease and fence (`FENCEDLOCK.ACQUIRE … PERMITS n`).
//!
//! A permit is an ordinary [`Lease`]: renew, release, keep-alive and [`Lease::fence`] work
//! as for a lock, since the server finds a holder's permit by its token. Fences strictly
//! increase over every grant on the key, so each holder's fence is unique and later grants
//! have higher ones. Waiting is the server's, as for a lock: waiters queue per key in arrival
//! order and are granted, in that order, as many as permits come free.
//!
//! # Each permit is fenced on its own
//!
//! Up to N holders write at once, so a resource shared by them cannot keep one global
//! "highest fence seen" (the holder with the highest fence would lock the others out). Each
//! holder is fenced separately: give every permit its own slot (a row per worker slot, a
//! shard, a partition) and check the fence against that slot's `last_fence`, so a holder that
//! was paused past its lease cannot overwrite the work of whoever took its slot since.
//!
//! # The permit count
//!
//! Every caller on a key must ask with the same count. While anyone holds the key, an
//! acquisition with another count is refused with the module's
//! [`ReplyError::PermitsMismatch`](crate::ReplyError::PermitsMismatch) (an [`Error::Server`]:
//! final, not retried, never "unavailable") and changes nothing; the count changes when the
//! first grant after the key went idle sets it anew.
//!
//! # Redlock
//!
//! Semaphores run on a [`Locker`] (one server, or a Redis Cluster routed by key), not on a
//! [`Redlock`](crate::Redlock): a quorum of independent masters cannot bound the holders.
//! With 3 masters of N permits each, every master can grant N clients, and a client needs only
//! 2 of them: up to 1.5·N clients hold majorities at once. Across failures of the server, a
//! [`Locker`] keeps the bound with replication, `appendfsync always` and the module's epoch
//! jump on promotion.

use fencedlock_protocol::SemaphoreStatus;

use crate::acquisition::lease::{Attempts, Lease};
use crate::acquisition::terms::Terms;
use crate::error::Error;
use crate::primitives::locker::Locker;
use crate::primitives::policy::{self, Acquisition};

/// A fenced semaphore on one key of a [`Locker`]'s server: up to `permits` holders at once.
///
/// Cheap to clone; clones share the locker's connections. The lease options (ttl, renew
/// interval, waiting, failure policy) are the locker's [`LockConfig`](crate::LockConfig).
///
/// ```no_run
/// # async fn demo() -> Result<(), fencedlock::Error> {
/// use std::time::Duration;
/// use fencedlock::{LockConfig, Locker, Semaphore};
///
/// let config = LockConfig::builder().ttl(Duration::from_secs(10)).max_wait(Duration::from_secs(30)).build()?;
/// let exports = Semaphore::new(Locker::open("redis://127.0.0.1:6379", config)?, "nightly-export", 3)?;
/// let permit = exports.acquire().await?;
/// // At most 3 exports run at once; each writes to its own slot with permit.fence().
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    locker: Locker,
    key: String,
    permits: u32,
    label: Option<Vec<u8>>,
}

impl Semaphore {
    /// A semaphore of `permits` holders on `key` of `locker`'s server. `permits` must be 1
    /// (a mutex, the same key as [`Locker::acquire`]'s) to [`MAX_PERMITS`](crate::MAX_PERMITS)
    /// ([`Error::Config`] otherwise).
    pub fn new(locker: Locker, key: impl Into<String>, permits: u32) -> Result<Semaphore, Error> {
        Error::check_permits(permits)?;
        Ok(Semaphore { locker, key: key.into(), permits, label: None })
    }

    /// The same semaphore, every permit it grants carrying the public `label` (instead of the
    /// locker's [`label`](crate::LockConfigBuilder::label), if it has one) (1 to
    /// [`MAX_LABEL_LEN`](crate::MAX_LABEL_LEN) bytes, [`Error::Config`] otherwise): `STATUS`
    /// shows it next to the holder's fence, so operators see who holds which permit. Never
    /// put a secret in it.
    pub fn with_label(mut self, label: impl Into<Vec<u8>>) -> Result<Semaphore, Error> {
        self.label = Some(Error::checked_label(label)?);
        Ok(self)
    }

    /// The semaphore's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// How many holders the key admits at once.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// One attempt at a permit: [`Error::Contended`] while all permits are held (or others
    /// wait for one: nobody barges).
    pub async fn try_acquire(&self) -> Result<Lease, Error> {
        let coordinator = self.locker.coordinator();
        Lease::acquire(coordinator, &self.key, coordinator.config().new_token(), Attempts::Once, self.terms())
            .await
    }

    /// Waits for a permit up to the locker's [`max_wait`](crate::LockConfig::max_wait), in
    /// the server's queue (arrival order; each permit that comes free goes to the head), as
    /// [`Locker::acquire`] waits for a lock. A permit count other than the key's is an error
    /// at once, not waited out. Cancel-safe: dropping the future leaves no permit and no
    /// queued waiter behind.
    pub async fn acquire(&self) -> Result<Lease, Error> {
        let coordinator = self.locker.coordinator();
        Lease::acquire(
            coordinator,
            &self.key,
            coordinator.config().new_token(),
            Attempts::UntilMaxWait,
            self.terms(),
        )
        .await
    }

    /// [`acquire`](Self::acquire) under the locker's declared failure policy, as
    /// [`Locker::acquire_with_policy`]: busy permits are never "unlocked".
    pub async fn acquire_with_policy(&self) -> Result<Acquisition, Error> {
        policy::acquire(self.locker.coordinator(), &self.key, self.terms()).await
    }

    /// The key's permits and unexpired holders (each one's fence, time left and label; never
    /// a token); a mutex key shows as one permit, `None` a key without lock state.
    pub async fn status(&self) -> Result<Option<SemaphoreStatus>, Error> {
        self.locker.node().semaphore_status(&self.key).await
    }

    /// The locker the semaphore takes its permits from.
    pub fn locker(&self) -> &Locker {
        &self.locker
    }

    fn terms(&self) -> Terms<'_> {
        let label = self.label.as_deref().or(self.locker.config().label());
        Terms::semaphore(label, self.permits)
    }
}
