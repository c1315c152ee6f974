//! The guard on a real PostgreSQL (started by the harness): the lesson's orderings, one
//! holder's many writes, the check-then-write guard that loses under READ COMMITTED next to
//! the one-statement guard that does not, REPEATABLE READ and SERIALIZABLE retries, and bad
//! inputs. Fences are literal here (the ordering is the point); `race.rs` and `payout.rs`
//! take them from real leases.

mod support;

use std::time::Duration;

use fencedlock_guard::postgres::{self, Update};
use fencedlock_guard::{quote_identifier, Error, Table, Written};
use harness::Postgres;
use support::{connect, jobs, local_recorder, JOB, JOBS_DDL};
use tokio_postgres::IsolationLevel;

/// A server with the lesson's table, one PENDING job, and the fence column added by the
/// schema helper.
async fn with_jobs() -> (Postgres, tokio_postgres::Client) {
    let pg = Postgres::start();
    let client = connect(&pg).await;
    client.batch_execute(JOBS_DDL).await.unwrap();
    client.execute("INSERT INTO invoice_jobs (job_id) VALUES ($1)", &[&JOB]).await.unwrap();
    postgres::add_fence_column(&client, &jobs()).await.unwrap();
    (pg, client)
}

/// The job row: (status, sends, sent_by, last_fence).
async fn job(client: &tokio_postgres::Client) -> (String, i32, Option<i64>, i64) {
    let row = client
        .query_one("SELECT status, sends, sent_by, last_fence FROM invoice_jobs WHERE job_id = $1", &[&JOB])
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

/// "Send the invoice": one more send, by this fence.
fn send(fence: &i64) -> Update<'_> {
    Update::new().set_sql("sends", r#""sends" + 1"#).set("sent_by", fence)
}

fn assert_stale(result: Result<impl std::fmt::Debug, Error>, fence: u64, newer: u64) {
    match result {
        Err(Error::Stale { resource, fence: f, last_fence }) => {
            assert_eq!((resource.as_str(), f, last_fence), ("invoice_jobs", fence, Some(newer)));
        }
        other => panic!("expected Stale for fence {fence} under {newer}, got {other:?}"),
    }
}

#[tokio::test]
async fn a_stale_holders_claim_and_write_are_refused_after_a_newer_holder_claimed_the_row() {
    let (refusals, _recorder) = local_recorder();
    let (_pg, mut client) = with_jobs().await;
    let tx = client.transaction().await.unwrap();
    let row = postgres::claim(&tx, &jobs(), &JOB, 8, &["status", "sends"]).await.unwrap();
    assert_eq!((row.get::<_, String>(0), row.get::<_, i32>(1)), ("PENDING".to_owned(), 0));
    tx.commit().await.unwrap();

    // The holder with fence 7 wakes up and writes: refused, and the row is untouched.
    assert_stale(postgres::write(&client, &jobs(), &JOB, 7, &send(&7)).await, 7, 8);
    assert_stale(postgres::claim(&client, &jobs(), &JOB, 7, &[]).await, 7, 8);
    assert_eq!(job(&client).await, ("PENDING".to_owned(), 0, None, 8));
    assert_eq!(refusals.counts("invoice_jobs"), (2, 2), "each refusal counted once, under its resource");

    // The newer holder's own write goes through.
    assert_eq!(postgres::write(&client, &jobs(), &JOB, 8, &send(&8)).await.unwrap(), Written::Applied(()));
    assert_eq!(job(&client).await, ("PENDING".to_owned(), 1, Some(8), 8));
    assert_eq!(refusals.counts("invoice_jobs"), (2, 2));
}

/// The lesson's second ordering: the stale write lands after the new holder read the row and
/// before its first write.
#[tokio::test]
async fn a_stale_write_before_the_new_holders_first_write_is_accepted_without_a_claim_and_refused_with_one() {
    let (refusals, _recorder) = local_recorder();
    let (_pg, mut client) = with_jobs().await;

    // Without claiming: B (8) reads; A's stale write (7) finds nothing newer and lands; B then
    // sends from what it read. Two sends: what the claim is for.
    let read: i32 =
        client.query_one("SELECT sends FROM invoice_jobs WHERE job_id = $1", &[&JOB]).await.unwrap().get(0);
    assert_eq!(read, 0);
    assert_eq!(postgres::write(&client, &jobs(), &JOB, 7, &send(&7)).await.unwrap(), Written::Applied(()));
    assert_eq!(postgres::write(&client, &jobs(), &JOB, 8, &send(&8)).await.unwrap(), Written::Applied(()));
    assert_eq!(job(&client).await, ("PENDING".to_owned(), 2, Some(8), 8));
    assert_eq!(refusals.counts("invoice_jobs").1, 0);

    // With claiming: B's claim raises the fence in the statement that reads; A's write is
    // refused although it still arrives before B's first write.
    client.execute("UPDATE invoice_jobs SET sends = 0, sent_by = NULL, last_fence = 0", &[]).await.unwrap();
    let tx = client.transaction().await.unwrap();
    let sends: i32 = postgres::claim(&tx, &jobs(), &JOB, 8, &["sends"]).await.unwrap().get(0);
    assert_eq!(sends, 0);
    tx.commit().await.unwrap();
    assert_stale(postgres::write(&client, &jobs(), &JOB, 7, &send(&7)).await, 7, 8);
    assert_eq!(postgres::write(&client, &jobs(), &JOB, 8, &send(&8)).await.unwrap(), Written::Applied(()));
    assert_eq!(job(&client).await, ("PENDING".to_owned(), 1, Some(8), 8));
    assert_eq!(refusals.counts("invoice_jobs"), (1, 1));
}

#[tokio::test]
async fn one_holder_writes_three_times_with_one_fence() {
    let (refusals, _recorder) = local_recorder();
    let (_pg, mut client) = with_jobs().await;
    let tx = client.transaction().await.unwrap();
    postgres::claim(&tx, &jobs(), &JOB, 9, &[]).await.unwrap();
    assert_eq!(postgres::write(&tx, &jobs(), &JOB, 9, &send(&9)).await.unwrap(), Written::Applied(()));
    tx.commit().await.unwrap();
    // Two more, in their own transactions, one of them returning the row.
    assert_eq!(postgres::write(&client, &jobs(), &JOB, 9, &send(&9)).await.unwrap(), Written::Applied(()));
    let written = postgres::write_returning(&client, &jobs(), &JOB, 9, &send(&9), &["sends", "last_fence"])
        .await
        .unwrap();
    let Written::Applied(row) = written else { panic!("third write not applied: {written:?}") };
    assert_eq!((row.get::<_, i32>(0), row.get::<_, i64>(1)), (3, 9));
    assert_eq!(job(&client).await, ("PENDING".to_owned(), 3, Some(9), 9));
    assert_eq!(refusals.counts("invoice_jobs").1, 0, "a holder's own writes are never refused");
    // An older fence still is; a newer one takes over without claiming.
    assert_stale(postgres::write(&client, &jobs(), &JOB, 8, &send(&8)).await, 8, 9);
    assert_eq!(postgres::write(&client, &jobs(), &JOB, 10, &send(&10)).await.unwrap(), Written::Applied(()));
    assert_eq!(job(&client).await.1, 4);
}

#[tokio::test]
async fn a_state_precondition_that_does_not_hold_writes_nothing_and_is_not_a_stale_refusal() {
    let (refusals, _recorder) = local_recorder();
    let (_pg, client) = with_jobs().await;
    let to_sent = || Update::new().set("status", &"SENT").when("status", &"PENDING");
    assert_eq!(postgres::write(&client, &jobs(), &JOB, 5, &to_sent()).await.unwrap(), Written::Applied(()));
    // SENT → SENT again, by the same or a newer holder: the state machine says no.
    assert_eq!(
        postgres::write(&client, &jobs(), &JOB, 5, &to_sent()).await.unwrap(),
        Written::PreconditionFailed
    );
    assert_eq!(
        postgres::write(&client, &jobs(), &JOB, 6, &to_sent()).await.unwrap(),
        Written::PreconditionFailed
    );
    assert_eq!(job(&client).await, ("SENT".to_owned(), 0, None, 5), "the failed precondition wrote no fence");
    // A stale fence is still Stale when the precondition fails too: the fence is checked first.
    assert_stale(postgres::write(&client, &jobs(), &JOB, 4, &to_sent()).await, 4, 5);
    let any_of = Update::new().set("status", &"DONE").when_in("status", &[&"PENDING", &"SENT"]);
    assert_eq!(postgres::write(&client, &jobs(), &JOB, 5, &any_of).await.unwrap(), Written::Applied(()));
    assert_eq!(refusals.counts("invoice_jobs"), (1, 1));
}

/// macro#6026's guard: check the fence with a SELECT (or EXISTS), then UPDATE. Under READ
/// COMMITTED the newer holder's claim commits between the two and the stale write lands. The
/// same interleaving with the guard in the UPDATE is refused.
#[tokio::test]
async fn the_check_then_write_guard_loses_under_read_committed_and_the_one_statement_guard_does_not() {
    let (refusals, _recorder) = local_recorder();
    let (pg, mut a) = with_jobs().await;
    let mut b = connect(&pg).await;
    client_claims(&a, 6).await;

    // Naive A (fence 7): the check passes...
    let tx_a = a.build_transaction().isolation_level(IsolationLevel::ReadCommitted).start().await.unwrap();
    let current: bool = tx_a
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM invoice_jobs WHERE job_id = $1 AND last_fence <= $2)",
            &[&JOB, &7_i64],
        )
        .await
        .unwrap()
        .get(0);
    assert!(current);
    // ...B (fence 8) claims and commits in between...
    let tx_b = b.transaction().await.unwrap();
    postgres::claim(&tx_b, &jobs(), &JOB, 8, &[]).await.unwrap();
    tx_b.commit().await.unwrap();
    // ...and A's write lands over B's claim.
    let changed = tx_a
        .execute("UPDATE invoice_jobs SET sends = sends + 1, sent_by = $2 WHERE job_id = $1", &[&JOB, &7_i64])
        .await
        .unwrap();
    tx_a.commit().await.unwrap();
    assert_eq!(changed, 1);
    let (_, sends, sent_by, last_fence) = job(&a).await;
    assert_eq!((sends, sent_by, last_fence), (1, Some(7), 8), "the naive guard let fence 7 write under 8");

    // The same interleaving through the guard.
    client_reset(&a).await;
    client_claims(&a, 6).await;
    let tx_a = a.build_transaction().isolation_level(IsolationLevel::ReadCommitted).start().await.unwrap();
    let sends: i32 = postgres::claim(&tx_a, &jobs(), &JOB, 7, &["sends"]).await.unwrap().get(0);
    assert_eq!(sends, 0);
    tx_a.commit().await.unwrap();
    let tx_b = b.transaction().await.unwrap();
    postgres::claim(&tx_b, &jobs(), &JOB, 8, &[]).await.unwrap();
    tx_b.commit().await.unwrap();
    let tx_a = a.build_transaction().isolation_level(IsolationLevel::ReadCommitted).start().await.unwrap();
    assert_stale(postgres::write(&tx_a, &jobs(), &JOB, 7, &send(&7)).await, 7, 8);
    tx_a.commit().await.unwrap();
    assert_eq!(job(&a).await, ("PENDING".to_owned(), 0, None, 8));
    assert_eq!(refusals.counts("invoice_jobs"), (1, 1));
}

