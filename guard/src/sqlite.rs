//! The helpers on SQLite, through `rusqlite` (feature `sqlite`).
//!
//! Each takes the caller's connection or transaction (a `&Transaction` derefs to the
//! `&Connection` they take) and runs in whatever transaction it is in. SQLite runs one writer
//! at a time, so the fence check inside the `UPDATE` is atomic with the write at any isolation;
//! start the transaction that claims with [`TransactionBehavior::Immediate`]
//! (`BEGIN IMMEDIATE`), so that it takes the write lock before it reads instead of failing
//! with `SQLITE_BUSY` when a deferred read tries to become a write.
//!
//! ```no_run
//! # fn example(conn: &mut rusqlite::Connection, fence: u64) -> Result<(), fencedlock_guard::Error> {
//! use fencedlock_guard::sqlite::{self, Update};
//! use fencedlock_guard::{Table, Written};
//! use rusqlite::TransactionBehavior;
//!
//! let jobs = Table::new("invoice_jobs").id_column("job_id");
//! let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
//! let status: String = sqlite::claim(&tx, &jobs, &72, fence, &["status"], |row| row.get(0))?;
//! if status == "PENDING" {
//!     let sent = Update::new().set("status", &"SENT").when("status", &"PENDING");
//!     if let Written::PreconditionFailed = sqlite::write(&tx, &jobs, &72, fence, &sent)? {
//!         // someone else finished the job
//!     }
//! }
//! tx.commit()?;
//! # Ok(()) }
//! ```
//!
//! [`TransactionBehavior::Immediate`]: rusqlite::TransactionBehavior::Immediate

use rusqlite::types::ToSql;
use rusqlite::{Connection, OptionalExtension, Row};

use crate::dialect::Dialect;
use crate::error::{Error, Result};
use crate::fence;
use crate::outcome::{claim_refused, write_refused, Stored, Written};
use crate::sql;
use crate::table::Table;

/// A guarded write's assignments and precondition, with SQLite's bound values.
pub type Update<'a> = crate::update::Update<'a, dyn ToSql + 'a>;

/// A bound value: the row id, or a value an [`Update`] sets or compares.
pub type Param<'a> = &'a dyn ToSql;

/// The schema step: adds the fence column (`INTEGER NOT NULL DEFAULT 0`) to `table` unless it
/// has it already. An existing column is left as it is: keep it `NOT NULL` (a row whose
/// fence is NULL is refused with [`Error::NullFence`]).
pub fn add_fence_column(conn: &Connection, table: &Table) -> Result<()> {
    let alter = sql::add_fence_column(table, Dialect::Sqlite)?;
    let (name, schema) = table.name_and_schema();
    let present: Option<i64> = conn
        .query_row(
            sql::FENCE_COLUMN_PRESENT,
            (name, schema.unwrap_or("main"), table.fence_column_name()),
            |row| row.get(0),
        )
        .optional()?;
    if present.is_none() {
        conn.execute_batch(&alter)?;
    }
    Ok(())
}

