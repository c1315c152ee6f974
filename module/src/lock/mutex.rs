//! A mutex key's lease (`PERMITS 1`, the default): at most one holder, live or expired, or
//! the time its last lease ended. Pure, like the rest of `lock`.

use super::holder::{Holder, COUNTED};
use super::terms::{Expired, Micros, Released};

/// The holder, or an ended lease: a holder without a token (a token has at least one byte),
/// whose deadline is when the lease ended and whose end is counted. One shape for both, so the
/// holder's token pointer (never null) leaves room for `Kind`'s other variant without a tag
/// (see `a_lock_value_stays_small`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mutex {
    holder: Holder,
}

impl Mutex {
    /// No holder since `at` (a release, or a record without one).
    pub fn ended(at: Micros) -> Mutex {
        Mutex { holder: Holder { bytes: Box::default(), deadline: at, grant: COUNTED } }
    }

    pub fn held(holder: Holder) -> Mutex {
        Mutex { holder }
    }

    /// The holder, live or expired.
    pub fn holder(&self) -> Option<&Holder> {
        Some(&self.holder).filter(|h| !h.bytes.is_empty())
    }

    fn holder_mut(&mut self) -> Option<&mut Holder> {
        Some(&mut self.holder).filter(|h| !h.bytes.is_empty())
    }

    pub fn live(&self, now: Micros) -> Option<&Holder> {
        self.holder().filter(|h| now < h.deadline)
    }

    pub fn live_mut(&mut self, now: Micros) -> Option<&mut Holder> {
        self.holder_mut().filter(|h| now < h.deadline)
    }

    /// An expired lease is left as it is (the fence and the takeover count depend on it).
    pub fn release(&mut self, token: &[u8], now: Micros) -> Released {
        let released = match self.holder() {
            None => Released::NotOwner,
            Some(h) if h.token() != token => Released::NotOwner,
            Some(h) if now >= h.deadline => Released::Expired,
            Some(h) => Released::Ended { span: h.span(now) },
        };
        if let Released::Ended { .. } = released {
            *self = Mutex::ended(now);
        }
        released
    }

    pub fn take_expiry(&mut self, now: Micros) -> Option<Expired> {
        self.holder_mut().and_then(|h| h.take_expiry(now))
    }

    pub fn forget_grant(&mut self) {
        if let Some(h) = self.holder_mut() {
            h.forget_grant();
        }
    }

    /// When the lease ended or will end.
    pub fn idle_from(&self) -> Micros {
        self.holder.deadline
    }

    /// The bytes of its token and label.
    pub fn heap_size(&self) -> usize {
        self.holder.bytes.len()
    }
}
