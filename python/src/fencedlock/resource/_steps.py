"""Each helper as steps without I/O: a generator that yields the queries to run and receives
their results, so the sync drivers (sqlite3, psycopg) and the asyncio one (psycopg) run one
and the same logic."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generator, Iterable, Optional, Sequence, Tuple, TypeVar, Union

from . import _sql
from ._names import Table, UnknownColumn
from ._outcome import checked_fence, claim_refused, stored_fence, write_refused
from ._sql import Dialect, Statement
from ._update import Update

T = TypeVar("T")


@dataclass(frozen=True)
class Query:
    """One statement to run. ``user_rows``: rows come back as the caller's connection or
    cursor makes them (its row factory); else as plain tuples."""

    statement: Statement
    user_rows: bool
    binds_fence: bool
    """Parameter 1 is a fence (PostgreSQL binds it as ``bigint``)."""


Result = Tuple[int, Optional[Any]]
"""A query's row count and its first row (``None`` without one)."""

Steps = Generator[Query, Result, T]

Columns = Union[str, Sequence[str]]


def columns(returning: Columns) -> Tuple[str, ...]:
    """A column name or a sequence of them."""
    return (returning,) if isinstance(returning, str) else tuple(returning)


def claim(dialect: Dialect, table: Table, row_id: Any, fence: int, returning: Columns) -> Steps[Any]:
    """The claim: the row it returns, or :class:`Stale` / :class:`RowNotFound`."""
    fence = checked_fence(fence)
    wanted = columns(returning)
    statement = _sql.claim(table, dialect, fence, row_id, wanted)
    yield from _known_columns(dialect, table, wanted)
    _, row = yield Query(statement, True, True)
    if row is not None:
        return row
    raise claim_refused(table, fence, (yield from _fence_of(dialect, table, row_id)))


def write(
    dialect: Dialect, table: Table, row_id: Any, fence: int, update: Update, returning: Columns
) -> Steps[Tuple[bool, Optional[Any]]]:
    """A guarded write: ``(True, row)`` applied (``row`` the ``returning`` columns, ``None``
    without them), ``(False, None)`` the precondition did not hold; or :class:`Stale` /
    :class:`RowNotFound`."""
    fence = checked_fence(fence)
    wanted = columns(returning)
    statement = _sql.write(table, dialect, fence, row_id, update, wanted)
    yield from _known_columns(dialect, table, (*update.columns, *wanted))
    count, row = yield Query(statement, True, True)
    applied = row is not None if wanted else count > 0
    if applied:
        return True, row
    write_refused(table, fence, (yield from _fence_of(dialect, table, row_id)), update.has_precondition)
    return False, None


def _known_columns(dialect: Dialect, table: Table, given: Iterable[str]) -> Steps[None]:
    """On SQLite, :class:`UnknownColumn` for the first name the caller gave (the id and fence
    columns, an update's columns, ``returning``) that is no column of ``table``: SQLite would
    read it as a string literal (a misspelled ``RETURNING`` returns its own text, a misspelled
    precondition never holds). Asked every time, in the caller's transaction, so a schema change
    is seen. PostgreSQL refuses such a name itself."""
    if dialect is not Dialect.SQLITE:
        return
    names = list(dict.fromkeys((table.id_column, table.fence_column, *given)))
    _, row = yield Query(_sql.unknown_column(table, names), False, False)
    if row is not None:
        raise UnknownColumn(table.qualified_name, row[0])


def _fence_of(dialect: Dialect, table: Table, row_id: Any) -> Steps[Optional[int]]:
    """The row's fence, read after a statement matched nothing (in the same transaction)."""
    _, row = yield Query(_sql.fence_of(table, dialect, row_id), False, False)
    return stored_fence(table, row)
