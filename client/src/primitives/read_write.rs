//! Fenced read-write locks: many readers or one writer on a key (`FENCEDLOCK.ACQUIRE …
//! SHARED` for a read lease; the plain `ACQUIRE`, the mutex, for the write lease).
//!
//! Both leases are ordinary [`Lease`]s: renew, release, keep-alive and [`Lease::fence`] work
//! as for a lock. Every grant takes the next fence of the key's one sequence, so a writer's
//! fence is above every reader's and writer's before it. Waiting is the server's queue, in
//! arrival order: readers that come after a waiting writer wait behind it, so a stream of
//! readers cannot starve it, and the readers queued behind a writer enter together when it
//! leaves.
//!
//! # Fencing reads and writes
//!
//! A writer fences the resource as with a lock: the resource refuses a write whose fence is
//! below the highest it has seen. A reader's fence proves that no writer was granted between
//! its grant and the reads that carry it only if the resource checks it too: a read with a
//! fence below the resource's highest write fence saw a writer's work that came after it, or
//! raced a writer whose lease outlived the reader's.
//!
//! # Downgrade, and no upgrade
//!
//! [`ReadWriteLock::downgrade`] turns a write lease into a read lease in one step, keeping its
//! fence: no other writer can come between. There is no upgrade: two readers upgrading at
//! once would each wait for the other to leave, so the server refuses it
//! ([`ReplyError::UpgradeRefused`](crate::ReplyError::UpgradeRefused), an
//! [`Error::Server`]). Release the read lease and acquire the write lease (a new, higher fence).
//!
//! # Redlock
//!
//! Read-write locks run on a [`Locker`] (one server, or a Redis Cluster routed by key), as
//! semaphores do: fenced Redlock lifts a lease's fence on every master to the majority's
//! highest, which a key held by several readers cannot take.

use fencedlock_protocol::SemaphoreStatus;

use crate::acquisition::lease::{Attempts, Lease};
use crate::acquisition::terms::Terms;
use crate::error::Error;
use crate::primitives::locker::Locker;

/// A fenced read-write lock on one key of a [`Locker`]'s server.
///
/// Cheap to clone; clones share the locker's connections. The lease options (ttl, renew
/// interval, waiting) are the locker's [`LockConfig`](crate::LockConfig).
///
/// ```no_run
/// # async fn demo() -> Result<(), fencedlock::Error> {
/// use std::time::Duration;
/// use fencedlock::{LockConfig, Locker, ReadWriteLock};
///
/// let config = LockConfig::builder().ttl(Duration::from_secs(10)).max_wait(Duration::from_secs(30)).build()?;
/// let prices = ReadWriteLock::new(Locker::open("redis://127.0.0.1:6379", config)?, "prices");
/// let mut writing = prices.write().await?;
/// // ... write the new prices with writing.fence() ...
/// prices.downgrade(&mut writing).await?;
/// // ... now read them back as a reader, with the same fence; other readers may join ...
/// writing.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ReadWriteLock {
    locker: Locker,
    key: String,
    label: Option<Vec<u8>>,
}

impl ReadWriteLock {
    /// The read-write lock on `key` of `locker`'s server. Its write lease is the same lease as
    /// [`Locker::acquire`]'s on that key.
    pub fn new(locker: Locker, key: impl Into<String>) -> ReadWriteLock {
        ReadWriteLock { locker, key: key.into(), label: None }
    }

    /// The same lock, every lease it grants carrying the public `label` (instead of the
    /// locker's [`label`](crate::LockConfigBuilder::label), if it has one) (1 to
    /// [`MAX_LABEL_LEN`](crate::MAX_LABEL_LEN) bytes, [`Error::Config`] otherwise). Never put a
    /// secret in it: `STATUS` shows it.
    pub fn with_label(mut self, label: impl Into<Vec<u8>>) -> Result<ReadWriteLock, Error> {
        self.label = Some(Error::checked_label(label)?);
        Ok(self)
    }

    /// The lock's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// One attempt at a read lease: [`Error::Contended`] while a writer holds the key or
    /// others wait for it.
    pub async fn try_read(&self) -> Result<Lease, Error> {
        self.take(Attempts::Once, true).await
    }

    /// Waits for a read lease up to the locker's [`max_wait`](crate::LockConfig::max_wait),
    /// in the server's queue. Cancel-safe, as [`Locker::acquire`].
    pub async fn read(&self) -> Result<Lease, Error> {
        self.take(Attempts::UntilMaxWait, true).await
    }

    /// One attempt at the write lease: [`Error::Contended`] while anyone holds the key (or
    /// others wait for it); [`Error::Server`] with
    /// [`ReplyError::UpgradeRefused`](crate::ReplyError::UpgradeRefused) when this lock's
    /// own token reads (never, with the tokens this crate makes).
    pub async fn try_write(&self) -> Result<Lease, Error> {
        self.take(Attempts::Once, false).await
    }

    /// Waits for the write lease up to the locker's [`max_wait`](crate::LockConfig::max_wait),
    /// in the server's queue: the readers already in finish, those who come later wait.
    pub async fn write(&self) -> Result<Lease, Error> {
        self.take(Attempts::UntilMaxWait, false).await
    }

    /// Turns `lease`, this lock's write lease, into a read lease with the same fence and a
    /// fresh ttl; the readers waiting at the head of the queue come in with it. One request,
    /// not waited for: nothing can hold the key between the two. A lease that had ended is
    /// [`Error::LeaseLost`] (another writer may have come between); a lease of another key,
    /// [`Error::Config`].
    pub async fn downgrade(&self, lease: &mut Lease) -> Result<(), Error> {
        if lease.key() != self.key {
            return Err(Error::Config(format!(
                "downgrade: the lease is on {:?}, this lock's key is {:?}",
                lease.key(),
                self.key
            )));
        }
        lease.reask(Terms::shared(self.label())).await
    }

    /// The key's holders: readers show as a semaphore of
    /// [`SHARED_PERMITS`](crate::SHARED_PERMITS) permits ([`SemaphoreStatus::is_shared`]),
    /// each with its fence, time left and label; a writer as one permit. `None`: no lock state.
    pub async fn status(&self) -> Result<Option<SemaphoreStatus>, Error> {
        self.locker.node().semaphore_status(&self.key).await
    }

    /// The locker the lock takes its leases from.
    pub fn locker(&self) -> &Locker {
        &self.locker
    }

    async fn take(&self, attempts: Attempts, shared: bool) -> Result<Lease, Error> {
        let coordinator = self.locker.coordinator();
        let terms = if shared { Terms::shared(self.label()) } else { Terms::mutex(self.label()) };
        Lease::acquire(coordinator, &self.key, coordinator.config().new_token(), attempts, terms).await
    }

    fn label(&self) -> Option<&[u8]> {
        self.label.as_deref().or(self.locker.config().label())
    }
}