/// The interleaving where the statement itself must wait: B has claimed but not committed, so
/// it holds the row; A's guarded write blocks on the row lock. When B commits, PostgreSQL
/// re-evaluates A's condition on B's row version (READ COMMITTED): refused. When B rolls
/// back instead, A's write is current and lands.
#[tokio::test]
async fn under_read_committed_a_write_waiting_on_a_newer_claim_is_refused_when_the_claim_commits() {
    let (refusals, _recorder) = local_recorder();
    let (pg, mut b) = with_jobs().await;
    let a = connect(&pg).await;
    let watcher = connect(&pg).await;
    client_claims(&a, 6).await;

    for commit in [true, false] {
        let tx_b = b.transaction().await.unwrap();
        postgres::claim(&tx_b, &jobs(), &JOB, 8, &[]).await.unwrap();
        let (table, update) = (jobs(), send(&7));
        let write_a = postgres::write(&a, &table, &JOB, 7, &update);
        tokio::pin!(write_a);
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut write_a).await.is_err(),
            "A's write must wait for B's row lock"
        );
        let waiting: i64 = watcher
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE%'", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(waiting, 1, "A's UPDATE is the one waiting on a lock");
        if commit {
            tx_b.commit().await.unwrap();
            assert_stale(write_a.await, 7, 8);
            assert_eq!(job(&a).await, ("PENDING".to_owned(), 0, None, 8));
            client_reset(&a).await;
            client_claims(&a, 6).await;
        } else {
            tx_b.rollback().await.unwrap();
            assert_eq!(write_a.await.unwrap(), Written::Applied(()));
            assert_eq!(job(&a).await, ("PENDING".to_owned(), 1, Some(7), 7));
        }
    }
    assert_eq!(refusals.counts("invoice_jobs"), (1, 1));
}

