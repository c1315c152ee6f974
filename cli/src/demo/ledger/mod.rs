//! The protected resource of the billing demo: a table of invoices and an outbox of sent
//! invoices, in SQLite (a file; the default) or in PostgreSQL (`--database postgres://…`).
//! The guard lives here, in the resource, through `fencedlock-guard`'s claim and guarded
//! write, not in the lock. `--no-fence` writes with a plain `UPDATE` instead, to show what
//! the lock alone lets through.

mod postgres;
mod sqlite;

use std::path::PathBuf;

use fencedlock_guard::{Dialect, Table};

/// The invoices table, as the guard addresses it (its schema on PostgreSQL).
fn invoices(dialect: Dialect) -> Table {
    match dialect {
        Dialect::Sqlite => Table::new("invoices"),
        Dialect::Postgres => Table::new("invoices").schema(postgres::SCHEMA),
    }
}

/// The send's own change: one more send. The guarded write adds the fence to it.
const SEND_EXPRESSION: &str = r#""sent" + 1"#;

/// How a send is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// The guard's write: the table refuses fences older than its `last_fence`.
    Fenced,
    /// A plain `UPDATE … WHERE id = …`: trusts the lock alone (what `--no-fence` shows).
    Unguarded,
}

/// An invoice row.
#[derive(Debug, Clone, Copy)]
pub struct Invoice {
    /// How many times it was sent (the invariant: exactly once).
    pub sent: u32,
    /// The highest fence the table accepted a write or a claim from.
    pub last_fence: u64,
}

/// The outcome of one send.
#[derive(Debug, Clone, Copy)]
pub enum Write {
    /// The row was updated and an outbox entry written.
    Accepted {
        /// The outbox entry's id.
        outbox_id: i64,
        /// How many times the invoice has been sent, this send included: more than the writer
        /// read plus one means it acted on state that changed after it read it.
        sent: u32,
    },
    /// The table refused the write: its fence is below `last_fence`.
    Refused {
        /// The fence the row already carries.
        last_fence: u64,
    },
}

/// The outcome of a claim.
#[derive(Debug, Clone, Copy)]
pub enum Claim {
    /// The row now carries the claimant's fence; `sent` is the state it inherits.
    Claimed {
        /// How many times the invoice had been sent when the claim took.
        sent: u32,
    },
    /// A newer fence already holds the row: the claimant is stale and must abandon.
    Newer {
        /// The fence the row already carries.
        last_fence: u64,
    },
}

/// Why the ledger could not answer.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The guard refused for a reason other than a stale fence, or the database failed.
    #[error("{0}")]
    Guard(#[from] fencedlock_guard::Error),
    /// SQLite failed outside the guard.
    #[error("{0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL failed outside the guard (connecting included).
    #[error("{0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// A stored count or fence out of its range.
    #[error("the table holds {0}, which the demo never writes")]
    Corrupt(String),
}

/// Where the invoices live.
#[derive(Debug, Clone)]
pub enum Database {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL URL; the demo's tables are in the schema [`postgres::SCHEMA`].
    Postgres(String),
}

impl Database {
    /// For the header: which database, without credentials.
    pub fn describe(&self) -> String {
        match self {
            Database::Sqlite(path) => format!("SQLite {}", path.display()),
            Database::Postgres(url) => {
                format!("PostgreSQL {} (schema {})", postgres::without_password(url), postgres::SCHEMA)
            }
        }
    }

