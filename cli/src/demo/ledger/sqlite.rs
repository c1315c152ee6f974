//! The demo's tables in a SQLite file.

use std::path::Path;
use std::time::Duration;

use fencedlock_guard::sqlite::{self as guard, Update};
use fencedlock_guard::{Dialect, Written};
use rusqlite::{named_params, Connection, TransactionBehavior};

use super::{
    count, fence, fence_sql, invoices, refused, unguarded_send_sql, Claim, Guard, Invoice, LedgerError,
    Write, SEND_EXPRESSION,
};

/// The statement a fenced send runs.
pub fn fenced_send_sql() -> Result<String, LedgerError> {
    Ok(guard::write_sql(&invoices(Dialect::Sqlite), &send(), &["sent"])?)
}

fn send<'a>() -> Update<'a> {
    Update::new().set_sql("sent", SEND_EXPRESSION)
}

/// Creates (or resets) the database with one unsent invoice.
pub fn create(path: &Path, invoice: &str, amount_cents: i64) -> Result<(), LedgerError> {
    let conn = Connection::open(path)?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         DROP TABLE IF EXISTS outbox;
         DROP TABLE IF EXISTS invoices;
         CREATE TABLE invoices (
             id TEXT PRIMARY KEY,
             amount_cents INTEGER NOT NULL,
             sent INTEGER NOT NULL DEFAULT 0
         );
         CREATE TABLE outbox (
             id INTEGER PRIMARY KEY AUTOINCREMENT,
             invoice_id TEXT NOT NULL REFERENCES invoices(id),
             worker TEXT NOT NULL,
             fence INTEGER NOT NULL
         );",
    )?;
    guard::add_fence_column(&conn, &invoices(Dialect::Sqlite))?;
    conn.execute(
        "INSERT INTO invoices (id, amount_cents) VALUES (:id, :amount)",
        named_params! { ":id": invoice, ":amount": amount_cents },
    )?;
    Ok(())
}

/// One worker's connection.
pub struct Ledger {
    conn: Connection,
}

impl Ledger {
    pub fn open(path: &Path) -> Result<Ledger, LedgerError> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(10))?;
        Ok(Ledger { conn })
    }

    pub fn invoice(&self, id: &str) -> Result<Invoice, LedgerError> {
        let (sent, last_fence): (i64, i64) = self.conn.query_row(
            "SELECT sent, last_fence FROM invoices WHERE id = :id",
            named_params! { ":id": id },
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        Ok(Invoice { sent: count(sent)?, last_fence: fence(last_fence)? })
    }

    pub fn send(&mut self, id: &str, worker: &str, fence: u64, guard: Guard) -> Result<Write, LedgerError> {
        // IMMEDIATE: the write lock before the first statement, as the guard's docs advise.
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let sent: i64 = match guard {
            Guard::Fenced => {
                match guard::write_returning(
                    &tx,
                    &invoices(Dialect::Sqlite),
                    &id,
                    fence,
                    &send(),
                    &["sent"],
                    |r| r.get(0),
                ) {
                    Ok(Written::Applied(sent)) => sent,
                    Ok(Written::PreconditionFailed) => unreachable_precondition()?,
                    Err(err) => return Ok(Write::Refused { last_fence: refused(err)? }),
                }
            }
            Guard::Unguarded => {
                tx.query_row(&unguarded_send_sql(Dialect::Sqlite)?, (fence_sql(fence)?, id), |r| r.get(0))?
            }
        };
        tx.execute(
            "INSERT INTO outbox (invoice_id, worker, fence) VALUES (:id, :worker, :fence)",
            named_params! { ":id": id, ":worker": worker, ":fence": fence_sql(fence)? },
        )?;
        let outbox_id = tx.last_insert_rowid();
        tx.commit()?;
        Ok(Write::Accepted { outbox_id, sent: count(sent)? })
    }

    pub fn claim(&mut self, id: &str, fence: u64) -> Result<Claim, LedgerError> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let claimed =
            guard::claim(&tx, &invoices(Dialect::Sqlite), &id, fence, &["sent"], |r| r.get::<_, i64>(0));
        let outcome = match claimed {
            Ok(sent) => Claim::Claimed { sent: count(sent)? },
            Err(err) => Claim::Newer { last_fence: refused(err)? },
        };
        tx.commit()?;
        Ok(outcome)
    }

    pub fn outbox(&self, id: &str) -> Result<Vec<(String, u64)>, LedgerError> {
        let mut stmt =
            self.conn.prepare("SELECT worker, fence FROM outbox WHERE invoice_id = :id ORDER BY id")?;
        let rows = stmt
            .query_map(named_params! { ":id": id }, |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        rows.into_iter().map(|(worker, f)| Ok((worker, fence(f)?))).collect()
    }
}

/// The send has no state precondition, so the guard answers applied or refused.
fn unreachable_precondition<T>() -> Result<T, LedgerError> {
    Err(LedgerError::Corrupt("a send refused by a precondition it does not have".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ledger in a scratch dir with invoice `inv` (100) created: the dir (kept while the
    /// test runs), the database's path, and the ledger open on it.
    fn ledger_with_one_invoice() -> (tempfile::TempDir, std::path::PathBuf, Ledger) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        create(&path, "inv", 100).unwrap();
        let db = Ledger::open(&path).unwrap();
        (dir, path, db)
    }

    #[test]
    fn the_fenced_send_refuses_older_fences_and_the_unguarded_one_does_not() {
        let (_dir, path, mut db) = ledger_with_one_invoice();
        assert!(matches!(db.send("inv", "b", 8, Guard::Fenced).unwrap(), Write::Accepted { sent: 1, .. }));
        assert!(matches!(db.send("inv", "a", 7, Guard::Fenced).unwrap(), Write::Refused { last_fence: 8 }));
        let inv = db.invoice("inv").unwrap();
        assert_eq!((inv.sent, inv.last_fence), (1, 8));
        assert!(matches!(db.send("inv", "a", 7, Guard::Unguarded).unwrap(), Write::Accepted { sent: 2, .. }));
        assert_eq!(db.outbox("inv").unwrap(), vec![("b".to_string(), 8), ("a".to_string(), 7)]);
        create(&path, "inv", 100).unwrap();
        assert_eq!(Ledger::open(&path).unwrap().invoice("inv").unwrap().sent, 0, "creating again resets");
    }

    #[test]
    fn a_claim_raises_the_fence_so_an_older_write_arriving_later_is_refused() {
        let (_dir, path, mut db) = ledger_with_one_invoice();
        assert!(matches!(db.claim("inv", 8).unwrap(), Claim::Claimed { sent: 0 }));
        assert_eq!(db.invoice("inv").unwrap().last_fence, 8);
        assert!(matches!(db.send("inv", "a", 7, Guard::Fenced).unwrap(), Write::Refused { last_fence: 8 }));
        assert!(matches!(db.send("inv", "b", 8, Guard::Fenced).unwrap(), Write::Accepted { sent: 1, .. }));
        assert!(matches!(db.claim("inv", 7).unwrap(), Claim::Newer { last_fence: 8 }));
        // Without a claim the older write that arrives first is accepted: nothing newer to compare.
        create(&path, "inv", 100).unwrap();
        assert!(matches!(db.send("inv", "a", 7, Guard::Fenced).unwrap(), Write::Accepted { sent: 1, .. }));
        assert!(matches!(db.send("inv", "b", 8, Guard::Fenced).unwrap(), Write::Accepted { sent: 2, .. }));
    }
}
