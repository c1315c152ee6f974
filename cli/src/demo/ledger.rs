//! The protected resource of the billing demo: a real SQLite table of invoices and an outbox
//! of sent invoices. The guard lives here, in the `UPDATE`, not in the lock.

use std::path::Path;
use std::time::Duration;

use rusqlite::{named_params, Connection, OptionalExtension, TransactionBehavior};

/// How a send is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// `... WHERE id = :id AND last_fence <= :fence`: the table refuses older fences.
    Fenced,
    /// `... WHERE id = :id`: trusts the lock alone (what `--no-fence` shows).
    Unguarded,
}

impl Guard {
    /// The statement each send runs.
    pub fn sql(self) -> &'static str {
        match self {
            Guard::Fenced => {
                "UPDATE invoices SET sent = sent + 1, last_fence = :fence WHERE id = :id AND last_fence <= :fence"
            }
            Guard::Unguarded => "UPDATE invoices SET sent = sent + 1, last_fence = :fence WHERE id = :id",
        }
    }
}

/// The claim: a new owner's first step (`--claim`). It raises the row's fence to its own and
/// reads the state it inherits in one statement, so no older fence can change that state
/// after it has looked, whenever the older write arrives.
pub const CLAIM_SQL: &str =
    "UPDATE invoices SET last_fence = :fence WHERE id = :id AND last_fence <= :fence RETURNING sent";

/// An invoice row.
#[derive(Debug, Clone, Copy)]
pub struct Invoice {
    /// How many times it was sent (the invariant: exactly once).
    pub sent: u32,
    /// The highest fence the table accepted a write from.
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

/// One worker's connection to the database.
pub struct Ledger {
    conn: Connection,
}

impl Ledger {
    /// Creates (or resets) the database with one unsent invoice.
    pub fn create(path: &Path, invoice: &str, amount_cents: i64) -> rusqlite::Result<()> {
        let conn = Connection::open(path)?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             DROP TABLE IF EXISTS outbox;
             DROP TABLE IF EXISTS invoices;
             CREATE TABLE invoices (
                 id TEXT PRIMARY KEY,
                 amount_cents INTEGER NOT NULL,
                 sent INTEGER NOT NULL DEFAULT 0,
                 last_fence INTEGER NOT NULL DEFAULT 0
             );
             CREATE TABLE outbox (
                 id INTEGER PRIMARY KEY AUTOINCREMENT,
                 invoice_id TEXT NOT NULL REFERENCES invoices(id),
                 worker TEXT NOT NULL,
                 fence INTEGER NOT NULL
             );",
        )?;
        conn.execute(
            "INSERT INTO invoices (id, amount_cents) VALUES (:id, :amount)",
            named_params! { ":id": invoice, ":amount": amount_cents },
        )?;
        Ok(())
    }

    /// A new connection (each worker has its own, like separate services would).
    pub fn open(path: &Path) -> rusqlite::Result<Ledger> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(10))?;
        Ok(Ledger { conn })
    }

    /// The invoice's current state.
    pub fn invoice(&self, id: &str) -> rusqlite::Result<Invoice> {
        self.conn.query_row(
            "SELECT sent, last_fence FROM invoices WHERE id = :id",
            named_params! { ":id": id },
            |row| {
                Ok(Invoice {
                    sent: row.get(0)?,
                    last_fence: u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0),
                })
            },
        )
    }

    /// "Sends" the invoice: the guarded (or unguarded) update and, if it took, an outbox row,
    /// in one transaction.
    pub fn send(&mut self, id: &str, worker: &str, fence: u64, guard: Guard) -> rusqlite::Result<Write> {
        let fence =
            i64::try_from(fence).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(0, i64::MAX))?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let changed = tx.execute(guard.sql(), named_params! { ":id": id, ":fence": fence })?;
        let outcome = if changed == 1 {
            tx.execute(
                "INSERT INTO outbox (invoice_id, worker, fence) VALUES (:id, :worker, :fence)",
                named_params! { ":id": id, ":worker": worker, ":fence": fence },
            )?;
            let outbox_id = tx.last_insert_rowid();
            let sent = tx.query_row(
                "SELECT sent FROM invoices WHERE id = :id",
                named_params! { ":id": id },
                |row| row.get(0),
            )?;
            Write::Accepted { outbox_id, sent }
        } else {
            Write::Refused { last_fence: last_fence(&tx, id)? }
        };
        tx.commit()?;
        Ok(outcome)
    }

    /// Claims the invoice for `fence` ([`CLAIM_SQL`]), reading its state in the same
    /// transaction.
    pub fn claim(&mut self, id: &str, fence: u64) -> rusqlite::Result<Claim> {
        let fence =
            i64::try_from(fence).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(0, i64::MAX))?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let sent: Option<u32> = tx
            .query_row(CLAIM_SQL, named_params! { ":id": id, ":fence": fence }, |row| row.get(0))
            .optional()?;
        let outcome = match sent {
            Some(sent) => Claim::Claimed { sent },
            None => Claim::Newer { last_fence: last_fence(&tx, id)? },
        };
        tx.commit()?;
        Ok(outcome)
    }

    /// The outbox entries for the invoice: (worker, fence), in order.
    pub fn outbox(&self, id: &str) -> rusqlite::Result<Vec<(String, u64)>> {
        let mut stmt =
            self.conn.prepare("SELECT worker, fence FROM outbox WHERE invoice_id = :id ORDER BY id")?;
        let rows = stmt.query_map(named_params! { ":id": id }, |row| {
            Ok((row.get::<_, String>(0)?, u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0)))
        })?;
        rows.collect()
    }
}

