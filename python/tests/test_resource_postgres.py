"""fencedlock.resource on a real PostgreSQL (started by the suite): the lesson's orderings, one
holder's many writes, a state precondition, the check-then-write guard that loses under READ
COMMITTED next to the one-statement guard that does not, a write waiting on a newer claim's
row lock, REPEATABLE READ and SERIALIZABLE retries, and bad inputs. Fences are literal here
(the ordering is the point); the race and payout tests take them from real leases."""

from __future__ import annotations

import threading
import time
from typing import Any, List

import psycopg
import pytest
from psycopg import IsolationLevel
from psycopg.rows import dict_row

from fencedlock import FencedLockError, InvalidArgument
from fencedlock.resource import (InvalidIdentifier, Stale, Table, Update, add_fence_column, claim, is_retryable, quote,
                                 write, write_returning)
from resource_support import (JOB, JOBS_DDL, LESSON_SCENARIOS, Refusals, Scenario, assert_a_null_fence_is_refused,
                              assert_bad_fences_missing_rows_and_sql_looking_values_change_nothing,
                              assert_stale, connect, job, jobs, query, reset, send)


@pytest.fixture
def conn(pg: str) -> Any:
    """The lesson's table with one PENDING job, the fence column added by the schema helper."""
    with connect(pg) as conn:
        conn.execute(JOBS_DDL.encode())
        conn.execute(b"INSERT INTO invoice_jobs (job_id) VALUES (%s)", (JOB,))
        add_fence_column(conn, jobs())
        yield conn


@pytest.mark.parametrize("scenario", LESSON_SCENARIOS, ids=lambda scenario: scenario.__name__)
def test_the_lessons_single_row_scenarios(
    conn: psycopg.Connection[Any], refusals: Refusals, scenario: Scenario
) -> None:
    scenario(conn, refusals)


def test_a_stale_refusal_leaves_the_transaction_usable_and_its_other_work_commits(
    conn: psycopg.Connection[Any], refusals: Refusals
) -> None:
    claim(conn, jobs(), JOB, 8)
    conn.execute(b"CREATE TABLE notes (note text)")
    with conn.transaction():
        with pytest.raises(Stale):
            write(conn, jobs(), JOB, 7, send(7))
        conn.execute(b"INSERT INTO notes VALUES ('abandoned job 72')")
    assert query(conn, "SELECT note FROM notes") == [("abandoned job 72",)]
    assert job(conn) == ("PENDING", 0, None, 8)


def test_rows_come_back_as_the_callers_row_factory_makes_them_and_its_cursor_keeps_its_results(
    pg: str, conn: psycopg.Connection[Any]
) -> None:
    with connect(pg, row_factory=dict_row) as dicts:
        assert claim(dicts, jobs(), JOB, 3, ["status", "sends"]) == {"status": "PENDING", "sends": 0}
    cursor = conn.cursor(row_factory=dict_row)
    cursor.execute(b"SELECT job_id FROM invoice_jobs")
    assert write_returning(cursor, jobs(), JOB, 3, send(3), ["sends"]) == {"sends": 1}
    assert claim(cursor, jobs(), JOB, 3) == {"last_fence": 3}
    assert cursor.fetchall() == [{"job_id": JOB}], "the caller's cursor still has its own result"


def test_the_check_then_write_guard_loses_under_read_committed_and_the_one_statement_guard_does_not(
    pg: str, conn: psycopg.Connection[Any], refusals: Refusals
) -> None:
    """macro#6026's guard: check the fence with a SELECT (or EXISTS), then UPDATE. Under READ
    COMMITTED the newer holder's claim commits between the two and the stale write lands. The
    same interleaving with the guard in the UPDATE is refused."""
    a, b = conn, connect(pg)
    a.isolation_level = IsolationLevel.READ_COMMITTED
    claim(a, jobs(), JOB, 6)

    # Naive A (fence 7): the check passes...
    with a.transaction():
        (current,) = query(a, "SELECT EXISTS (SELECT 1 FROM invoice_jobs WHERE job_id = ? AND last_fence <= ?)", JOB, 7)
        assert current == (True,)
        # ...B (fence 8) claims and commits in between...
        with b.transaction():
            claim(b, jobs(), JOB, 8)
        # ...and A's write lands over B's claim.
        query(a, "UPDATE invoice_jobs SET sends = sends + 1, sent_by = ? WHERE job_id = ?", 7, JOB)
    assert job(a)[1:] == (1, 7, 8), "the naive guard let fence 7 write under 8"

    # The same interleaving through the guard.
    reset(a)
    claim(a, jobs(), JOB, 6)
    with a.transaction():
        assert claim(a, jobs(), JOB, 7, "sends") == (0,)
    with b.transaction():
        claim(b, jobs(), JOB, 8)
    with a.transaction():
        with pytest.raises(Stale) as raised:
            write(a, jobs(), JOB, 7, send(7))
    assert_stale(raised, 7, 8)
    assert job(a) == ("PENDING", 0, None, 8)
    assert refusals.counts() == (1, 1)
    b.close()


def waiting_updates(conninfo: str) -> int:
    with connect(conninfo) as watcher:
        (row,) = query(watcher, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                "AND query LIKE 'UPDATE%'")
        return int(row[0])


