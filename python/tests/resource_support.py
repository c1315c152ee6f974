"""What the resource tests share: the lesson's invoice-jobs table, its row as a tuple, a
connection to a test database, and the stale refusals as counted and logged."""

from __future__ import annotations

import logging
import sqlite3
from typing import Any, Dict, List, Optional, Tuple, Union

import psycopg
import pytest

from fencedlock.resource import (NullFence, Stale, Table, Update, add_fence_column, claim, stale_refusals, write,
                                 write_returning)

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
