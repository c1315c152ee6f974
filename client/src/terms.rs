//! What a lease is asked on besides its key and token, checked against the protocol's
//! limits before anything is sent, and the one place the protocol's [`Acquire`] request is
//! built from it.

use fencedlock_protocol::command::{label_len_ok, permits_ok};
use fencedlock_protocol::limits::{MAX_LABEL_LEN, MAX_PERMITS};
use fencedlock_protocol::Acquire;

use crate::error::Error;
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

impl<'a> Terms<'a> {
    /// A plain lock's terms: one permit, with the configured label if any.
    pub(crate) fn mutex(label: Option<&'a [u8]>) -> Terms<'a> {
        Terms { label, permits: 1 }
    }
}

impl<'a> Terms<'a> {
    /// The ACQUIRE of `key` for `token` on these terms, not waiting (a node that waits sets
    /// `BLOCK` at each send).
    pub(crate) fn request(self, key: &'a str, token: &'a Token, ttl_ms: u64) -> Acquire<'a> {
        let plain = Acquire::mutex(key.as_bytes(), token.as_bytes(), ttl_ms);
        Acquire { label: self.label, permits: self.permits, ..plain }
    }
}

/// The label rules of the protocol, checked before anything is sent.
pub(crate) fn check_label(label: &[u8]) -> Result<(), Error> {
    if !label_len_ok(label) {
        return Err(Error::Config(format!(
            "a label must be 1 to {MAX_LABEL_LEN} bytes (it is public: STATUS shows it), got {}",
            label.len()
        )));
    }
    Ok(())
}

/// The permit rules of the protocol, checked before anything is sent.
pub(crate) fn check_permits(permits: u32) -> Result<(), Error> {
    if !permits_ok(u64::from(permits)) {
        return Err(Error::Config(format!("a semaphore has 1 to {MAX_PERMITS} permits, got {permits}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_follow_the_protocol_limits() {
        assert!(matches!(check_label(b""), Err(Error::Config(_))));
        assert!(check_label(b"a").is_ok());
        assert!(check_label(&[b'x'; MAX_LABEL_LEN]).is_ok());
        assert!(matches!(check_label(&[b'x'; MAX_LABEL_LEN + 1]), Err(Error::Config(_))));
    }

    #[test]
    fn permits_follow_the_protocol_limits() {
        assert!(matches!(check_permits(0), Err(Error::Config(_))));
        assert!(check_permits(1).is_ok() && check_permits(MAX_PERMITS).is_ok());
        assert!(matches!(check_permits(MAX_PERMITS + 1), Err(Error::Config(_))));
    }
}
