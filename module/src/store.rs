//! The only code that opens, stores and deletes lock values, and the only one that files them
//! for reclaim: a lock that comes to exist or ends its lease is filed here, never as a side
//! effect of opening a key.

use crate::error::LockError;
use crate::ffi::key::{Key, Place};
use crate::ffi::{Call, KeyName};
use crate::lock::Lock;
use crate::server::SERVER;

/// A key, open for one callback.
pub struct Store<'a> {
    key: Key<'a>,
}

/// A lock found or stored in a key, with where it lives, so it can be filed while borrowed.
pub struct Entry<'s> {
    lock: &'s mut Lock,
    place: Place<'s>,
}

impl<'a> Store<'a> {
    /// The call's key, for reading.
    pub fn read(call: &'a Call<'a>) -> Self {
        Self { key: Key::read(call) }
    }

    /// The call's key, for reading and writing.
    pub fn write(call: &'a Call<'a>) -> Self {
        Self { key: Key::write(call) }
    }

    /// A key by name, in the selected database of the context the name was created in.
    pub fn named(name: &'a KeyName<'a>) -> Self {
        Self { key: Key::named(name) }
    }

    /// The lock stored here, `None` for an empty key, `WRONGTYPE` for anything else. A lock
    /// that `RENAME` or `MOVE` took from its reclaim entry is filed again here, under its name.
    pub fn lock(&mut self) -> Result<Option<Entry<'_>>, LockError> {
        let place = self.key.place();
        let Some(lock) = self.key.lock()? else { return Ok(None) };
        let mut entry = Entry { lock, place };
        // Rare (after RENAME / MOVE): the database lookup stays off the common path.
        if entry.lock.is_unfiled() {
            entry.file();
        }
        Ok(Some(entry))
    }

    /// Stores a new lock in an empty key opened for writing, files it for reclaim, and returns
    /// it as stored.
    pub fn insert(&mut self, lock: Lock) -> Result<Entry<'_>, LockError> {
        let place = self.key.place();
        let mut entry = Entry { lock: self.key.set_lock(lock)?, place };
        entry.file();
        Ok(entry)
    }

    /// Deletes the key (its entries in the index fall due and are forgotten).
    pub fn delete(&self) -> Result<(), LockError> {
        self.key.delete()
    }

    /// The value of a plain string key (for `CAD`), `None` for an empty key.
    pub fn string(&self) -> Result<Option<&[u8]>, LockError> {
        self.key.string()
    }
}

impl Entry<'_> {
    /// Files the lock again at its current idle time: after a release, or a value replaced.
    pub fn file(&mut self) {
        SERVER.file(self.lock, self.place.db(), self.place.name());
    }

    /// Replaces the stored value with `lock` and files it.
    pub fn replace(&mut self, lock: Lock) {
        *self.lock = lock;
        self.file();
    }
}

impl std::ops::Deref for Entry<'_> {
    type Target = Lock;

    fn deref(&self) -> &Lock {
        self.lock
    }
}

impl std::ops::DerefMut for Entry<'_> {
    fn deref_mut(&mut self) -> &mut Lock {
        self.lock
    }
}
