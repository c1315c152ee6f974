//! One lease holder: its token (and label), deadline and grant time. A mutex key has at most
//! one; a semaphore key one per permit (see `semaphore`).

use super::record::Holding;
use super::terms::{Expired, Micros, Span};

/// The top bit of [`Holder::grant`]: the holder's bytes carry a label. It lives there, not in a
/// field of its own, so a `Holder` does not grow (see `a_lock_value_stays_small`); the grant time
/// below it is a monotonic microsecond count, far from 2^63.
pub const LABELLED: u64 = 1 << 63;
/// `granted_at` of a lease whose grant this server did not see (loaded from RDB or AOF, or
/// applied from the primary): a record carries the remaining time only, so any hold time made up
/// for it would be wrong. Its end is counted, but stays out of the distributions.
pub const UNTIMED: Micros = LABELLED - 1;
/// `granted_at` of an expired lease whose end was counted already (see [`Lock::take_expiry`]):
/// an expiry is observed by whichever command looks first, and counted once.
pub const COUNTED: Micros = LABELLED - 2;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The token alone, or, when `grant` has [`LABELLED`], `[label length - 1][label][token]`:
    /// one allocation for both, so an unlabelled lease costs exactly what it did before labels
    /// existed, and a labelled one a single allocation.
    pub bytes: Box<[u8]>,
    /// On the monotonic clock of *this* server: never compared with another machine's clock.
    pub deadline: Micros,
    /// [`LABELLED`], or'ed with the grant time `granted_at`: when this server granted the lease
    /// (same clock), for the hold-time metrics; renewals and re-entries continue the same lease
    /// and keep it. [`UNTIMED`] or [`COUNTED`] otherwise. Costs no memory per key in practice:
    /// a `Lock` grows from 40 to 48 bytes, and the allocator hands out 48 for either (see
    /// `a_lock_value_stays_small`).
    pub grant: u64,
}

impl Holder {
    /// A holder of `token`, labelled with `label` (1 to `MAX_LABEL_LEN` bytes, checked by the
    /// caller; a label of another length is dropped rather than stored wrongly).
    pub fn new(token: &[u8], label: Option<&[u8]>, deadline: Micros, granted_at: Micros) -> Holder {
        let stored = label.and_then(|l| u8::try_from(l.len().wrapping_sub(1)).ok().map(|len| (len, l)));
        let (bytes, flag) = match stored {
            None => (token.into(), 0),
            Some((len, label)) => {
                let bytes: Box<[u8]> = [&[len][..], label, token].concat().into();
                (bytes, LABELLED)
            }
        };
        Holder { bytes, deadline, grant: flag | granted_at }
    }

    /// The label's length, when it has one (the first byte of `bytes`, plus one).
    fn label_len(&self) -> Option<usize> {
        (self.grant & LABELLED != 0).then(|| self.bytes.first().map_or(0, |&len| usize::from(len) + 1))
    }

    pub fn token(&self) -> &[u8] {
        match self.label_len() {
            None => &self.bytes,
            Some(len) => self.bytes.get(1 + len..).unwrap_or_default(),
        }
    }

    pub fn label(&self) -> Option<&[u8]> {
        self.label_len().map(|len| self.bytes.get(1..1 + len).unwrap_or_default())
    }

    /// The grant time, or [`UNTIMED`] / [`COUNTED`].
    pub fn granted_at_raw(&self) -> Micros {
        self.grant & !LABELLED
    }

    pub fn set_granted_at(&mut self, at: Micros) {
        self.grant = (self.grant & LABELLED) | at;
    }

    /// The same lease with another label (a re-entry with `LABEL`).
    pub fn relabel(&mut self, label: &[u8]) {
        if self.label() != Some(label) {
            *self = Holder::new(self.token(), Some(label), self.deadline, self.granted_at_raw());
        }
    }

    /// The grant time, when known and the lease's end not counted yet.
    pub fn granted_at(&self) -> Option<Micros> {
        let at = self.granted_at_raw();
        (at < COUNTED).then_some(at)
    }

    /// Grant to the current deadline: the whole lease it was given, renewals included.
    pub fn given(&self) -> Option<Micros> {
        self.granted_at().map(|at| self.deadline.saturating_sub(at))
    }

    /// A holder from a record: granted elsewhere or before a restart, so its grant time is not
    /// known here ([`UNTIMED`]); its deadline runs from `now`.
    pub fn loaded(holding: &Holding<'_>, now: Micros) -> Holder {
        Holder::new(holding.token, holding.label, now.saturating_add(holding.remaining), UNTIMED)
    }

    /// For a release of this unexpired lease at `now`: how long it was held, of how long given.
    pub fn span(&self, now: Micros) -> Option<Span> {
        self.granted_at().zip(self.given()).map(|(at, given)| Span { held: now.saturating_sub(at), given })
    }

    /// The lease's end, if it expired and was not counted yet; marks it counted.
    pub fn take_expiry(&mut self, now: Micros) -> Option<Expired> {
        if now < self.deadline || self.granted_at_raw() == COUNTED {
            return None;
        }
        let lifetime = self.given();
        self.set_granted_at(COUNTED);
        Some(Expired { lifetime })
    }

    /// Forgets the grant time (a `COPY`: one grant must not enter the distributions twice).
    pub fn forget_grant(&mut self) {
        if self.granted_at_raw() < COUNTED {
            self.set_granted_at(UNTIMED);
        }
    }
}
