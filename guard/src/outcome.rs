//! What a claim or a guarded write that matched no row means, decided once for both drivers.

use crate::error::{Error, Result};
use crate::fence;
use crate::metrics::{record_stale, Step};
use crate::table::Table;

/// The outcome of a guarded write that was not refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a write may not have happened: check for PreconditionFailed"]
pub enum Written<T> {
    /// The row was updated, and now carries the caller's fence; `T` is what it returned.
    Applied(T),
    /// The fence was not stale, but the row was not in the state the update requires (the
    /// work is done, or the state moved on): nothing was written. Re-read and decide.
    PreconditionFailed,
}

impl<T> Written<T> {
    /// Whether the row was updated.
    pub fn is_applied(&self) -> bool {
        matches!(self, Written::Applied(_))
    }
}

/// The row's fence as read right after a statement matched no row: `None` when no row has
/// the id, `Some(None)` when the row's fence is NULL (a nullable column added by hand).
pub(crate) type Stored = Option<Option<i64>>;

/// Why a claim matched no row: [`Error::Stale`] (counted and logged) for a newer fence,
/// [`Error::NullFence`] for a NULL one, else [`Error::NotFound`] (the row was absent when the
/// claim ran).
pub(crate) fn claim_refused(table: &Table, fence: u64, stored: Stored) -> Error {
    match stored {
        Some(Some(stored)) => stale(table, Step::Claim, fence, stored).unwrap_or_else(|| not_found(table)),
        Some(None) => null_fence(table),
        None => not_found(table),
    }
}

/// Why a guarded write matched no row: [`Error::Stale`] for a newer fence,
/// [`Error::NullFence`] for a NULL one; with a `precondition` and a current fence, `Ok` (the
/// precondition did not hold); else [`Error::NotFound`].
pub(crate) fn write_refused(table: &Table, fence: u64, stored: Stored, precondition: bool) -> Result<()> {
    match stored {
        Some(Some(stored)) => match stale(table, Step::Write, fence, stored) {
            Some(stale) => Err(stale),
            None if precondition => Ok(()),
            // Nothing else could stop the statement: the row was absent when it ran (and
            // inserted since, which READ COMMITTED's next statement sees).
            None => Err(not_found(table)),
        },
        Some(None) => Err(null_fence(table)),
        None => Err(not_found(table)),
    }
}

/// [`Error::Stale`], counted and logged, if the stored fence is above `fence`.
fn stale(table: &Table, step: Step, fence: u64, stored: i64) -> Option<Error> {
    let last_fence = fence::from_sql(stored)?;
    if last_fence <= fence {
        return None;
    }
    let resource = table.resource();
    record_stale(&resource, step, fence, Some(last_fence));
    Some(Error::Stale { resource, fence, last_fence: Some(last_fence) })
}

fn not_found(table: &Table) -> Error {
    Error::NotFound { resource: table.resource() }
}

/// A NULL compares with nothing, so no statement matches the row: refused by name, never
/// read as a missing row or as fence 0.
fn null_fence(table: &Table) -> Error {
    Error::NullFence { table: table.qualified_name(), column: table.fence_column_name().to_owned() }
}
