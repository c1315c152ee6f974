"""fencedlock.resource on SQLite (a real database file, sqlite3): the lesson's orderings, one
holder's many writes, a state precondition, a stale write waiting on a newer claim's write
lock, the caller's row factory, an attached database, and bad inputs."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, List, Tuple

import pytest

from fencedlock import FencedLockError
from fencedlock.resource import (InvalidIdentifier, Stale, Table, UnknownColumn, Update, add_fence_column, claim,
                                 is_retryable, quote, write, write_returning)
from resource_support import (JOB, JOBS_DDL, LESSON_SCENARIOS, Refusals, Scenario, assert_a_null_fence_is_refused,
                              assert_bad_fences_missing_rows_and_sql_looking_values_change_nothing, job, jobs, query,
                              send)


def open_db(path: Path, **kwargs: Any) -> sqlite3.Connection:
    """Autocommit (each helper call outside ``BEGIN IMMEDIATE … COMMIT`` is a transaction of
    its own), WAL, and a busy timeout long enough to wait out another writer."""
    conn: sqlite3.Connection = sqlite3.connect(path, isolation_level=None, timeout=10, check_same_thread=False,
                                               **kwargs)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.db"
    with open_db(path) as conn:
        conn.execute(JOBS_DDL)
        conn.execute("INSERT INTO invoice_jobs (job_id) VALUES (?)", (JOB,))
        add_fence_column(conn, jobs())
    return path


@pytest.fixture
def conn(db: Path) -> Iterator[sqlite3.Connection]:
    conn = open_db(db)
    yield conn
    conn.close()


@pytest.mark.parametrize("scenario", LESSON_SCENARIOS, ids=lambda scenario: scenario.__name__)
def test_the_lessons_single_row_scenarios(
    conn: sqlite3.Connection, refusals: Refusals, scenario: Scenario
) -> None:
    scenario(conn, refusals)


def test_a_stale_write_waiting_on_a_newer_claims_write_lock_is_refused_when_it_commits(
    db: Path, conn: sqlite3.Connection, refusals: Refusals
) -> None:
    """SQLite runs one writer at a time: B's claim holds the write lock until B commits, A's
    guarded write waits (the busy timeout), then runs against B's committed fence."""
    claim(conn, jobs(), JOB, 6)
    b = open_db(db)
    b.execute("BEGIN IMMEDIATE")
    claim(b, jobs(), JOB, 8)
    outcome: List[Any] = []

    def write_a() -> None:
        a = open_db(db)
        try:
            outcome.append(write(a, jobs(), JOB, 7, send(7)))
        except FencedLockError as err:
            outcome.append(err)
        finally:
            a.close()

    writer = threading.Thread(target=write_a)
    writer.start()
    time.sleep(0.3)
    assert writer.is_alive() and not outcome, "A's write waits for B's write lock"
    b.execute("COMMIT")
    writer.join(10)
    assert isinstance(outcome[0], Stale) and (outcome[0].fence, outcome[0].last_fence) == (7, 8)
    assert job(conn) == ("PENDING", 0, None, 8)
    assert refusals.counts() == (1, 1)
    b.close()


def test_a_busy_database_is_the_callers_retry(db: Path, conn: sqlite3.Connection) -> None:
    b = open_db(db)
    b.execute("BEGIN IMMEDIATE")
    impatient = sqlite3.connect(db, isolation_level=None, timeout=0.05)
    with pytest.raises(sqlite3.OperationalError) as busy:
        write(impatient, jobs(), JOB, 7, send(7))
    assert is_retryable(busy.value)
    assert not is_retryable(sqlite3.OperationalError("no such table: x"))
    b.execute("ROLLBACK")
    impatient.close()
    b.close()


def test_rows_come_back_as_the_callers_row_factory_makes_them_and_its_cursor_keeps_its_results(
    db: Path, conn: sqlite3.Connection
) -> None:
    rows = open_db(db)
    rows.row_factory = sqlite3.Row
    row = claim(rows, jobs(), JOB, 3, ["status", "sends"])
    assert isinstance(row, sqlite3.Row) and (row["status"], row["sends"]) == ("PENDING", 0)
    cursor = conn.cursor()
    cursor.execute("SELECT job_id FROM invoice_jobs")
    assert write_returning(cursor, jobs(), JOB, 3, send(3), "sends") == (1,)
    assert cursor.fetchall() == [(JOB,)], "the caller's cursor still has its own result"
    rows.close()


