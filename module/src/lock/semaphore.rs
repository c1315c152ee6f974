//! A semaphore key's holders (`ACQUIRE … PERMITS n`, n > 1): up to `permits` tokens hold
//! leases at once, each with its own fence. Read leases (`ACQUIRE … SHARED`) are held the same
//! way, with `SHARED_PERMITS` and up to `MAX_PERMITS` readers. Pure, like `lock`, which keeps
//! the key's fence and decides grants; this keeps the holders.
//!
//! Expired holders stay in the list until the next grant rewrites it, exactly like a mutex's
//! expired holder: a late `RELEASE` is then told "expired" rather than "not yours", a grant
//! knows it took a permit over, and each expiry is counted once.

use fencedlock_protocol::command::capacity;
use fencedlock_protocol::{PermitStatus, SemaphoreStatus};

use super::holder::Holder;
use super::record::{Holding, PermitHolding, SemaphoreRecord};
use super::terms::{Expired, Micros, Released};

/// The holders of a semaphore key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Semaphore {
    /// The key's count, 2 to `MAX_PERMITS` (1 is a mutex key), or `SHARED_PERMITS` for read
    /// leases. Fixed while anyone holds it.
    pub permits: u32,
    /// In grant order, so their fences strictly increase along the list.
    pub holders: Vec<Permit>,
    /// When its last release was (or its creation, or its load): with the holders' deadlines,
    /// when the key became idle.
    released_at: Micros,
}

/// One holder of a semaphore key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permit {
    /// The fence of its grant; re-entries keep it.
    pub fence: u64,
    pub holder: Holder,
}

impl Semaphore {
    /// A key of `permits` whose only holder is `first`, granted at `now`.
    pub fn new(permits: u32, first: Permit, now: Micros) -> Semaphore {
        Semaphore { permits, holders: vec![first], released_at: now }
    }

    pub fn live(&self, now: Micros) -> impl Iterator<Item = &Permit> {
        self.holders.iter().filter(move |p| now < p.holder.deadline)
    }

    pub fn live_count(&self, now: Micros) -> usize {
        self.live(now).count()
    }

    /// The caller's unexpired permit.
    pub fn live_mut(&mut self, token: &[u8], now: Micros) -> Option<&mut Permit> {
        self.holders.iter_mut().find(|p| now < p.holder.deadline && p.holder.token() == token)
    }

    /// Whether another holder could be granted now.
    pub fn has_room(&self, now: Micros) -> bool {
        self.live_count(now) < capacity(self.permits) as usize
    }

    /// When the earliest unexpired lease ends: a permit frees up then at the latest.
    pub fn next_free(&self, now: Micros) -> Option<Micros> {
        self.live(now).map(|p| p.holder.deadline).min()
    }

    /// Whether a permit of another token expired unreleased: a grant now takes it over.
    pub fn has_expired_other(&self, token: &[u8], now: Micros) -> bool {
        self.holders.iter().any(|p| now >= p.holder.deadline && p.holder.token() != token)
    }

    /// Adds a grant (its fence above every holder's), dropping the expired holders it replaces.
    pub fn grant(&mut self, permits: u32, permit: Permit, now: Micros) {
        self.holders.retain(|p| now < p.holder.deadline);
        self.permits = permits;
        self.holders.push(permit);
    }

    /// Ends the caller's unexpired lease (see `Lock::release`).
    pub fn release(&mut self, token: &[u8], now: Micros) -> Released {
        let Some((at, permit)) = self.holders.iter().enumerate().find(|(_, p)| p.holder.token() == token)
        else {
            return Released::NotOwner;
        };
        if now >= permit.holder.deadline {
            return Released::Expired;
        }
        let span = permit.holder.span(now);
        self.holders.remove(at);
        self.released_at = now;
        Released::Ended { span }
    }

    /// Reports each expired holder's end once (see `Lock::take_expiries`).
    pub fn take_expiries(&mut self, now: Micros, report: &mut impl FnMut(Expired)) {
        for permit in &mut self.holders {
            if let Some(expired) = permit.holder.take_expiry(now) {
                report(expired);
            }
        }
    }

    /// When the key became idle (or will): its last release, or its last holder's deadline.
    pub fn idle_from(&self) -> Micros {
        self.holders.iter().map(|p| p.holder.deadline).fold(self.released_at, Micros::max)
    }

    pub fn status(&self, fence: u64, now: Micros) -> SemaphoreStatus {
        let holders = self
            .live(now)
            .map(|p| PermitStatus {
                fence: p.fence,
                remaining: std::time::Duration::from_millis((p.holder.deadline - now).div_ceil(1000)),
                label: p.holder.label().map(<[u8]>::to_vec),
            })
            .collect();
        SemaphoreStatus { fence, permits: self.permits, holders }
    }

    /// The unexpired holders as they travel (an expired one travels as none, as for a mutex).
    pub fn record(&self, fence: u64, now: Micros) -> SemaphoreRecord<'_> {
        let holders = self
            .live(now)
            .map(|p| PermitHolding {
                fence: p.fence,
                holding: Holding {
                    token: p.holder.token(),
                    remaining: p.holder.deadline - now,
                    label: p.holder.label(),
                },
            })
            .collect();
        SemaphoreRecord { fence, permits: self.permits, holders }
    }

    /// The holders of a record received at `now`, which `validate` admitted (`Lock::from_snapshot`).
    pub fn loaded(record: &SemaphoreRecord<'_>, now: Micros) -> Semaphore {
        let holders = record
            .holders
            .iter()
            .map(|p| Permit { fence: p.fence, holder: Holder::loaded(&p.holding, now) })
            .collect();
        Semaphore { permits: record.permits, holders, released_at: now }
    }

    /// Bytes beyond the key's `Lock`: this struct, the list and each holder's token and label.
    pub fn heap_size(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.holders.capacity() * std::mem::size_of::<Permit>()
            + self.holders.iter().map(|p| p.holder.bytes.len()).sum::<usize>()
    }
}