    /// `"sqlite"` or `"postgres"`, for `--json`.
    pub fn kind(&self) -> &'static str {
        match self {
            Database::Sqlite(_) => "sqlite",
            Database::Postgres(_) => "postgres",
        }
    }

    /// Creates (or resets) the tables with one unsent invoice, the fence column added by the
    /// guard's schema step.
    pub async fn create(&self, invoice: &str, amount_cents: i64) -> Result<(), LedgerError> {
        match self {
            Database::Sqlite(path) => sqlite::create(path, invoice, amount_cents),
            Database::Postgres(url) => postgres::create(url, invoice, amount_cents).await,
        }
    }

    /// A new connection (each worker has its own, like separate services would).
    pub async fn open(&self) -> Result<Ledger, LedgerError> {
        Ok(match self {
            Database::Sqlite(path) => Ledger::Sqlite(sqlite::Ledger::open(path)?),
            Database::Postgres(url) => Ledger::Postgres(postgres::Ledger::open(url).await?),
        })
    }

    fn dialect(&self) -> Dialect {
        match self {
            Database::Sqlite(_) => Dialect::Sqlite,
            Database::Postgres(_) => Dialect::Postgres,
        }
    }

    /// The statement each send runs.
    pub fn send_sql(&self, guard: Guard) -> Result<String, LedgerError> {
        let dialect = self.dialect();
        match guard {
            Guard::Fenced => Ok(match self {
                Database::Sqlite(_) => sqlite::fenced_send_sql()?,
                Database::Postgres(_) => postgres::fenced_send_sql()?,
            }),
            Guard::Unguarded => unguarded_send_sql(dialect),
        }
    }

    /// The claim each owner runs first with `--claim`.
    pub fn claim_sql(&self) -> Result<String, LedgerError> {
        Ok(invoices(self.dialect()).claim_sql(self.dialect(), &["sent"])?)
    }
}

/// The send without the guard: the fence is recorded but not checked.
fn unguarded_send_sql(dialect: Dialect) -> Result<String, LedgerError> {
    let table = invoices(dialect);
    Ok(format!(
        r#"UPDATE {} SET "sent" = {SEND_EXPRESSION}, "last_fence" = {} WHERE "id" = {} RETURNING "sent""#,
        table.quoted_name()?,
        dialect.placeholder(1),
        dialect.placeholder(2)
    ))
}

/// One worker's connection to the database.
pub enum Ledger {
    /// SQLite.
    Sqlite(sqlite::Ledger),
    /// PostgreSQL.
    Postgres(postgres::Ledger),
}

impl Ledger {
    /// The invoice's current state.
    pub async fn invoice(&self, id: &str) -> Result<Invoice, LedgerError> {
        match self {
            Ledger::Sqlite(db) => db.invoice(id),
            Ledger::Postgres(db) => db.invoice(id).await,
        }
    }

    /// "Sends" the invoice: the guarded (or unguarded) update and, if it took, an outbox row,
    /// in one transaction.
    pub async fn send(
        &mut self,
        id: &str,
        worker: &str,
        fence: u64,
        guard: Guard,
    ) -> Result<Write, LedgerError> {
        match self {
            Ledger::Sqlite(db) => db.send(id, worker, fence, guard),
            Ledger::Postgres(db) => db.send(id, worker, fence, guard).await,
        }
    }

    /// Claims the invoice for `fence`, reading its state in the same statement.
    pub async fn claim(&mut self, id: &str, fence: u64) -> Result<Claim, LedgerError> {
        match self {
            Ledger::Sqlite(db) => db.claim(id, fence),
            Ledger::Postgres(db) => db.claim(id, fence).await,
        }
    }

    /// The outbox entries for the invoice: (worker, fence), in order.
    pub async fn outbox(&self, id: &str) -> Result<Vec<(String, u64)>, LedgerError> {
        match self {
            Ledger::Sqlite(db) => db.outbox(id),
            Ledger::Postgres(db) => db.outbox(id).await,
        }
    }
}

/// A stored count as `u32`.
fn count(stored: i64) -> Result<u32, LedgerError> {
    u32::try_from(stored).map_err(|_| LedgerError::Corrupt(format!("a send count of {stored}")))
}

/// A stored fence as `u64`.
fn fence(stored: i64) -> Result<u64, LedgerError> {
    u64::try_from(stored).map_err(|_| LedgerError::Corrupt(format!("a fence of {stored}")))
}

/// A fence as the tables store it (the guard's own writes check this themselves).
fn fence_sql(fence: u64) -> Result<i64, LedgerError> {
    i64::try_from(fence).map_err(|_| fencedlock_guard::Error::InvalidFence(fence).into())
}

/// A refused guarded write or claim as the demo reports it; other errors pass through.
fn refused(err: fencedlock_guard::Error) -> Result<u64, LedgerError> {
    match err {
        fencedlock_guard::Error::Stale { last_fence, .. } => Ok(last_fence.unwrap_or(0)),
        other => Err(other.into()),
    }
}