def test_bad_inputs_hostile_values_and_names_in_an_attached_database(
    tmp_path: Path, conn: sqlite3.Connection, refusals: Refusals
) -> None:
    assert_bad_fences_missing_rows_and_sql_looking_values_change_nothing(conn)
    with pytest.raises(UnknownColumn):
        write(conn, jobs(), JOB, 5, Update(set={"status\" = 'x', sends = 99 --": "y"}))
    with pytest.raises(InvalidIdentifier):
        claim(conn, jobs(), JOB, 5, ["ok", ""])

    # Quoted names, in an attached database (the schema step looks there, not in main).
    conn.execute(f"ATTACH DATABASE '{tmp_path / 'other.db'}' AS \"Other DB\"")
    weird = Table('we"ird', schema="Other DB", id_column="Job Id", fence_column='last "fence"')
    conn.execute(f"CREATE TABLE {weird.quoted_name} ({quote('Job Id')} TEXT PRIMARY KEY, note TEXT)")
    conn.execute(f"CREATE TABLE {quote(weird.name)} (x)")  # the same name in main, without the column
    conn.execute(f"INSERT INTO {weird.quoted_name} VALUES ('a', NULL)")
    add_fence_column(conn, weird)
    add_fence_column(conn, weird)
    claim(conn, weird, "a", 3)
    with pytest.raises(Stale):
        write(conn, weird, "a", 2, Update(set={"note": "late"}))
    assert query(conn, f"SELECT * FROM {weird.quoted_name}") == [("a", None, 3)]
    assert refusals.counts("Other DB.we\"ird") == (1, 1)


def test_a_name_that_matches_no_column_is_an_error_and_nothing_is_written(conn: sqlite3.Connection) -> None:
    """SQLite reads a double-quoted name that matches no column as a string literal: a
    misspelled name would come back as its own text, make a precondition never hold, or write
    and return the text. Every name the caller gives is checked against the table first."""
    id_typo = Table("invoice_jobs", id_column="jobid")
    fence_typo = Table("invoice_jobs", id_column="job_id", fence_column="last_fnce")
    calls: List[Tuple[str, Callable[[], object]]] = [
        ("stauts", lambda: claim(conn, jobs(), JOB, 5, ["stauts"])),
        ("stauts", lambda: write(conn, jobs(), JOB, 5, Update(set={"status": "SENT"}, when={"stauts": "PENDING"}))),
        ("vv", lambda: write_returning(conn, jobs(), JOB, 5, send(5), "vv")),
        ("stauts", lambda: write(conn, jobs(), JOB, 5, Update(set={"stauts": "SENT"}))),
        ("stauts", lambda: write(conn, jobs(), JOB, 5, Update(set={"status": "SENT"}).when_in("stauts", ["PENDING"]))),
        ("stauts", lambda: write(conn, jobs(), JOB, 5, Update().when_in("stauts", []))),
        ("jobid", lambda: claim(conn, id_typo, "jobid", 5)),
        ("jobid", lambda: write(conn, id_typo, "jobid", 5, Update())),
        ("last_fnce", lambda: claim(conn, fence_typo, JOB, 5)),
    ]
    for name, call in calls:
        with pytest.raises(UnknownColumn) as raised:
            call()
        assert (raised.value.table, raised.value.column) == ("invoice_jobs", name)
    assert job(conn) == ("PENDING", 0, None, 0), "nothing was written"

    # SQLite's own rules still hold: names match whatever their case, and a table with a rowid
    # has `rowid` (a WITHOUT ROWID table has none: refused too).
    assert claim(conn, jobs(), JOB, 5, ["STATUS", "rowid"]) == ("PENDING", 1)
    claim(conn, Table("invoice_jobs", id_column="_rowid_"), 1, 6)
    conn.execute("CREATE TABLE kv (k TEXT PRIMARY KEY, last_fence INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID")
    conn.execute("INSERT INTO kv (k) VALUES ('a')")
    with pytest.raises(UnknownColumn):
        claim(conn, Table("kv", id_column="k"), "a", 5, ["rowid"])
    assert claim(conn, Table("kv", id_column="k"), "a", 5, ["k"]) == ("a",)


def test_a_null_fence_is_an_error_of_its_own_and_nothing_is_written(
    conn: sqlite3.Connection, refusals: Refusals
) -> None:
    assert_a_null_fence_is_refused(conn, refusals)
