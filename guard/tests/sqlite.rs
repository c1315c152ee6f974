//! The guard on SQLite (a real database file): the lesson's orderings, one holder's many
//! writes, a state precondition, two connections where one holds the write lock, and bad
//! inputs.

mod support;

use std::path::Path;
use std::time::Duration;

use fencedlock_guard::sqlite::{self, Update};
use fencedlock_guard::{quote_identifier, Error, Table, Written};
use rusqlite::{Connection, TransactionBehavior};
use support::{jobs, local_recorder, JOB, JOBS_DDL};

/// A database file with the lesson's table, one PENDING job, and the fence column added by
/// the schema helper.
fn with_jobs(dir: &Path) -> Connection {
    let conn = open(dir);
    conn.execute_batch(JOBS_DDL).unwrap();
    conn.execute("INSERT INTO invoice_jobs (job_id) VALUES (?1)", [JOB]).unwrap();
    sqlite::add_fence_column(&conn, &jobs()).unwrap();
    conn
}

fn open(dir: &Path) -> Connection {
    let conn = Connection::open(dir.join("jobs.db")).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn
}

/// The job row: (status, sends, sent_by, last_fence).
fn job(conn: &Connection) -> (String, i32, Option<i64>, i64) {
    conn.query_row(
        "SELECT status, sends, sent_by, last_fence FROM invoice_jobs WHERE job_id = ?1",
        [JOB],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )
    .unwrap()
}

fn send(fence: &i64) -> Update<'_> {
    Update::new().set_sql("sends", r#""sends" + 1"#).set("sent_by", fence)
}

fn assert_stale<T: std::fmt::Debug>(result: Result<T, Error>, fence: u64, newer: u64) {
    match result {
        Err(Error::Stale { resource, fence: f, last_fence }) => {
            assert_eq!((resource.as_str(), f, last_fence), ("invoice_jobs", fence, Some(newer)));
        }
        other => panic!("expected Stale for fence {fence} under {newer}, got {other:?}"),
    }
}

