//! The one gate a lock's state passes before it becomes a key's value, wherever it comes from:
//! an RDB or `RESTORE` payload (`ffi/datatype.rs`), `FENCEDLOCK.APPLY` / `APPLYSEM` from the
//! primary or the AOF, a slot's floor. A value is admitted only if it keeps every invariant the
//! commands keep, so nothing a command decides later can start from a state no command makes.
//!
//! The invariants, each one a variant of [`Broken`]:
//! - a key's fence is 1 to `MAX_FENCE`: a stored key was granted at least once (fences start
//!   at 1), and no grant goes above the largest fence;
//! - a holder's token is 1 to `MAX_TOKEN_LEN` bytes, its label (if any) 1 to `MAX_LABEL_LEN`;
//! - a holder's lease is unexpired and no longer than the longest ttl: a record carries only
//!   live leases (an expired one travels as none), each with at most `MAX_MAX_TTL_MS` left;
//! - a semaphore has 2 to `MAX_PERMITS` permits (1 is a mutex), or `SHARED_PERMITS` for read
//!   leases, and no more holders than it admits;
//! - a semaphore's holders are in grant order, so their fences strictly increase, and none is
//!   above the key's fence (the key's fence is its latest grant's);
//! - no token holds two permits of one key;
//! - a high-water mark (aux data, `APPLY`) is at most `MAX_FENCE`.
//!
//! A mutex holder's fence is the key's own, so it needs no rule of its own. The layout's rules
//! (tags per encoding version, truncation) are the decoder's (`layout::load`); a value's
//! trailing bytes are the server's to refuse (a module value ends with an EOF marker).
//!
//! Only loads and replicated records pass here, never a client's command on the primary.

use fencedlock_protocol::command::{capacity, label_len_ok, permits_ok, token_len_ok, SHARED_PERMITS};
use fencedlock_protocol::limits::{MAX_FENCE, MAX_LABEL_LEN, MAX_MAX_TTL_MS, MAX_PERMITS, MAX_TOKEN_LEN};
use thiserror::Error;

use super::record::{Holding, PermitHolding, Record, SemaphoreRecord, Snapshot};
use super::terms::Micros;
use crate::error::LockError;

/// The longest lease time a record may carry: a lease is granted or renewed for at most the
/// `fencedlock.max-ttl-ms` config, whose largest value is `MAX_MAX_TTL_MS`, and only shortens
/// afterwards. (The config may be lower now than when the lease was granted: not a bound.)
pub const LONGEST_LEASE: Micros = MAX_MAX_TTL_MS * 1000;

/// The invariant a value breaks. The text names it for the server's log; it never carries a
/// token's or a label's bytes (fences and counts are public: `STATUS` shows them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Broken {
    #[error("fence 0: a stored key was granted at least once, and fences start at 1")]
    NeverGranted,
    #[error("fence {0} is above the largest fence ({MAX_FENCE})")]
    FenceAboveMax(u64),
    #[error("a token of {0} bytes (tokens have 1 to {MAX_TOKEN_LEN})")]
    TokenLength(usize),
    #[error("a label of {0} bytes (labels have 1 to {MAX_LABEL_LEN})")]
    LabelLength(usize),
    #[error("a lease with no time left: only unexpired leases travel")]
    LeaseEnded,
    #[error("a lease with {0} µs left, longer than the longest ttl ({LONGEST_LEASE} µs)")]
    LeaseTooLong(Micros),
    #[error("{0} permits (a semaphore has 2 to {MAX_PERMITS}, read leases {SHARED_PERMITS})")]
    PermitsOutOfRange(u64),
    #[error("{holders} holders for {permits} permits")]
    TooManyHolders { holders: usize, permits: u32 },
    #[error("holder fences out of grant order ({holder} after {previous})")]
    HoldersOutOfOrder { previous: u64, holder: u64 },
    #[error("a holder's fence {holder} is above the key's fence {key}")]
    HolderAboveKey { holder: u64, key: u64 },
    #[error("one token holds two permits")]
    TokenTwice,
    #[error("high-water mark {0} is above the largest fence ({MAX_FENCE})")]
    MarkAboveMax(u64),
}

/// A record that breaks an invariant is refused as a bad record (its details go to the log of
/// whoever loads it, not to a reply).
impl From<Broken> for LockError {
    fn from(_: Broken) -> LockError {
        LockError::BadRecord
    }
}

/// The gate: `Ok` when `snapshot` keeps every invariant (see the module's doc).
pub fn snapshot(snapshot: &Snapshot<'_>) -> Result<(), Broken> {
    match snapshot {
        Snapshot::Mutex(record) => mutex(record),
        Snapshot::Semaphore(record) => semaphore(record),
    }
}