/// Under REPEATABLE READ and SERIALIZABLE the stale write does not wait and re-check: it
/// fails with a serialization failure, which is the caller's retry; the retry is refused.
#[tokio::test]
async fn under_repeatable_read_and_serializable_a_concurrent_claim_is_a_retry_and_the_retry_is_stale() {
    let (refusals, _recorder) = local_recorder();
    let (pg, mut a) = with_jobs().await;
    let mut b = connect(&pg).await;
    for (round, level) in
        [IsolationLevel::RepeatableRead, IsolationLevel::Serializable].into_iter().enumerate()
    {
        let (old, new) = (10 * (round as u64 + 1) + 7, 10 * (round as u64 + 1) + 8);
        let old_sql = old as i64;
        let tx_a = a.build_transaction().isolation_level(level).start().await.unwrap();
        // A's snapshot: it reads the job...
        let _: i32 =
            tx_a.query_one("SELECT sends FROM invoice_jobs WHERE job_id = $1", &[&JOB]).await.unwrap().get(0);
        // ...B claims and commits...
        let tx_b = b.transaction().await.unwrap();
        postgres::claim(&tx_b, &jobs(), &JOB, new, &[]).await.unwrap();
        tx_b.commit().await.unwrap();
        // ...A's write cannot serialize after B's.
        let err = postgres::write(&tx_a, &jobs(), &JOB, old, &send(&old_sql)).await.unwrap_err();
        assert!(err.is_retryable() && !err.is_stale(), "{level:?}: {err}");
        tx_a.rollback().await.unwrap();
        // The retry, from the top: stale.
        let tx_a = a.build_transaction().isolation_level(level).start().await.unwrap();
        assert_stale(postgres::claim(&tx_a, &jobs(), &JOB, old, &[]).await, old, new);
        tx_a.rollback().await.unwrap();
    }
    assert_eq!(job(&a).await.1, 0, "no stale send landed");
    assert_eq!(refusals.counts("invoice_jobs"), (2, 2), "the serialization failures are not refusals");
}

