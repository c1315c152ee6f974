//! The words every lock kind and its callers share: the clock's unit, what the decisions
//! answer, and the checks on a request's bytes (a strict decimal, a token's length). A leaf: it
//! imports nothing of the crate but the error type.

/// Microseconds of the server's monotonic clock.
pub type Micros = u64;

/// What an `ACQUIRE` asks for: who, with which label and permit count, for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask<'a> {
    pub token: &'a [u8],
    /// The request's `LABEL` (checked by the parser): a grant takes it (none without), a
    /// re-entry with one replaces the lease's, a re-entry without keeps it.
    pub label: Option<&'a [u8]>,
    /// The request's `PERMITS` (checked by the parser; 1 is the mutex, and the write lease of
    /// a read-write lock), or `SHARED_PERMITS` for a read lease (`SHARED`).
    pub permits: u32,
    pub ttl: Micros,
    /// Others wait in the key's queue ahead of this request: a fresh grant would pass them, so
    /// only a holder's own re-entry (or downgrade) may go ahead. Readers arriving while a
    /// writer waits are refused by this, which is what keeps them from starving it.
    pub queued_ahead: bool,
}

/// When a decision is taken: the server's monotonic clock, and how long the restart grace still
/// refuses new grants (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moment {
    pub now: Micros,
    pub grace_left: Micros,
}

/// What `ACQUIRE` decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// A new lease with a new fence. `took_over` is set when another token's lease had expired
    /// unreleased: that holder lost its lease, which operators want to count.
    Granted { fence: u64, took_over: bool },
    /// The holder asked again (e.g. its reply was lost): same fence, lease restarted. Also the
    /// write holder's downgrade to a read lease (`SHARED`), which keeps its fence too.
    Reentered { fence: u64 },
    /// Another token holds an unexpired lease.
    Busy,
}

/// What `RELEASE` decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The caller's unexpired lease ended now; `span` is `None` for a lease of unknown grant
    /// time (see `holder::UNTIMED`).
    Ended {
        span: Option<Span>,
    },
    /// The caller held the lease but it had already expired: it may have acted too late.
    Expired,
    NotOwner,
}

/// A lease released in time, for the metrics: how long it was held, of how long it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Grant to release.
    pub held: Micros,
    /// Grant to the deadline it had when released (renewals lengthen it); always above `held`.
    pub given: Micros,
}

/// A lease that ended by expiry, observed once (see `Lock::take_expiries`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    /// Grant to deadline (renewals included); `None` for a lease of unknown grant time.
    pub lifetime: Option<Micros>,
}
