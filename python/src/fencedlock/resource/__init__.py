"""Fenced writes at the resource: the other half of a lock.

A lock decides who may *try*; the resource decides which writes *count*. A holder paused past
its lease wakes up believing it still holds the lock while a newer holder has taken over; only
the resource can refuse its writes, by comparing the fence each write carries with the newest
the row has seen. These helpers are that comparison, on the caller's own connection or cursor
(``sqlite3``, or psycopg 3: ``pip install 'fencedlock[postgres]'``), inside the caller's own
transaction; :mod:`fencedlock.asyncio.resource` does the same over ``psycopg.AsyncConnection``.

=====================  ====================  ==========================================================
step                   helper                SQL
=====================  ====================  ==========================================================
once per table         add_fence_column      ``ALTER TABLE t ADD COLUMN last_fence bigint NOT NULL DEFAULT 0``
first, after acquiring claim                 ``UPDATE t SET last_fence = $1 WHERE id = $2 AND last_fence <= $1 RETURNING …``
every write            write                 ``UPDATE t SET …, last_fence = $1 WHERE id = $2 AND last_fence <= $1 [AND …]``
=====================  ====================  ==========================================================

::

    jobs = Table("invoice_jobs", id_column="job_id")
    with conn.transaction():                                   # psycopg; sqlite3: BEGIN IMMEDIATE
        status, = claim(conn, jobs, 72, lease.fence, returning=["status"])   # or Stale: abandon
        if status == "PENDING":
            write(conn, jobs, 72, lease.fence, Update(set={"status": "SENT"}, when={"status": "PENDING"}))

A claim or write whose fence is older than the row's raises :class:`Stale`: nothing is
written, the refusal is counted (:data:`stale_refusals`, by resource) and logged (logger
``fencedlock.resource``). ``<=``, not ``<``, lets one holder write many times with one fence.
The check and the write are one statement, so the guard holds under READ COMMITTED too; the
package README's "Fencing the resource" explains the orderings and the isolation argument.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Optional

from .. import errors
from ..errors import RowNotFound, Stale
from . import _sql, _steps
from ._names import (DEFAULT_FENCE_COLUMN, DEFAULT_ID_COLUMN, MAX_IDENTIFIER_BYTES, InvalidIdentifier, Table,
                     UnknownColumn, quote)
from ._outcome import InvalidFence, NullFence
from ._refusals import METRIC, RESOURCE_LABEL, Refusal, StaleRefusals, stale_refusals
from ._sessions import PostgresSession, Target, drive, session
from ._sql import Dialect
from ._steps import Columns
from ._update import Update

SQLITE_BUSY, SQLITE_LOCKED = 5, 6
"""SQLite's primary result codes (an extended code's low byte) for a busy or locked database."""

__all__ = [
    "DEFAULT_FENCE_COLUMN",
    "DEFAULT_ID_COLUMN",
    "Dialect",
    "InvalidFence",
    "InvalidIdentifier",
    "MAX_IDENTIFIER_BYTES",
    "METRIC",
    "NullFence",
    "RESOURCE_LABEL",
    "Refusal",
    "RowNotFound",
    "Stale",
    "StaleRefusals",
    "Table",
    "UnknownColumn",
    "Update",
    "add_fence_column",
    "add_fence_column_sql",
    "claim",
    "claim_sql",
    "is_retryable",
    "quote",
    "stale_refusals",
    "write",
    "write_returning",
    "write_sql",
]


def claim(target: Target, table: Table, row_id: Any, fence: int, returning: Columns = ()) -> Any:
    """The claim, first thing after acquiring, in the transaction that reads the row: raises
    the row's fence to ``fence`` unless a newer one is there and returns the ``returning``
    columns (the fence column when empty), as the caller's row factory makes rows: the state
    this holder inherits, which no older holder can change afterwards. On PostgreSQL the row
    stays locked until the transaction ends.

    :class:`Stale` if the row carries a newer fence (abandon the attempt), :class:`RowNotFound`
    if no row has the id, :class:`NullFence` if its fence is NULL, :class:`InvalidFence` for a
    fence outside 1..=MAX_FENCE, :class:`UnknownColumn` for a name that is no column (asked
    first on SQLite, which would read it as a string).
    """
    on = session(target)
    return drive(on, _steps.claim(on.dialect, table, row_id, fence, returning))


def write(target: Target, table: Table, row_id: Any, fence: int, update: Update) -> bool:
    """A guarded write: ``update`` with ``fence_column = fence`` added to its assignments and
    ``fence_column <= fence`` to its condition, in one statement.

    ``True`` if the row was updated; ``False`` if the fence is current but the update's
    precondition did not hold (nothing written: re-read and decide). :class:`Stale` if the row
    carries a newer fence, :class:`RowNotFound` if no row has the id, :class:`NullFence` if its
    fence is NULL, :class:`UnknownColumn` for a name that is no column (SQLite).
    """
    on = session(target)
    applied, _ = drive(on, _steps.write(on.dialect, table, row_id, fence, update, ()))
    return applied


def write_returning(target: Target, table: Table, row_id: Any, fence: int, update: Update, returning: Columns) -> Optional[Any]:
    """:func:`write`, returning the updated row's ``returning`` columns, or ``None`` if the
    precondition did not hold."""
    if not _steps.columns(returning):
        raise errors.InvalidArgument("write_returning needs at least one column to return (or use write)")
    on = session(target)
    _, row = drive(on, _steps.write(on.dialect, table, row_id, fence, update, returning))
    return row


def add_fence_column(target: Target, table: Table) -> None:
    """The schema step: adds the fence column (``bigint NOT NULL DEFAULT 0``; SQLite
    ``INTEGER``) to ``table`` unless it has it already. Existing rows get 0, below every fence.
    An existing column is left as it is: keep it ``NOT NULL`` (a NULL fence is :class:`NullFence`)."""
    on = session(target)
    if isinstance(on, PostgresSession):
        on.execute(_sql.add_fence_column_if_absent(table))
        return
    present = on.execute(
        "SELECT 1 FROM pragma_table_info(?1, ?2) WHERE name = ?3",
        {"1": table.name, "2": table.schema or "main", "3": table.fence_column},
    )
    if not present:
        on.execute(_sql.add_fence_column(table, Dialect.SQLITE))


def add_fence_column_sql(table: Table, dialect: Dialect = Dialect.POSTGRES) -> str:
    """The schema step as SQL to run once (a migration):
    ``ALTER TABLE "t" ADD COLUMN "last_fence" bigint NOT NULL DEFAULT 0``."""
    return _sql.add_fence_column(table, dialect)


def claim_sql(table: Table, returning: Columns = (), dialect: Dialect = Dialect.POSTGRES) -> str:
    """The statement :func:`claim` runs (``$1`` the fence, ``$2`` the row id)."""
    return _sql.claim(table, dialect, 1, None, _steps.columns(returning)).sql


def write_sql(table: Table, update: Update, returning: Columns = (), dialect: Dialect = Dialect.POSTGRES) -> str:
    """The statement :func:`write` (no ``returning``) or :func:`write_returning` runs for
    ``update`` (``$1`` the fence, ``$2`` the row id, then the update's values): for logs,
    ``EXPLAIN``, or a statement of your own built the same way."""
    return _sql.write(table, dialect, 1, None, update, _steps.columns(returning)).sql


def is_retryable(exc: BaseException) -> bool:
    """Whether the database gave up on the transaction for a reason another attempt can get
    past: a serialization failure (SQLSTATE ``40001``) or a deadlock (``40P01``) on
    PostgreSQL, a busy or locked database on SQLite. Roll back and run the whole transaction
    again, from the claim: the retry then sees the newest fence, and is :class:`Stale` if it
    is stale."""
    if getattr(exc, "sqlstate", None) in ("40001", "40P01"):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None:
            return code & 0xFF in (SQLITE_BUSY, SQLITE_LOCKED)
        return "database is locked" in str(exc) or "database table is locked" in str(exc)
    return False

