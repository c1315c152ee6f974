//! What a lease is asked on besides its key and token (checked against the protocol's
//! limits by [`Error::check_label`](crate::Error) and its kin before anything is sent), and the one place the protocol's [`Acquire`] request is
//! built from it.

use fencedlock_protocol::Acquire;

use crate::token::Token;

/// The terms of a lease: its public label, if any (shown by `STATUS` while it holds the key),
/// the key's permit count (1: the mutex), and whether it is a read lease. Chosen by the caller
/// (a lock, a semaphore, a read-write lock, an election) and carried unchanged through every
/// round of an acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Terms<'a> {
    /// `LABEL label`.
    pub(crate) label: Option<&'a [u8]>,
    /// `PERMITS n`, sent only above 1.
    pub(crate) permits: u32,
    /// `SHARED`: a read lease of a read-write lock (its write lease is the mutex).
    pub(crate) shared: bool,
}

impl<'a> Terms<'a> {
    /// A plain lock's terms: one permit, with the configured label if any.
    pub(crate) fn mutex(label: Option<&'a [u8]>) -> Terms<'a> {
        Terms { label, permits: 1, shared: false }
    }

    /// A semaphore's terms: `permits` holders at once.
    pub(crate) fn semaphore(label: Option<&'a [u8]>, permits: u32) -> Terms<'a> {
        Terms { label, permits, shared: false }
    }

    /// A read lease's terms.
    pub(crate) fn shared(label: Option<&'a [u8]>) -> Terms<'a> {
        Terms { label, permits: 1, shared: true }
    }
}

impl<'a> Terms<'a> {
    /// The request of `key` for `token` on these terms, its ACQUIRE not waiting (a node that
    /// waits sets `BLOCK` at each send).
    pub(crate) fn request(self, key: &'a str, token: &'a Token, ttl_ms: u64) -> Request<'a> {
        let plain = Acquire::mutex(key.as_bytes(), token.as_bytes(), ttl_ms);
        let acquire = Acquire { label: self.label, permits: self.permits, shared: self.shared, ..plain };
        Request { key, token, acquire }
    }
}

/// One acquisition's request, built once and carried unchanged through every round and
/// waiting step: the key and token it is for (each release and report names them) and the
/// ACQUIRE on the lease's terms.
#[derive(Clone, Copy)]
pub(crate) struct Request<'a> {
    pub(crate) key: &'a str,
    pub(crate) token: &'a Token,
    pub(crate) acquire: Acquire<'a>,
}
