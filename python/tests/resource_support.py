"""What the resource tests share: the lesson's invoice-jobs table, its row as a tuple, a
connection to a test database, and the stale refusals as counted and logged."""

from __future__ import annotations

import logging
import sqlite3
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import psycopg
import pytest

from fencedlock import InvalidArgument
from fencedlock.resource import (InvalidFence, NullFence, RowNotFound, Stale, Table, Update, add_fence_column, claim,
                                 stale_refusals, write, write_returning)

JOBS_DDL = """CREATE TABLE invoice_jobs (
    job_id bigint PRIMARY KEY,
    status text NOT NULL DEFAULT 'PENDING',
    sends integer NOT NULL DEFAULT 0,
    sent_by bigint
)"""
"""The lesson's table: one invoice job per row, ``sends`` counts how often it went out."""
JOB = 72
"""The job every single-row test works on."""

Conn = Union[sqlite3.Connection, "psycopg.Connection[Any]"]
JobRow = Tuple[str, int, Optional[int], int]


LOOSE_DDL = """CREATE TABLE loose_jobs (
    job_id bigint PRIMARY KEY,
    status text NOT NULL DEFAULT 'PENDING',
    last_fence bigint
)"""
"""A table whose fence column was added by hand, nullable."""


def jobs() -> Table:
    return Table("invoice_jobs", id_column="job_id")


