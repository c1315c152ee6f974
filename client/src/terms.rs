//! What a lease is asked on besides its key and token, and the one place the protocol's
//! [`Acquire`] request is built from it.

use fencedlock_protocol::Acquire;

use crate::token::Token;

/// The terms of a lease: its public label, if any (shown by `STATUS` while it holds the key),
/// and the key's permit count (1: the mutex). Chosen by the caller (a lock, a semaphore, an
/// election) and carried unchanged through every round of an acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Terms<'a> {
    /// `LABEL label`.
    pub(crate) label: Option<&'a [u8]>,
    /// `PERMITS n`, sent only above 1.
    pub(crate) permits: u32,
}

impl Terms<'static> {
    /// A plain lease: no label, one permit.
    pub(crate) const MUTEX: Terms<'static> = Terms { label: None, permits: 1 };
}

impl<'a> Terms<'a> {
    /// The ACQUIRE of `key` for `token` on these terms, not waiting (a node that waits sets
    /// `BLOCK` at each send).
    pub(crate) fn request(self, key: &'a str, token: &'a Token, ttl_ms: u64) -> Acquire<'a> {
        let plain = Acquire::mutex(key.as_bytes(), token.as_bytes(), ttl_ms);
        Acquire { label: self.label, permits: self.permits, ..plain }
    }
}