#[tokio::test]
async fn bad_fences_missing_rows_and_hostile_values_change_nothing() {
    let (refusals, _recorder) = local_recorder();
    let (_pg, client) = with_jobs().await;
    for fence in [0, u64::MAX, i64::MAX as u64 + 1] {
        assert!(
            matches!(postgres::claim(&client, &jobs(), &JOB, fence, &[]).await, Err(Error::InvalidFence(f)) if f == fence)
        );
        assert!(matches!(
            postgres::write(&client, &jobs(), &JOB, fence, &send(&1)).await,
            Err(Error::InvalidFence(_))
        ));
    }
    // The largest fence the module hands out is stored exactly.
    assert_eq!(
        postgres::write(&client, &jobs(), &JOB, i64::MAX as u64, &Update::new()).await.unwrap(),
        Written::Applied(())
    );
    assert_eq!(job(&client).await.3, i64::MAX);
    client.execute("UPDATE invoice_jobs SET last_fence = 0", &[]).await.unwrap();

    assert!(matches!(postgres::claim(&client, &jobs(), &73_i64, 5, &[]).await, Err(Error::NotFound { .. })));
    assert!(matches!(
        postgres::write(&client, &jobs(), &73_i64, 5, &send(&5)).await,
        Err(Error::NotFound { .. })
    ));
    let status = Update::new().set("status", &"SENT").when("status", &"PENDING");
    assert!(matches!(
        postgres::write(&client, &jobs(), &73_i64, 5, &status).await,
        Err(Error::NotFound { .. })
    ));
    // A wrongly typed id is the driver's error, before anything runs.
    assert!(matches!(postgres::claim(&client, &jobs(), &"72", 5, &[]).await, Err(Error::Postgres(_))));

    // A value that looks like SQL is a value.
    let hostile = "x'; DROP TABLE invoice_jobs; --";
    let update = Update::new().set("status", &hostile);
    assert_eq!(postgres::write(&client, &jobs(), &JOB, 5, &update).await.unwrap(), Written::Applied(()));
    assert_eq!(job(&client).await.0, hostile);
    // A column that does not exist is PostgreSQL's error, not an injection.
    let bad_column = Update::new().set("status\" = 'x', sends = 99 --", &"y");
    assert!(matches!(postgres::write(&client, &jobs(), &JOB, 5, &bad_column).await, Err(Error::Postgres(_))));
    assert!(matches!(
        postgres::write(&client, &jobs(), &JOB, 5, &Update::new().set("", &"y")).await,
        Err(Error::Identifier { .. })
    ));
    assert_eq!(job(&client).await.1, 0);
    assert_eq!(refusals.counts("invoice_jobs").1, 0, "none of these is a stale refusal");
}

