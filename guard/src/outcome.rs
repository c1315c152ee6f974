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

/// Why a claim matched no row, from the row's fence read right after it (`stored`: `None`
/// when no row has the id): [`Error::Stale`] (counted and logged) for a newer fence, else
/// [`Error::NotFound`] (the row was absent when the claim ran).
pub(crate) fn claim_refused(table: &Table, fence: u64, stored: Option<i64>) -> Error {
    stale(table, Step::Claim, fence, stored).unwrap_or_else(|| not_found(table))
}

/// Why a guarded write matched no row: [`Error::Stale`] for a newer fence; with a
/// `precondition` and a current fence, `Ok` (the precondition did not hold); else
/// [`Error::NotFound`].
pub(crate) fn write_refused(
    table: &Table,
    fence: u64,
    stored: Option<i64>,
    precondition: bool,
) -> Result<()> {
    if let Some(stale) = stale(table, Step::Write, fence, stored) {
        return Err(stale);
    }
    if stored.is_some() && precondition {
        Ok(())
    } else {
        // Nothing else could stop the statement: the row was absent when it ran (and
        // inserted since, which READ COMMITTED's next statement sees).
        Err(not_found(table))
    }
}

/// [`Error::Stale`], counted and logged, if the stored fence is above `fence`.
fn stale(table: &Table, step: Step, fence: u64, stored: Option<i64>) -> Option<Error> {
    let last_fence = fence::from_sql(stored?)?;
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