#[test]
fn a_stale_holders_claim_and_write_are_refused_after_a_newer_holder_claimed_the_row() {
    let (refusals, _recorder) = local_recorder();
    let dir = tempfile::tempdir().unwrap();
    let mut conn = with_jobs(dir.path());
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
    let (status, sends): (String, i32) =
        sqlite::claim(&tx, &jobs(), &JOB, 8, &["status", "sends"], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
    assert_eq!((status.as_str(), sends), ("PENDING", 0));
    tx.commit().unwrap();

    assert_stale(sqlite::write(&conn, &jobs(), &JOB, 7, &send(&7)), 7, 8);
    assert_stale(sqlite::claim(&conn, &jobs(), &JOB, 7, &[], |r| r.get::<_, i64>(0)), 7, 8);
    assert_eq!(job(&conn), ("PENDING".to_owned(), 0, None, 8));
    assert_eq!(refusals.counts("invoice_jobs"), (2, 2));
    assert_eq!(sqlite::write(&conn, &jobs(), &JOB, 8, &send(&8)).unwrap(), Written::Applied(()));
    assert_eq!(job(&conn), ("PENDING".to_owned(), 1, Some(8), 8));
}

#[test]
fn a_stale_write_before_the_new_holders_first_write_is_accepted_without_a_claim_and_refused_with_one() {
    let (refusals, _recorder) = local_recorder();
    let dir = tempfile::tempdir().unwrap();
    let mut conn = with_jobs(dir.path());
    // Without claiming: B (8) reads, A's stale write (7) lands, B sends from what it read.
    let read: i32 =
        conn.query_row("SELECT sends FROM invoice_jobs WHERE job_id = ?1", [JOB], |r| r.get(0)).unwrap();
    assert_eq!(read, 0);
    assert_eq!(sqlite::write(&conn, &jobs(), &JOB, 7, &send(&7)).unwrap(), Written::Applied(()));
    assert_eq!(sqlite::write(&conn, &jobs(), &JOB, 8, &send(&8)).unwrap(), Written::Applied(()));
    assert_eq!(job(&conn).1, 2, "the invoice went twice");

    // With claiming: refused although it arrives before B's first write.
    conn.execute("UPDATE invoice_jobs SET sends = 0, sent_by = NULL, last_fence = 0", []).unwrap();
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
    let sends: i32 = sqlite::claim(&tx, &jobs(), &JOB, 8, &["sends"], |r| r.get(0)).unwrap();
    tx.commit().unwrap();
    assert_eq!(sends, 0);
    assert_stale(sqlite::write(&conn, &jobs(), &JOB, 7, &send(&7)), 7, 8);
    assert_eq!(sqlite::write(&conn, &jobs(), &JOB, 8, &send(&8)).unwrap(), Written::Applied(()));
    assert_eq!(job(&conn), ("PENDING".to_owned(), 1, Some(8), 8));
    assert_eq!(refusals.counts("invoice_jobs"), (1, 1));
}

#[test]
fn one_holder_writes_three_times_with_one_fence() {
    let (refusals, _recorder) = local_recorder();
    let dir = tempfile::tempdir().unwrap();
    let mut conn = with_jobs(dir.path());
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
    sqlite::claim(&tx, &jobs(), &JOB, 9, &[], |r| r.get::<_, i64>(0)).unwrap();
    assert_eq!(sqlite::write(&tx, &jobs(), &JOB, 9, &send(&9)).unwrap(), Written::Applied(()));
    tx.commit().unwrap();
    assert_eq!(sqlite::write(&conn, &jobs(), &JOB, 9, &send(&9)).unwrap(), Written::Applied(()));
    let third = sqlite::write_returning(&conn, &jobs(), &JOB, 9, &send(&9), &["sends", "last_fence"], |r| {
        Ok((r.get::<_, i32>(0)?, r.get::<_, i64>(1)?))
    })
    .unwrap();
    assert_eq!(third, Written::Applied((3, 9)));
    assert_eq!(refusals.counts("invoice_jobs").1, 0);
    assert_stale(sqlite::write(&conn, &jobs(), &JOB, 8, &send(&8)), 8, 9);
    assert_eq!(sqlite::write(&conn, &jobs(), &JOB, 10, &send(&10)).unwrap(), Written::Applied(()));
    assert_eq!(job(&conn), ("PENDING".to_owned(), 4, Some(10), 10));
}

#[test]
fn a_state_precondition_that_does_not_hold_writes_nothing_and_is_not_a_stale_refusal() {
    let (refusals, _recorder) = local_recorder();
    let dir = tempfile::tempdir().unwrap();
    let conn = with_jobs(dir.path());
    let to_sent = || Update::new().set("status", &"SENT").when("status", &"PENDING");
    assert_eq!(sqlite::write(&conn, &jobs(), &JOB, 5, &to_sent()).unwrap(), Written::Applied(()));
    assert_eq!(sqlite::write(&conn, &jobs(), &JOB, 6, &to_sent()).unwrap(), Written::PreconditionFailed);
    assert_eq!(job(&conn), ("SENT".to_owned(), 0, None, 5));
    assert_stale(sqlite::write(&conn, &jobs(), &JOB, 4, &to_sent()), 4, 5);
    let any_of = Update::new().set("status", &"DONE").when_in("status", &[&"PENDING", &"SENT"]);
    assert_eq!(sqlite::write(&conn, &jobs(), &JOB, 5, &any_of).unwrap(), Written::Applied(()));
    assert_eq!(refusals.counts("invoice_jobs"), (1, 1));
}

/// SQLite's one writer: while the newer holder's claiming transaction holds the write lock,
/// the stale holder's write waits (busy timeout); once the claim commits, it is refused.
#[test]
fn a_write_waiting_on_a_newer_claims_write_lock_is_refused_when_it_commits() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = with_jobs(dir.path());
    let path = dir.path().to_owned();
    let tx = b.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
    sqlite::claim(&tx, &jobs(), &JOB, 8, &[], |r| r.get::<_, i64>(0)).unwrap();
    let stale = std::thread::spawn(move || {
        let (refusals, _recorder) = local_recorder();
        let a = open(&path);
        let started = std::time::Instant::now();
        let result = sqlite::write(&a, &jobs(), &JOB, 7, &send(&7));
        (result.map_err(|e| e.to_string()), started.elapsed(), refusals.counts("invoice_jobs"))
    });
    std::thread::sleep(Duration::from_millis(300));
    tx.commit().unwrap();
    let (result, waited, counted) = stale.join().unwrap();
    assert!(waited >= Duration::from_millis(250), "the stale write waited for the lock: {waited:?}");
    let err = result.unwrap_err();
    assert!(err.contains("stale fence 7") && err.contains("fence 8"), "{err}");
    assert_eq!(counted, (1, 1));
    assert_eq!(job(&b), ("PENDING".to_owned(), 0, None, 8));
}

