//! The crate's one error type.

use fencedlock_protocol::limits::MAX_FENCE;

/// Why a claim or a guarded write did not happen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The row carries a newer fence than the caller's: a newer holder has claimed or written
    /// it, so this holder is stale and must abandon its attempt (its transaction may still
    /// commit other work; nothing was written to this row). Counted in
    /// [`STALE_REFUSALS_TOTAL`](crate::metrics::STALE_REFUSALS_TOTAL).
    #[error("stale fence {fence} on {resource}: {}", describe_newer(*.last_fence))]
    Stale {
        /// The resource label of the table ([`Table::resource`](crate::Table::resource)).
        resource: String,
        /// The caller's fence.
        fence: u64,
        /// The row's `last_fence` as read right after the refusal, where it could be read.
        last_fence: Option<u64>,
    },
    /// No row has the id: nothing to claim or write. (A missing row is not a stale fence;
    /// insert it first, with `last_fence` 0 or the creator's fence.)
    #[error("no row with that id in {resource}")]
    NotFound {
        /// The resource label of the table.
        resource: String,
    },
    /// The row has the id but its fence column is NULL: there is no fence to compare, so
    /// nothing was written. `add_fence_column` adds the column `NOT NULL DEFAULT 0` but leaves
    /// an existing one as it is: set the NULLs to 0 and make the column `NOT NULL`.
    #[error("the fence column {column:?} of {table} is NULL on that row: nothing written")]
    NullFence {
        /// The table, `schema.table` or `table`.
        table: String,
        /// The fence column.
        column: String,
    },
    /// A column name that is no column of the table, refused before anything was written.
    /// SQLite reads a double-quoted name that matches no column as a string literal, so the
    /// SQLite helpers check every name against the table first; PostgreSQL refuses it itself
    /// (`Error::Postgres`, SQLSTATE `42703`).
    #[error("no column {column:?} in {table}")]
    UnknownColumn {
        /// The table, `schema.table` or `table`.
        table: String,
        /// The name as given.
        column: String,
    },
    /// A fence outside `1..=MAX_FENCE`: fences start at 1, and PostgreSQL's `bigint` and
    /// SQLite's `INTEGER` are signed 64-bit, which every fence the module hands out fits.
    #[error("fence {0} is not a fence: fences are 1..={max}", max = MAX_FENCE)]
    InvalidFence(u64),
    /// A table or column name the crate refuses to quote (see [`Table`](crate::Table)).
    #[error("invalid SQL identifier {name:?}: {reason}")]
    Identifier {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// PostgreSQL answered with an error. A serialization failure or a deadlock under
    /// REPEATABLE READ or SERIALIZABLE is the caller's retry ([`Error::is_retryable`]).
    #[cfg(feature = "postgres")]
    #[error("postgres: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// SQLite answered with an error. A busy database is the caller's retry.
    #[cfg(feature = "sqlite")]
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

fn describe_newer(last_fence: Option<u64>) -> String {
    match last_fence {
        Some(last) => format!("the row carries fence {last} (a newer holder claimed or wrote it)"),
        None => "a newer holder claimed or wrote the row".to_owned(),
    }
}

impl Error {
    /// Whether this is the stale-holder refusal ([`Error::Stale`]).
    pub fn is_stale(&self) -> bool {
        matches!(self, Error::Stale { .. })
    }

    /// Whether the database gave up on the transaction for a reason another attempt can get
    /// past: a serialization failure (SQLSTATE `40001`) or a deadlock (`40P01`) on PostgreSQL,
    /// a busy or locked database on SQLite. Roll back and run the whole transaction again,
    /// from the claim: the retry then sees the newest fence and is refused if it is stale.
    pub fn is_retryable(&self) -> bool {
        match self {
            #[cfg(feature = "postgres")]
            Error::Postgres(err) => {
                use tokio_postgres::error::SqlState;
                err.code().is_some_and(|code| {
                    *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED
                })
            }
            #[cfg(feature = "sqlite")]
            Error::Sqlite(err) => matches!(
                err.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
            ),
            _ => false,
        }
    }
}

/// Convenience alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