def connect(conninfo: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """An autocommit connection: each helper call outside ``with conn.transaction()`` is a
    transaction of its own, and ``transaction()`` is a real ``BEGIN``, never a savepoint."""
    return psycopg.connect(conninfo, autocommit=True, **kwargs)


def query(conn: Conn, sql: str, *params: Any) -> List[Tuple[Any, ...]]:
    """``sql`` with ``?`` placeholders, on either database."""
    if isinstance(conn, sqlite3.Connection):
        return conn.execute(sql, params).fetchall()
    with conn.cursor(row_factory=psycopg.rows.tuple_row) as cur:
        if params:
            cur.execute(sql.replace("?", "%s").encode(), params)
        else:
            cur.execute(sql.encode())
        return cur.fetchall() if cur.description else []


def job(conn: Conn) -> JobRow:
    """The job row: (status, sends, sent_by, last_fence)."""
    (row,) = query(conn, "SELECT status, sends, sent_by, last_fence FROM invoice_jobs WHERE job_id = ?", JOB)
    return row[0], row[1], row[2], row[3]


def send(fence: int) -> Update:
    """"Send the invoice": one more send, by this fence."""
    return Update().set_sql("sends", '"sends" + 1').set("sent_by", fence)


def reset(conn: Conn) -> None:
    query(conn, "UPDATE invoice_jobs SET status = 'PENDING', sends = 0, sent_by = NULL, last_fence = 0")


def assert_stale(raised: pytest.ExceptionInfo[Stale], fence: int, newer: int, resource: str = "invoice_jobs") -> None:
    err = raised.value
    assert (err.resource, err.fence, err.last_fence) == (resource, fence, newer)


class Refusals:
    """Stale refusals since the test began: counted (by resource, and in all) and logged."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.WARNING, logger="fencedlock.resource")
        self._caplog = caplog
        self._before: Dict[str, int] = stale_refusals.snapshot()

    def counts(self, resource: str = "invoice_jobs") -> Tuple[int, int]:
        """The count under ``resource`` and over every label, since the test began; each
        refusal was logged once, with its resource and fences."""
        now = stale_refusals.snapshot()
        delta = {name: n - self._before.get(name, 0) for name, n in now.items()}
        logged = [r for r in self._caplog.records if r.name == "fencedlock.resource" and r.levelno == logging.WARNING]
        assert len(logged) == sum(delta.values()), "each counted refusal is one log record"
        assert all(getattr(r, "fence") < getattr(r, "last_fence") for r in logged)
        return delta.get(resource, 0), sum(delta.values())


def assert_a_null_fence_is_refused(conn: Conn, refusals: Refusals) -> None:
    """A nullable fence column (:func:`add_fence_column` leaves an existing column as it is)
    with a NULL on the row: every helper refuses it by kind, naming the column, and writes
    nothing; not a stale refusal, not a missing row."""
    query(conn, LOOSE_DDL)
    query(conn, "INSERT INTO loose_jobs (job_id) VALUES (?)", JOB)
    loose = Table("loose_jobs", id_column="job_id")
    add_fence_column(conn, loose)
    sent = Update(set={"status": "SENT"}, when={"status": "PENDING"})
    for call in (
        lambda: claim(conn, loose, JOB, 5, ["status"]),
        lambda: write(conn, loose, JOB, 5, Update(set={"status": "SENT"})),
        lambda: write(conn, loose, JOB, 5, sent),
        lambda: write_returning(conn, loose, JOB, 5, sent, "status"),
    ):
        with pytest.raises(NullFence) as raised:
            call()
        assert (raised.value.table, raised.value.column) == ("loose_jobs", "last_fence")
    assert query(conn, "SELECT status, last_fence FROM loose_jobs") == [("PENDING", None)]
    assert refusals.counts("loose_jobs") == (0, 0)


@contextmanager
def transaction(conn: Conn) -> Iterator[None]:
    """The caller's transaction as each driver takes one: psycopg's ``transaction()``; on an
    autocommit sqlite3 connection ``BEGIN IMMEDIATE`` … ``COMMIT``, the write lock first, as the
    guide advises."""
    if isinstance(conn, sqlite3.Connection):
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    else:
        with conn.transaction():
            yield


def assert_a_stale_holder_is_refused_after_a_newer_claim(conn: Conn, refusals: Refusals) -> None:
    """A newer holder (8) claimed the row: the stale holder (7) is refused, its claim too, and
    the row is untouched; the newer holder's own write goes through."""
    with transaction(conn):
        assert claim(conn, jobs(), JOB, 8, ["status", "sends"]) == ("PENDING", 0)

    # The holder with fence 7 wakes up and writes: refused, and the row is untouched.
    with pytest.raises(Stale) as raised:
        write(conn, jobs(), JOB, 7, send(7))
    assert_stale(raised, 7, 8)
    with pytest.raises(Stale) as raised:
        claim(conn, jobs(), JOB, 7)
    assert_stale(raised, 7, 8)
    assert job(conn) == ("PENDING", 0, None, 8)
    assert refusals.counts() == (2, 2), "each refusal counted once, under its resource"

    # The newer holder's own write goes through.
    assert write(conn, jobs(), JOB, 8, send(8)) is True
    assert job(conn) == ("PENDING", 1, 8, 8)
    assert refusals.counts() == (2, 2)


def assert_the_lessons_two_orderings(conn: Conn, refusals: Refusals) -> None:
    """The lesson's second ordering: the stale write lands before the new holder's first write.
    Without a claim it is accepted (two sends); with one it is refused."""
    # Without claiming: B (8) reads; A's stale write (7) finds nothing newer and lands; B then
    # sends from what it read. Two sends: what the claim is for.
    assert query(conn, "SELECT sends FROM invoice_jobs WHERE job_id = ?", JOB) == [(0,)]
    assert write(conn, jobs(), JOB, 7, send(7)) is True
    assert write(conn, jobs(), JOB, 8, send(8)) is True
    assert job(conn) == ("PENDING", 2, 8, 8)
    assert refusals.counts() == (0, 0)

    # With claiming: B's claim raises the fence in the statement that reads; A's write is
    # refused although it still arrives before B's first write.
    reset(conn)
    with transaction(conn):
        assert claim(conn, jobs(), JOB, 8, "sends") == (0,)
    with pytest.raises(Stale) as raised:
        write(conn, jobs(), JOB, 7, send(7))
    assert_stale(raised, 7, 8)
    assert write(conn, jobs(), JOB, 8, send(8)) is True
    assert job(conn) == ("PENDING", 1, 8, 8)
    assert refusals.counts() == (1, 1)


def assert_one_holder_writes_many_times_with_one_fence(conn: Conn, refusals: Refusals) -> None:
    """A holder writes as often as it likes with its fence; an older fence is still refused, a
    newer one takes over without claiming."""
    with transaction(conn):
        claim(conn, jobs(), JOB, 9)
        assert write(conn, jobs(), JOB, 9, send(9)) is True
    # Two more, in their own transactions, the last one returning the row.
    assert write(conn, jobs(), JOB, 9, send(9)) is True
    assert write_returning(conn, jobs(), JOB, 9, send(9), ["sends", "last_fence"]) == (3, 9)
    assert job(conn) == ("PENDING", 3, 9, 9)
    assert refusals.counts() == (0, 0), "a holder's own writes are never refused"
    # An older fence still is; a newer one takes over without claiming.
    with pytest.raises(Stale):
        write(conn, jobs(), JOB, 8, send(8))
    assert write(conn, jobs(), JOB, 10, send(10)) is True
    assert job(conn) == ("PENDING", 4, 10, 10)


def assert_a_failed_precondition_is_not_stale(conn: Conn, refusals: Refusals) -> None:
    """A state precondition that does not hold writes nothing (not even the fence) and is no
    stale refusal; a stale fence is still stale, checked first."""
    def to_sent() -> Update:
        return Update(set={"status": "SENT"}, when={"status": "PENDING"})

    assert write(conn, jobs(), JOB, 5, to_sent()) is True
    # SENT → SENT again, by the same or a newer holder: the state machine says no.
    assert write(conn, jobs(), JOB, 5, to_sent()) is False
    assert write(conn, jobs(), JOB, 6, to_sent()) is False
    assert write_returning(conn, jobs(), JOB, 6, to_sent(), "status") is None
    assert job(conn) == ("SENT", 0, None, 5), "the failed precondition wrote no fence"
    # A stale fence is still Stale when the precondition fails too: the fence is checked first.
    with pytest.raises(Stale) as raised:
        write(conn, jobs(), JOB, 4, to_sent())
    assert_stale(raised, 4, 5)
    any_of = Update().set("status", "DONE").when_in("status", ["PENDING", "SENT"])
    assert write(conn, jobs(), JOB, 5, any_of) is True
    assert write(conn, jobs(), JOB, 5, Update().set("status", "X").when_in("status", [])) is False
    assert write(conn, jobs(), JOB, 5, Update().set("sends", 7).when_sql('"status" = \'DONE\'')) is True
    assert job(conn) == ("DONE", 7, None, 5)
    assert refusals.counts() == (1, 1)



def assert_bad_fences_missing_rows_and_sql_looking_values_change_nothing(conn: Conn) -> None:
    """Fences no server hands out are refused before anything is sent (the largest one it does
    is stored exactly), a missing row is :class:`RowNotFound` for every helper, and a value
    that looks like SQL is a value."""
    for fence in (0, -1, 2**63, 2**64, True, 7.0, "7", None):
        with pytest.raises(InvalidFence):
            claim(conn, jobs(), JOB, fence)  # type: ignore[arg-type]
        with pytest.raises(InvalidFence) as raised:
            write(conn, jobs(), JOB, fence, send(1))  # type: ignore[arg-type]
        assert isinstance(raised.value, InvalidArgument) and isinstance(raised.value, ValueError)
    assert write(conn, jobs(), JOB, 2**63 - 1, Update()) is True
    assert job(conn)[3] == 2**63 - 1
    reset(conn)

    with pytest.raises(RowNotFound):
        claim(conn, jobs(), 73, 5)
    with pytest.raises(RowNotFound):
        write(conn, jobs(), 73, 5, send(5))
    with pytest.raises(RowNotFound):
        write(conn, jobs(), 73, 5, Update(set={"status": "SENT"}, when={"status": "PENDING"}))

    hostile = "x'; DROP TABLE invoice_jobs; --"
    assert write(conn, jobs(), JOB, 5, Update(set={"status": hostile})) is True
    assert job(conn)[0] == hostile

Scenario = Callable[[Conn, Refusals], None]

LESSON_SCENARIOS: Tuple[Scenario, ...] = (
    assert_a_stale_holder_is_refused_after_a_newer_claim,
    assert_the_lessons_two_orderings,
    assert_one_holder_writes_many_times_with_one_fence,
    assert_a_failed_precondition_is_not_stale,
)
"""The lesson's single-row scenarios, each run on PostgreSQL and on SQLite."""