#[test]
fn bad_fences_missing_rows_hostile_values_and_names() {
    let (refusals, _recorder) = local_recorder();
    let dir = tempfile::tempdir().unwrap();
    let conn = with_jobs(dir.path());
    for fence in [0, u64::MAX, i64::MAX as u64 + 1] {
        assert!(
            matches!(sqlite::write(&conn, &jobs(), &JOB, fence, &send(&1)), Err(Error::InvalidFence(f)) if f == fence)
        );
    }
    assert_eq!(
        sqlite::write(&conn, &jobs(), &JOB, i64::MAX as u64, &Update::new()).unwrap(),
        Written::Applied(())
    );
    assert_eq!(job(&conn).3, i64::MAX);
    conn.execute("UPDATE invoice_jobs SET last_fence = 0", []).unwrap();
    assert!(matches!(
        sqlite::claim(&conn, &jobs(), &73, 5, &[], |r| r.get::<_, i64>(0)),
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(sqlite::write(&conn, &jobs(), &73, 5, &send(&5)), Err(Error::NotFound { .. })));

    let hostile = "x'); DROP TABLE invoice_jobs; --";
    assert_eq!(
        sqlite::write(&conn, &jobs(), &JOB, 5, &Update::new().set("status", &hostile)).unwrap(),
        Written::Applied(())
    );
    assert_eq!(job(&conn).0, hostile);
    assert!(matches!(
        sqlite::write(&conn, &jobs(), &JOB, 5, &Update::new().set("status\" = 'x', sends = 99 --", &"y")),
        Err(Error::UnknownColumn { .. })
    ));
    assert_eq!(job(&conn).1, 0);

    // Quoted names end to end, and the schema step twice.
    let (table, id, fence) = (r#"we"ird jobs"#, "Job Id", r#"last "fence""#);
    let q = |name| quote_identifier(name).unwrap();
    conn.execute_batch(&format!(
        "CREATE TABLE {} ({} TEXT PRIMARY KEY, note TEXT); INSERT INTO {0} VALUES ('a', NULL)",
        q(table),
        q(id)
    ))
    .unwrap();
    let weird = Table::new(table).id_column(id).fence_column(fence).resource_label("weird");
    sqlite::add_fence_column(&conn, &weird).unwrap();
    sqlite::add_fence_column(&conn, &weird).unwrap();
    sqlite::claim(&conn, &weird, &"a", 3, &[], |r| r.get::<_, i64>(0)).unwrap();
    assert!(sqlite::write(&conn, &weird, &"a", 2, &Update::new().set("note", &"late"))
        .unwrap_err()
        .is_stale());
    assert_eq!(
        sqlite::write(&conn, &weird, &"a", 3, &Update::new().set("note", &"hi")).unwrap(),
        Written::Applied(())
    );
    let row: (String, i64) = conn
        .query_row(&format!("SELECT note, {} FROM {}", q(fence), q(table)), [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(row, ("hi".to_owned(), 3));
    assert_eq!(refusals.counts("weird"), (1, 1));
    assert_eq!(refusals.counts("invoice_jobs").0, 0);
}

/// SQLite reads a double-quoted name that matches no column as a string literal: a misspelled
/// name would come back as its own text, make a precondition never hold, or write and return
/// the text. Every name the caller gives is checked against the table first.
#[test]
fn a_name_that_matches_no_column_is_an_error_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let conn = with_jobs(dir.path());
    let unknown = |result: Result<(), Error>, name: &str| match result {
        Err(Error::UnknownColumn { table, column }) => {
            assert_eq!((table.as_str(), column.as_str()), ("invoice_jobs", name))
        }
        other => panic!("expected UnknownColumn {name:?}, got {other:?}"),
    };
    let text = |r: &rusqlite::Row<'_>| r.get::<_, rusqlite::types::Value>(0);
    unknown(sqlite::claim(&conn, &jobs(), &JOB, 5, &["stauts"], text).map(drop), "stauts");
    let typo = Update::new().set("status", &"SENT").when("stauts", &"PENDING");
    unknown(sqlite::write(&conn, &jobs(), &JOB, 5, &typo).map(drop), "stauts");
    unknown(sqlite::write_returning(&conn, &jobs(), &JOB, 5, &send(&5), &["vv"], text).map(drop), "vv");
    unknown(
        sqlite::write(&conn, &jobs(), &JOB, 5, &Update::new().set("stauts", &"SENT")).map(drop),
        "stauts",
    );
    let one_of = Update::new().set("status", &"SENT").when_in("stauts", &[&"PENDING"]);
    unknown(sqlite::write(&conn, &jobs(), &JOB, 5, &one_of).map(drop), "stauts");
    unknown(
        sqlite::write(&conn, &jobs(), &JOB, 5, &Update::new().when_in("stauts", &[])).map(drop),
        "stauts",
    );
    let id_typo = Table::new("invoice_jobs").id_column("jobid");
    unknown(sqlite::claim(&conn, &id_typo, &"jobid", 5, &[], text).map(drop), "jobid");
    unknown(sqlite::write(&conn, &id_typo, &"jobid", 5, &Update::new()).map(drop), "jobid");
    let fence_typo = jobs().fence_column("last_fnce");
    unknown(sqlite::claim(&conn, &fence_typo, &JOB, 5, &[], text).map(drop), "last_fnce");
    assert_eq!(job(&conn), ("PENDING".to_owned(), 0, None, 0), "nothing was written");

    // SQLite's own rules still hold: names match whatever their case, and a table with a rowid
    // has `rowid` (a WITHOUT ROWID table has none: refused too).
    let (status, rowid): (String, i64) =
        sqlite::claim(&conn, &jobs(), &JOB, 5, &["STATUS", "rowid"], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
    assert_eq!((status.as_str(), rowid), ("PENDING", 1));
    sqlite::claim(&conn, &Table::new("invoice_jobs").id_column("_rowid_"), &1, 6, &[], text).unwrap();
    conn.execute_batch(
        "CREATE TABLE kv (k TEXT PRIMARY KEY, last_fence INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
         INSERT INTO kv (k) VALUES ('a')",
    )
    .unwrap();
    let kv = Table::new("kv").id_column("k");
    assert!(matches!(
        sqlite::claim(&conn, &kv, &"a", 5, &["rowid"], text),
        Err(Error::UnknownColumn { ref column, .. }) if column == "rowid"
    ));
    sqlite::claim(&conn, &kv, &"a", 5, &["k"], text).unwrap();
}

/// A fence column added by hand may allow NULL (`add_fence_column` leaves an existing column
/// as it is): a NULL fence compares with nothing, so the statements match no row; that is its
/// own error, not a missing row, and nothing is written.
#[test]
fn a_null_fence_is_an_error_of_its_own_and_nothing_is_written() {
    let (refusals, _recorder) = local_recorder();
    let dir = tempfile::tempdir().unwrap();
    let conn = open(dir.path());
    conn.execute_batch(
        "CREATE TABLE loose_jobs (
             job_id INTEGER PRIMARY KEY, status TEXT NOT NULL DEFAULT 'PENDING', last_fence INTEGER
         );
         INSERT INTO loose_jobs (job_id) VALUES (72)",
    )
    .unwrap();
    let loose = Table::new("loose_jobs").id_column("job_id");
    sqlite::add_fence_column(&conn, &loose).unwrap();
    let null_fence = |result: Result<(), Error>| match result {
        Err(Error::NullFence { table, column }) => {
            assert_eq!((table.as_str(), column.as_str()), ("loose_jobs", "last_fence"))
        }
        other => panic!("expected NullFence, got {other:?}"),
    };
    null_fence(sqlite::claim(&conn, &loose, &JOB, 5, &["status"], |r| r.get::<_, String>(0)).map(drop));
    null_fence(sqlite::write(&conn, &loose, &JOB, 5, &Update::new().set("status", &"SENT")).map(drop));
    let sent = Update::new().set("status", &"SENT").when("status", &"PENDING");
    null_fence(sqlite::write(&conn, &loose, &JOB, 5, &sent).map(drop));
    null_fence(
        sqlite::write_returning(&conn, &loose, &JOB, 5, &sent, &["status"], |r| r.get::<_, String>(0))
            .map(drop),
    );
    let row: (String, Option<i64>) = conn
        .query_row("SELECT status, last_fence FROM loose_jobs", [], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap();
    assert_eq!(row, ("PENDING".to_owned(), None));
    assert_eq!(refusals.counts("loose_jobs"), (0, 0), "not a stale refusal");
    assert!(matches!(
        sqlite::claim(&conn, &loose, &73, 5, &[], |r| r.get::<_, i64>(0)),
        Err(Error::NotFound { .. })
    ));
}