/// The claim, first thing after acquiring and in the transaction that reads the row: raises
/// the row's fence to `fence` unless a newer one is there and returns `map` of the
/// `returning` columns (the fence if empty): the state this holder inherits, which no older
/// holder can change afterwards.
///
/// [`Error::Stale`] if the row carries a newer fence (abandon the attempt), [`Error::NotFound`]
/// if no row has the id, [`Error::NullFence`] if its fence is NULL, [`Error::UnknownColumn`] if a
/// name is no column of the table (asked first: SQLite would read it as a string).
pub fn claim<T>(
    conn: &Connection,
    table: &Table,
    id: Param<'_>,
    fence: u64,
    returning: &[&str],
    map: impl FnOnce(&Row<'_>) -> rusqlite::Result<T>,
) -> Result<T> {
    let bound = fence::to_sql(fence)?;
    let sql = sql::claim(table, Dialect::Sqlite, returning)?;
    check_columns(conn, table, None, returning)?;
    let claimed = conn.prepare_cached(&sql)?.query_row([&bound as Param<'_>, id], map).optional()?;
    match claimed {
        Some(state) => Ok(state),
        None => Err(claim_refused(table, fence, stored_fence(conn, table, id)?)),
    }
}

/// A guarded write: `update` with `fence_column = fence` added to its assignments and
/// `fence_column <= fence` to its condition, in one statement. `<=` lets one holder write
/// many times with its fence.
///
/// `Applied` if the row was updated, `PreconditionFailed` if the fence is current but the
/// update's precondition did not hold; [`Error::Stale`] if the row carries a newer fence,
/// [`Error::NotFound`] if no row has the id, [`Error::NullFence`] if its fence is NULL,
/// [`Error::UnknownColumn`] if a name is no column of the table.
pub fn write(
    conn: &Connection,
    table: &Table,
    id: Param<'_>,
    fence: u64,
    update: &Update<'_>,
) -> Result<Written<()>> {
    let bound = fence::to_sql(fence)?;
    let (sql, values) = sql::write(table, Dialect::Sqlite, update, &[])?;
    check_columns(conn, table, Some(update), &[])?;
    if conn.prepare_cached(&sql)?.execute(params(&bound, id, &values).as_slice())? > 0 {
        return Ok(Written::Applied(()));
    }
    refused_write(conn, table, id, fence, update)
}

/// [`write()`], returning `map` of the `returning` columns of the updated row.
pub fn write_returning<T>(
    conn: &Connection,
    table: &Table,
    id: Param<'_>,
    fence: u64,
    update: &Update<'_>,
    returning: &[&str],
    map: impl FnOnce(&Row<'_>) -> rusqlite::Result<T>,
) -> Result<Written<T>> {
    let bound = fence::to_sql(fence)?;
    let (sql, values) = sql::write(table, Dialect::Sqlite, update, returning)?;
    check_columns(conn, table, Some(update), returning)?;
    let written =
        conn.prepare_cached(&sql)?.query_row(params(&bound, id, &values).as_slice(), map).optional()?;
    match written {
        Some(value) => Ok(Written::Applied(value)),
        None => refused_write(conn, table, id, fence, update),
    }
}

/// The full statement [`write()`] (empty `returning`) or [`write_returning`] runs for
/// `update`: for logs, `EXPLAIN`, or a statement of your own built the same way.
pub fn write_sql(table: &Table, update: &Update<'_>, returning: &[&str]) -> Result<String> {
    Ok(sql::write(table, Dialect::Sqlite, update, returning)?.0)
}

/// Fence, id, then the update's values: the order the statements number them in.
fn params<'a>(fence: &'a i64, id: Param<'a>, values: &[Param<'a>]) -> Vec<Param<'a>> {
    let mut params: Vec<Param<'a>> = Vec::with_capacity(2 + values.len());
    params.push(fence);
    params.push(id);
    params.extend_from_slice(values);
    params
}

fn refused_write<T>(
    conn: &Connection,
    table: &Table,
    id: Param<'_>,
    fence: u64,
    update: &Update<'_>,
) -> Result<Written<T>> {
    write_refused(table, fence, stored_fence(conn, table, id)?, update.has_precondition())?;
    Ok(Written::PreconditionFailed)
}

/// The row's fence, read after a statement matched nothing (in the same transaction). Read as
/// nullable: a column added by hand may hold NULL.
fn stored_fence(conn: &Connection, table: &Table, id: Param<'_>) -> Result<Stored> {
    let sql = sql::fence_of(table, Dialect::Sqlite)?;
    Ok(conn.prepare_cached(&sql)?.query_row([id], |row| row.get(0)).optional()?)
}

/// [`Error::UnknownColumn`] for the first name the caller gave (the id and fence columns,
/// `update`'s columns, `returning`) that is no column of `table`. SQLite would read it as a
/// string literal: a misspelled `RETURNING` returns its own text, a misspelled precondition
/// never holds. Asked every time, in the caller's transaction, so a schema change is seen.
fn check_columns(
    conn: &Connection,
    table: &Table,
    update: Option<&Update<'_>>,
    returning: &[&str],
) -> Result<()> {
    let mut names = vec![table.id_column_name(), table.fence_column_name()];
    for name in update.into_iter().flat_map(|update| update.columns()).chain(returning.iter().copied()) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let (name, schema) = table.name_and_schema();
    let mut params: Vec<Param<'_>> = Vec::with_capacity(2 + names.len());
    params.push(&name);
    params.push(&schema);
    params.extend(names.iter().map(|name| name as Param<'_>));
    let unknown: Option<String> = conn
        .prepare_cached(&sql::unknown_column(names.len()))?
        .query_row(params.as_slice(), |row| row.get(0))
        .optional()?;
    match unknown {
        Some(column) => Err(Error::UnknownColumn { table: table.qualified_name(), column }),
        None => Ok(()),
    }
}