/// A high-water mark taken in from aux data or an `APPLY`.
pub fn high_water(mark: u64) -> Result<(), Broken> {
    if mark > MAX_FENCE {
        return Err(Broken::MarkAboveMax(mark));
    }
    Ok(())
}

fn mutex(record: &Record<'_>) -> Result<(), Broken> {
    key_fence(record.fence)?;
    record.holder.as_ref().map_or(Ok(()), holding)
}

fn semaphore(record: &SemaphoreRecord<'_>) -> Result<(), Broken> {
    let SemaphoreRecord { fence, permits, holders } = record;
    key_fence(*fence)?;
    if *permits != SHARED_PERMITS && (*permits < 2 || !permits_ok(u64::from(*permits))) {
        return Err(Broken::PermitsOutOfRange(u64::from(*permits)));
    }
    if holders.len() > capacity(*permits) as usize {
        return Err(Broken::TooManyHolders { holders: holders.len(), permits: *permits });
    }
    let mut previous = 0;
    for PermitHolding { fence: holder, holding: lease } in holders {
        if *holder <= previous {
            return Err(Broken::HoldersOutOfOrder { previous, holder: *holder });
        }
        if holder > fence {
            return Err(Broken::HolderAboveKey { holder: *holder, key: *fence });
        }
        holding(lease)?;
        previous = *holder;
    }
    distinct_tokens(holders)
}

fn key_fence(fence: u64) -> Result<(), Broken> {
    match fence {
        0 => Err(Broken::NeverGranted),
        f if f > MAX_FENCE => Err(Broken::FenceAboveMax(f)),
        _ => Ok(()),
    }
}

fn holding(lease: &Holding<'_>) -> Result<(), Broken> {
    if !token_len_ok(lease.token) {
        return Err(Broken::TokenLength(lease.token.len()));
    }
    if let Some(label) = lease.label.filter(|l| !label_len_ok(l)) {
        return Err(Broken::LabelLength(label.len()));
    }
    match lease.remaining {
        0 => Err(Broken::LeaseEnded),
        r if r > LONGEST_LEASE => Err(Broken::LeaseTooLong(r)),
        _ => Ok(()),
    }
}

