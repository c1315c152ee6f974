//! A lock's state as it travels, in one place: the records (`Record` for a mutex key,
//! `SemaphoreRecord` for a semaphore key, either as a `Snapshot`). How they are written and read
//! (the RDB layout, the `APPLYSEM` holders' blob, the `FENCEDLOCK.APPLY` / `APPLYSEM` arguments)
//! is `layout`'s; whether a value read is one the commands could have made is `validate`'s to
//! say, at `Lock::from_snapshot`.
//!
//! A record carries the *remaining* lease time, not a deadline: the receiver sets its deadline
//! from its own clock when it applies the record, so lag and restarts can only lengthen a lease.

use super::terms::Micros;

/// A lock's state as it travels (see [`Record`] and [`SemaphoreRecord`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Snapshot<'a> {
    Mutex(Record<'a>),
    Semaphore(SemaphoreRecord<'a>),
}

/// A lock's state as it travels: replication, AOF, RDB and `DUMP`.
///
/// It carries the *remaining* lease time, not a deadline: the receiver sets its deadline from its
/// own clock when it applies the record, so lag and restarts can only lengthen a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    pub fence: u64,
    pub holder: Option<Holding<'a>>,
}

/// A live lease as it travels in a [`Record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holding<'a> {
    pub token: &'a [u8],
    pub remaining: Micros,
    pub label: Option<&'a [u8]>,
}

/// A semaphore key's state as it travels: `FENCEDLOCK.APPLYSEM`, the AOF and the RDB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemaphoreRecord<'a> {
    pub fence: u64,
    pub permits: u32,
    pub holders: Vec<PermitHolding<'a>>,
}

/// One unexpired holder as it travels: its fence and its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PermitHolding<'a> {
    pub fence: u64,
    pub holding: Holding<'a>,
}