/// Names with quotes, spaces and capitals, in a schema: quoted end to end, and the resource
/// label the refusals are counted under.
#[tokio::test]
async fn any_table_and_column_name_works_quoted_and_the_schema_step_is_idempotent() {
    let (refusals, _recorder) = local_recorder();
    let pg = Postgres::start();
    let client = connect(&pg).await;
    let (schema, table, id, fence) = ("Billing Dept", r#"we"ird jobs"#, "Job Id", r#"last "fence""#);
    let q = |name| quote_identifier(name).unwrap();
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {s}; CREATE TABLE {s}.{t} ({i} text PRIMARY KEY, note text); INSERT INTO {s}.{t} VALUES ('a', NULL), ('b', NULL)",
            s = q(schema),
            t = q(table),
            i = q(id)
        ))
        .await
        .unwrap();
    let weird = Table::new(table).schema(schema).id_column(id).fence_column(fence).resource_label("weird");
    postgres::add_fence_column(&client, &weird).await.unwrap();
    postgres::add_fence_column(&client, &weird).await.unwrap();
    let fences: String =
        pg.psql(&format!("SELECT string_agg({}::text, ',') FROM {}.{}", q(fence), q(schema), q(table)));
    assert_eq!(fences, "0,0", "existing rows start below every fence");

    postgres::claim(&client, &weird, &"a", 3, &[]).await.unwrap();
    let note = Update::new().set("note", &"hello");
    assert!(
        matches!(postgres::write(&client, &weird, &"a", 2, &note).await, Err(Error::Stale { ref resource, .. }) if resource == "weird")
    );
    assert_eq!(postgres::write(&client, &weird, &"b", 2, &note).await.unwrap(), Written::Applied(()));
    let rows = pg.psql(&format!(
        "SELECT {i} || ':' || coalesce(note, '-') || ':' || {f} FROM {s}.{t} ORDER BY 1",
        i = q(id),
        f = q(fence),
        s = q(schema),
        t = q(table)
    ));
    assert_eq!(rows, "a:-:3\nb:hello:2");
    assert_eq!(refusals.counts("weird"), (1, 1));
}

async fn client_claims(client: &tokio_postgres::Client, fence: u64) {
    postgres::claim(client, &jobs(), &JOB, fence, &[]).await.unwrap();
}

async fn client_reset(client: &tokio_postgres::Client) {
    client
        .execute("UPDATE invoice_jobs SET status = 'PENDING', sends = 0, sent_by = NULL, last_fence = 0", &[])
        .await
        .unwrap();
}

/// A nullable fence column (`add_fence_column` leaves an existing column as it is) with a NULL
/// on the row: the statements match nothing, and the fence read finds the row with no fence.
/// Its own error, never a panic or a missing row; nothing is written.
#[tokio::test]
async fn a_null_fence_is_an_error_of_its_own_and_nothing_is_written() {
    let (refusals, _recorder) = local_recorder();
    let pg = Postgres::start();
    let client = connect(&pg).await;
    client
        .batch_execute(
            "CREATE TABLE loose_jobs (
                 job_id bigint PRIMARY KEY, status text NOT NULL DEFAULT 'PENDING', last_fence bigint
             );
             INSERT INTO loose_jobs (job_id) VALUES (72)",
        )
        .await
        .unwrap();
    let loose = Table::new("loose_jobs").id_column("job_id");
    postgres::add_fence_column(&client, &loose).await.unwrap();
    let null_fence = |result: Result<(), Error>| match result {
        Err(Error::NullFence { table, column }) => {
            assert_eq!((table.as_str(), column.as_str()), ("loose_jobs", "last_fence"))
        }
        other => panic!("expected NullFence, got {other:?}"),
    };
    null_fence(postgres::claim(&client, &loose, &JOB, 5, &["status"]).await.map(drop));
    null_fence(
        postgres::write(&client, &loose, &JOB, 5, &Update::new().set("status", &"SENT")).await.map(drop),
    );
    let sent = Update::new().set("status", &"SENT").when("status", &"PENDING");
    null_fence(postgres::write(&client, &loose, &JOB, 5, &sent).await.map(drop));
    null_fence(postgres::write_returning(&client, &loose, &JOB, 5, &sent, &["status"]).await.map(drop));
    assert_eq!(
        pg.psql("SELECT status || ':' || coalesce(last_fence::text, 'NULL') FROM loose_jobs"),
        "PENDING:NULL"
    );
    assert_eq!(refusals.counts("loose_jobs"), (0, 0), "not a stale refusal");
    assert!(matches!(postgres::claim(&client, &loose, &73_i64, 5, &[]).await, Err(Error::NotFound { .. })));
}