/// Sorted, so a full semaphore (`MAX_PERMITS` holders) costs n log n comparisons, not n².
fn distinct_tokens(holders: &[PermitHolding<'_>]) -> Result<(), Broken> {
    let mut tokens: Vec<&[u8]> = holders.iter().map(|p| p.holding.token).collect();
    tokens.sort_unstable();
    if tokens.windows(2).any(|pair| pair[0] == pair[1]) {
        return Err(Broken::TokenTwice);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Holding<'static> = Holding { token: b"tok", remaining: 5_000, label: None };

    fn mutex_of(fence: u64, holder: Option<Holding<'_>>) -> Snapshot<'_> {
        Snapshot::Mutex(Record { fence, holder })
    }

    fn permit(fence: u64, token: &'static [u8]) -> PermitHolding<'static> {
        PermitHolding { fence, holding: Holding { token, ..LEASE } }
    }

    fn semaphore_of(fence: u64, permits: u32, holders: Vec<PermitHolding<'static>>) -> Snapshot<'static> {
        Snapshot::Semaphore(SemaphoreRecord { fence, permits, holders })
    }

    #[test]
    fn values_the_commands_make_pass() {
        let longest_label = [b'l'; MAX_LABEL_LEN];
        let longest_token = [b't'; MAX_TOKEN_LEN];
        let edge = Holding { token: &longest_token, remaining: LONGEST_LEASE, label: Some(&longest_label) };
        for ok in [
            mutex_of(1, None),
            mutex_of(MAX_FENCE, Some(LEASE)),
            mutex_of(7, Some(Holding { remaining: 1, ..LEASE })),
            semaphore_of(1, 2, vec![]),
            semaphore_of(9, 3, vec![permit(4, b"a"), permit(9, b"b")]),
            semaphore_of(9, MAX_PERMITS, vec![permit(1, b"a"), permit(2, b"b"), permit(3, b"c")]),
        ] {
            assert_eq!(snapshot(&ok), Ok(()), "{ok:?}");
        }
        assert_eq!(snapshot(&mutex_of(3, Some(edge))), Ok(()));
        assert_eq!(high_water(MAX_FENCE), Ok(()));
        assert_eq!(high_water(0), Ok(()));
    }

    /// Each invariant broken alone, and the one it names.
    #[test]
    fn each_broken_invariant_is_refused_by_name() {
        let long_token = [b't'; MAX_TOKEN_LEN + 1];
        let long_label = [b'l'; MAX_LABEL_LEN + 1];
        let cases = [
            (mutex_of(0, None), Broken::NeverGranted),
            (mutex_of(0, Some(LEASE)), Broken::NeverGranted),
            (semaphore_of(0, 2, vec![]), Broken::NeverGranted),
            (mutex_of(MAX_FENCE + 1, None), Broken::FenceAboveMax(MAX_FENCE + 1)),
            (semaphore_of(u64::MAX, 2, vec![]), Broken::FenceAboveMax(u64::MAX)),
            (mutex_of(1, Some(Holding { token: b"", ..LEASE })), Broken::TokenLength(0)),
            (
                mutex_of(1, Some(Holding { token: &long_token, ..LEASE })),
                Broken::TokenLength(MAX_TOKEN_LEN + 1),
            ),
            (mutex_of(1, Some(Holding { label: Some(b""), ..LEASE })), Broken::LabelLength(0)),
            (
                mutex_of(1, Some(Holding { label: Some(&long_label), ..LEASE })),
                Broken::LabelLength(MAX_LABEL_LEN + 1),
            ),
            (mutex_of(1, Some(Holding { remaining: 0, ..LEASE })), Broken::LeaseEnded),
            (
                mutex_of(1, Some(Holding { remaining: LONGEST_LEASE + 1, ..LEASE })),
                Broken::LeaseTooLong(LONGEST_LEASE + 1),
            ),
            (semaphore_of(9, 1, vec![]), Broken::PermitsOutOfRange(1)),
            (
                semaphore_of(2000, 0, (0..=u64::from(MAX_PERMITS)).map(|f| permit(f + 1, b"a")).collect()),
                Broken::TooManyHolders { holders: MAX_PERMITS as usize + 1, permits: 0 },
            ),
            (semaphore_of(9, MAX_PERMITS + 1, vec![]), Broken::PermitsOutOfRange(u64::from(MAX_PERMITS) + 1)),
            (
                semaphore_of(9, 2, vec![permit(1, b"a"), permit(2, b"b"), permit(3, b"c")]),
                Broken::TooManyHolders { holders: 3, permits: 2 },
            ),
            (
                semaphore_of(9, 3, vec![permit(5, b"a"), permit(4, b"b")]),
                Broken::HoldersOutOfOrder { previous: 5, holder: 4 },
            ),
            (
                semaphore_of(9, 3, vec![permit(4, b"a"), permit(4, b"b")]),
                Broken::HoldersOutOfOrder { previous: 4, holder: 4 },
            ),
            (semaphore_of(9, 3, vec![permit(0, b"a")]), Broken::HoldersOutOfOrder { previous: 0, holder: 0 }),
            (semaphore_of(9, 3, vec![permit(10, b"a")]), Broken::HolderAboveKey { holder: 10, key: 9 }),
            (semaphore_of(9, 3, vec![permit(4, b"a"), permit(5, b"a")]), Broken::TokenTwice),
            (semaphore_of(9, 3, vec![permit(4, b"a"), permit(5, b"b"), permit(6, b"a")]), Broken::TokenTwice),
            (
                semaphore_of(
                    9,
                    3,
                    vec![PermitHolding { fence: 4, holding: Holding { remaining: 0, ..LEASE } }],
                ),
                Broken::LeaseEnded,
            ),
            (semaphore_of(9, 3, vec![permit(4, b"")]), Broken::TokenLength(0)),
        ];
        for (bad, broken) in cases {
            assert_eq!(snapshot(&bad), Err(broken), "{bad:?}");
        }
        assert_eq!(high_water(MAX_FENCE + 1), Err(Broken::MarkAboveMax(MAX_FENCE + 1)));
    }

    #[test]
    fn the_log_line_names_the_invariant_and_never_a_token() {
        let secret = b"secret-token-bytes";
        let cases = [
            mutex_of(1, Some(Holding { token: secret, remaining: 0, label: None })),
            semaphore_of(9, 3, vec![permit(4, secret), permit(5, secret)]),
        ];
        for bad in cases {
            let text = snapshot(&bad).expect_err("refused").to_string();
            assert!(!text.contains("secret"), "{text}");
            assert!(!text.is_empty());
        }
        assert_eq!(
            Broken::HolderAboveKey { holder: 10, key: 9 }.to_string(),
            "a holder's fence 10 is above the key's fence 9"
        );
        assert_eq!(LockError::from(Broken::TokenTwice), LockError::BadRecord);
    }
}