/// The row's fence (0 if the row is missing), read inside a caller's transaction.
fn last_fence(conn: &Connection, id: &str) -> rusqlite::Result<u64> {
    let last: Option<i64> = conn
        .query_row("SELECT last_fence FROM invoices WHERE id = :id", named_params! { ":id": id }, |row| {
            row.get(0)
        })
        .optional()?;
    Ok(last.and_then(|v| u64::try_from(v).ok()).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fenced_update_refuses_older_fences_and_the_unguarded_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        Ledger::create(&path, "inv", 100).unwrap();
        let mut db = Ledger::open(&path).unwrap();
        assert!(matches!(db.send("inv", "b", 8, Guard::Fenced).unwrap(), Write::Accepted { .. }));
        assert!(matches!(db.send("inv", "a", 7, Guard::Fenced).unwrap(), Write::Refused { last_fence: 8 }));
        let inv = db.invoice("inv").unwrap();
        assert_eq!((inv.sent, inv.last_fence), (1, 8));
        assert!(matches!(db.send("inv", "a", 7, Guard::Unguarded).unwrap(), Write::Accepted { .. }));
        assert_eq!(db.invoice("inv").unwrap().sent, 2);
        assert_eq!(db.outbox("inv").unwrap(), vec![("b".to_string(), 8), ("a".to_string(), 7)]);
        // Creating again resets the table.
        Ledger::create(&path, "inv", 100).unwrap();
        assert_eq!(Ledger::open(&path).unwrap().invoice("inv").unwrap().sent, 0);
    }

    #[test]
    fn a_claim_raises_the_fence_so_an_older_write_arriving_later_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        Ledger::create(&path, "inv", 100).unwrap();
        let mut db = Ledger::open(&path).unwrap();
        assert!(matches!(db.claim("inv", 8).unwrap(), Claim::Claimed { sent: 0 }));
        assert_eq!(db.invoice("inv").unwrap().last_fence, 8);
        // The older fence's write lands after the claim, before the claimant wrote anything.
        assert!(matches!(db.send("inv", "a", 7, Guard::Fenced).unwrap(), Write::Refused { last_fence: 8 }));
        assert!(matches!(db.send("inv", "b", 8, Guard::Fenced).unwrap(), Write::Accepted { sent: 1, .. }));
        // An older claimant is told a newer fence holds the row, and changes nothing.
        assert!(matches!(db.claim("inv", 7).unwrap(), Claim::Newer { last_fence: 8 }));
        // Without a claim the older write that arrives first is accepted: nothing newer to compare.
        Ledger::create(&path, "inv", 100).unwrap();
        assert!(matches!(db.send("inv", "a", 7, Guard::Fenced).unwrap(), Write::Accepted { sent: 1, .. }));
        assert!(matches!(db.send("inv", "b", 8, Guard::Fenced).unwrap(), Write::Accepted { sent: 2, .. }));
    }
}
