//! The helpers on PostgreSQL, through `tokio-postgres` (feature `postgres`).
//!
//! Each takes the caller's own client or transaction (anything that is a
//! [`GenericClient`]: a [`Client`](tokio_postgres::Client), a
//! [`Transaction`](tokio_postgres::Transaction)) and runs inside whatever transaction it is in:
//! claim, decide, write, commit, as the caller's code does anyway. The fence check and the
//! write are one `UPDATE`, so they hold under READ COMMITTED, REPEATABLE READ and SERIALIZABLE
//! alike (see the crate docs for the interleavings); under the two stricter levels a
//! concurrent holder makes the statement fail with a serialization failure instead, which is
//! the caller's retry ([`Error::is_retryable`](crate::Error::is_retryable)).
//!
//! ```no_run
//! # async fn example(client: &mut tokio_postgres::Client, fence: u64) -> Result<(), fencedlock_guard::Error> {
//! use fencedlock_guard::postgres::{self, Update};
//! use fencedlock_guard::{Table, Written};
//!
//! let jobs = Table::new("invoice_jobs").id_column("job_id");
//! let tx = client.transaction().await?;
//! // First, in the transaction that reads what this holder inherits: raise the fence.
//! let row = postgres::claim(&tx, &jobs, &72_i64, fence, &["status"]).await?;
//! let status: String = row.get(0);
//! if status == "PENDING" {
//!     let sent = Update::new().set("status", &"SENT").when("status", &"PENDING");
//!     match postgres::write(&tx, &jobs, &72_i64, fence, &sent).await? {
//!         Written::Applied(()) => {}
//!         Written::PreconditionFailed => { /* someone else finished the job */ }
//!     }
//! }
//! tx.commit().await?;
//! # Ok(()) }
//! ```

use tokio_postgres::types::ToSql;
use tokio_postgres::{GenericClient, Row};

use crate::dialect::Dialect;
use crate::error::Result;
use crate::fence;
use crate::outcome::{claim_refused, write_refused, Stored, Written};
use crate::sql;
use crate::table::Table;

/// A guarded write's assignments and precondition, with PostgreSQL's bound values.
pub type Update<'a> = crate::update::Update<'a, dyn ToSql + Sync + 'a>;

/// A bound value: the row id, or a value an [`Update`] sets or compares.
pub type Param<'a> = &'a (dyn ToSql + Sync);

/// The schema step: adds the fence column (`bigint NOT NULL DEFAULT 0`) to `table` unless it
/// has it already. An existing column is left as it is: keep it `NOT NULL` (a row whose
/// fence is NULL is refused with [`Error::NullFence`](crate::Error::NullFence)).
pub async fn add_fence_column<C: GenericClient>(client: &C, table: &Table) -> Result<()> {
    let alter = sql::add_fence_column_if_absent(table)?;
    client.batch_execute(&alter).await?;
    Ok(())
}

/// The claim, first thing after acquiring and in the transaction that reads the row: raises
/// the row's fence to `fence` unless a newer one is there, locks the row until the
/// transaction ends, and returns the `returning` columns (the fence if empty): the state this
/// holder inherits, which no older holder can change afterwards.
///
/// [`Error::Stale`](crate::Error::Stale) if the row carries a newer fence (abandon the
/// attempt), [`Error::NotFound`](crate::Error::NotFound) if no row has the id,
/// [`Error::NullFence`](crate::Error::NullFence) if its fence is NULL.
pub async fn claim<C: GenericClient>(
    client: &C,
    table: &Table,
    id: Param<'_>,
    fence: u64,
    returning: &[&str],
) -> Result<Row> {
    let bound = fence::to_sql(fence)?;
    let sql = sql::claim(table, Dialect::Postgres, returning)?;
    match client.query_opt(&sql, &[&bound, id]).await? {
        Some(row) => Ok(row),
        None => Err(claim_refused(table, fence, stored_fence(client, table, id).await?)),
    }
}

/// A guarded write: `update` with `fence_column = fence` added to its assignments and
/// `fence_column <= fence` to its condition, in one statement. `<=` lets one holder write
/// many times with its fence.
///
/// `Applied` if the row was updated, `PreconditionFailed` if the fence is current but the
/// update's precondition did not hold; [`Error::Stale`](crate::Error::Stale) if the row carries
/// a newer fence, [`Error::NotFound`](crate::Error::NotFound) if no row has the id,
/// [`Error::NullFence`](crate::Error::NullFence) if its fence is NULL.
pub async fn write<C: GenericClient>(
    client: &C,
    table: &Table,
    id: Param<'_>,
    fence: u64,
    update: &Update<'_>,
) -> Result<Written<()>> {
    let bound = fence::to_sql(fence)?;
    let (sql, values) = sql::write(table, Dialect::Postgres, update, &[])?;
    let params = params(&bound, id, &values);
    if client.execute(&sql, &params).await? > 0 {
        return Ok(Written::Applied(()));
    }
    refused_write(client, table, id, fence, update).await
}

/// [`write()`], returning the `returning` columns of the updated row.
pub async fn write_returning<C: GenericClient>(
    client: &C,
    table: &Table,
    id: Param<'_>,
    fence: u64,
    update: &Update<'_>,
    returning: &[&str],
) -> Result<Written<Row>> {
    let bound = fence::to_sql(fence)?;
    let (sql, values) = sql::write(table, Dialect::Postgres, update, returning)?;
    let params = params(&bound, id, &values);
    if let Some(row) = client.query_opt(&sql, &params).await? {
        return Ok(Written::Applied(row));
    }
    refused_write(client, table, id, fence, update).await
}

/// The full statement [`write()`] (empty `returning`) or [`write_returning`] runs for
/// `update`: for logs, `EXPLAIN`, or a statement of your own built the same way.
pub fn write_sql(table: &Table, update: &Update<'_>, returning: &[&str]) -> Result<String> {
    Ok(sql::write(table, Dialect::Postgres, update, returning)?.0)
}

/// Fence, id, then the update's values: the order the statements number them in.
fn params<'a>(fence: &'a i64, id: Param<'a>, values: &[Param<'a>]) -> Vec<Param<'a>> {
    let mut params: Vec<Param<'a>> = Vec::with_capacity(2 + values.len());
    params.push(fence);
    params.push(id);
    params.extend_from_slice(values);
    params
}

async fn refused_write<C: GenericClient, T>(
    client: &C,
    table: &Table,
    id: Param<'_>,
    fence: u64,
    update: &Update<'_>,
) -> Result<Written<T>> {
    let stored = stored_fence(client, table, id).await?;
    write_refused(table, fence, stored, update.has_precondition())?;
    Ok(Written::PreconditionFailed)
}

/// The row's fence, read after a statement matched nothing (in the same transaction). Read as
/// nullable: a column added by hand may hold NULL.
async fn stored_fence<C: GenericClient>(client: &C, table: &Table, id: Param<'_>) -> Result<Stored> {
    let sql = sql::fence_of(table, Dialect::Postgres)?;
    match client.query_opt(&sql, &[id]).await? {
        Some(row) => Ok(Some(row.try_get(0)?)),
        None => Ok(None),
    }
}