@pytest.mark.parametrize("newer_commits", [True, False], ids=["commit", "rollback"])
def test_under_read_committed_a_write_waiting_on_a_newer_claim_is_refused_when_the_claim_commits(
    pg: str, conn: psycopg.Connection[Any], refusals: Refusals, newer_commits: bool
) -> None:
    """B has claimed but not committed, so it holds the row; A's guarded write waits on the
    row lock. When B commits, PostgreSQL re-evaluates A's condition on B's row version (READ
    COMMITTED): refused. When B rolls back instead, A's write is current and lands."""
    claim(conn, jobs(), JOB, 6)
    b = psycopg.connect(pg)  # not autocommit: the claim's transaction stays open
    outcome: List[Any] = []

    def write_a() -> None:
        with connect(pg) as a:
            try:
                outcome.append(write(a, jobs(), JOB, 7, send(7)))
            except FencedLockError as err:
                outcome.append(err)

    claim(b, jobs(), JOB, 8)
    writer = threading.Thread(target=write_a)
    writer.start()
    deadline = time.monotonic() + 10
    while waiting_updates(pg) == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert waiting_updates(pg) == 1 and writer.is_alive(), "A's UPDATE waits on B's row lock"
    if newer_commits:
        b.commit()
    else:
        b.rollback()
    writer.join(10)
    assert not writer.is_alive()
    if newer_commits:
        assert isinstance(outcome[0], Stale) and (outcome[0].fence, outcome[0].last_fence) == (7, 8)
        assert job(conn) == ("PENDING", 0, None, 8)
        assert refusals.counts() == (1, 1)
    else:
        assert outcome == [True]
        assert job(conn) == ("PENDING", 1, 7, 7)
        assert refusals.counts() == (0, 0)
    b.close()


@pytest.mark.parametrize("level", [IsolationLevel.REPEATABLE_READ, IsolationLevel.SERIALIZABLE])
def test_under_repeatable_read_and_serializable_a_concurrent_claim_is_a_retry_and_the_retry_is_stale(
    pg: str, conn: psycopg.Connection[Any], refusals: Refusals, level: IsolationLevel
) -> None:
    """The stale write does not wait and re-check: it fails with a serialization failure,
    which is the caller's retry; the retry is refused."""
    a, b = conn, connect(pg)
    a.isolation_level = level
    with pytest.raises(psycopg.errors.SerializationFailure) as failed:
        with a.transaction():
            # A's snapshot: it reads the job...
            query(a, "SELECT sends FROM invoice_jobs WHERE job_id = ?", JOB)
            # ...B claims and commits...
            with b.transaction():
                claim(b, jobs(), JOB, 18)
            # ...A's write cannot serialize after B's.
            write(a, jobs(), JOB, 17, send(17))
    assert is_retryable(failed.value)
    # The retry, from the top: stale.
    with a.transaction():
        with pytest.raises(Stale) as raised:
            claim(a, jobs(), JOB, 17)
    assert_stale(raised, 17, 18)
    assert job(a)[1] == 0, "no stale send landed"
    assert refusals.counts() == (1, 1), "the serialization failure is not a refusal"
    b.close()


def test_bad_fences_missing_rows_and_hostile_values_change_nothing(conn: psycopg.Connection[Any], refusals: Refusals) -> None:
    assert_bad_fences_missing_rows_and_sql_looking_values_change_nothing(conn)
    # An id of the wrong type is the database's error, and changes nothing.
    with pytest.raises(psycopg.errors.InvalidTextRepresentation):
        claim(conn, jobs(), "seventy-two", 5)
    # A column that does not exist is PostgreSQL's error, not an injection.
    with pytest.raises(psycopg.errors.UndefinedColumn):
        write(conn, jobs(), JOB, 5, Update(set={"status\" = 'x', sends = 99 --": "y"}))
    for bad in ("", "a\0b", "x" * 64):
        with pytest.raises(InvalidIdentifier):
            write(conn, jobs(), JOB, 5, Update(set={bad: "y"}))
        with pytest.raises(InvalidIdentifier):
            Table(bad)
    with pytest.raises(InvalidArgument):
        write_returning(conn, jobs(), JOB, 5, send(5), [])
    with pytest.raises(TypeError, match="sqlite3 connection or cursor, or a psycopg 3 one"):
        claim(object(), jobs(), JOB, 5)  # type: ignore[arg-type]
    assert job(conn)[1] == 0
    assert refusals.counts() == (0, 0), "none of these is a stale refusal"


def test_a_null_fence_is_an_error_of_its_own_and_nothing_is_written(
    conn: psycopg.Connection[Any], refusals: Refusals
) -> None:
    assert_a_null_fence_is_refused(conn, refusals)


def test_any_table_and_column_name_works_quoted_and_the_schema_step_is_idempotent(
    pg: str, refusals: Refusals
) -> None:
    schema, table, id_column, fence = "Billing Dept", 'we"ird jobs', "Job Id", 'last "fence"'
    with connect(pg) as conn:
        conn.execute(f"CREATE SCHEMA {quote(schema)}; CREATE TABLE {quote(schema)}.{quote(table)} "
                     f"({quote(id_column)} text PRIMARY KEY, note text); INSERT INTO {quote(schema)}.{quote(table)} "
                     "VALUES ('a', NULL), ('b', NULL)".encode())
        weird = Table(table, schema=schema, id_column=id_column, fence_column=fence, resource_label="weird")
        add_fence_column(conn, weird)
        add_fence_column(conn, weird)
        everything = f"SELECT * FROM {quote(schema)}.{quote(table)} ORDER BY 1"
        assert query(conn, everything) == [("a", None, 0), ("b", None, 0)], "existing rows start below every fence"

        claim(conn, weird, "a", 3)
        with pytest.raises(Stale) as raised:
            write(conn, weird, "a", 2, Update(set={"note": "hello"}))
        assert_stale(raised, 2, 3, resource="weird")
        assert write(conn, weird, "b", 2, Update(set={"note": "hello"})) is True
        assert query(conn, everything) == [("a", None, 3), ("b", "hello", 2)]
        assert refusals.counts("weird") == (1, 1)
        assert Table(table, schema=schema).resource == f"{schema}.{table}"
