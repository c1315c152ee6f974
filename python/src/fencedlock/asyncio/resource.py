"""Fenced writes at the resource over ``psycopg.AsyncConnection`` (or an ``AsyncCursor``):
the asyncio twin of :mod:`fencedlock.resource`, the same statements, outcomes, errors and
refusal counter, run by the same steps::

    async with conn.transaction():
        status, = await claim(conn, jobs, 72, lease.fence, returning=["status"])
        if status == "PENDING":
            await write(conn, jobs, 72, lease.fence, Update(set={"status": "SENT"}, when={"status": "PENDING"}))
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Optional, Union

from ..errors import InvalidArgument, RowNotFound, Stale
from ..resource import (
    Dialect,
    InvalidFence,
    InvalidIdentifier,
    Table,
    Update,
    add_fence_column_sql,
    claim_sql,
    is_retryable,
    stale_refusals,
    write_sql,
)
from ..resource import _sql, _steps
from ..resource._sessions import POSTGRES_EXTRA, postgres_params
from ..resource._steps import Columns, Query, Result, Steps, T

if TYPE_CHECKING:
    import psycopg

    AsyncTarget = Union["psycopg.AsyncConnection[Any]", "psycopg.AsyncCursor[Any]"]
else:
    AsyncTarget = Any

__all__ = [
    "Dialect",
    "InvalidFence",
    "InvalidIdentifier",
    "RowNotFound",
    "Stale",
    "Table",
    "Update",
    "add_fence_column",
    "add_fence_column_sql",
    "claim",
    "claim_sql",
    "is_retryable",
    "stale_refusals",
    "write",
    "write_returning",
    "write_sql",
]


class _AsyncSession:
    """The caller's async psycopg connection or cursor: queries on a raw cursor of its own,
    in the caller's transaction, rows made by the caller's row factory."""

    dialect = Dialect.POSTGRES

    def __init__(self, target: object) -> None:
        psycopg = sys.modules.get("psycopg")
        if psycopg is None or not isinstance(target, (psycopg.AsyncConnection, psycopg.AsyncCursor)):
            raise TypeError(
                "fencedlock.asyncio.resource works on a psycopg 3 AsyncConnection or AsyncCursor "
                f"({POSTGRES_EXTRA}; sqlite3 and sync psycopg go to fencedlock.resource), not {type(target).__name__}"
            )
        self._psycopg = psycopg
        self.conn: Any = target.connection if isinstance(target, psycopg.AsyncCursor) else target
        self.row_factory: Any = getattr(target, "row_factory")

    async def run(self, query: Query) -> Result:
        row_factory = self.row_factory if query.user_rows else self._psycopg.rows.tuple_row
        async with self._psycopg.AsyncRawCursor(self.conn, row_factory=row_factory) as cursor:
            await cursor.execute(query.statement.sql, postgres_params(query, self._psycopg))
            row = await cursor.fetchone() if cursor.description is not None else None
            return cursor.rowcount, row

    async def execute(self, sql: str) -> None:
        async with self._psycopg.AsyncRawCursor(self.conn) as cursor:
            await cursor.execute(sql)

    async def drive(self, steps: Steps[T]) -> T:
        try:
            query = next(steps)
            while True:
                query = steps.send(await self.run(query))
        except StopIteration as done:
            result: T = done.value
            return result


async def claim(target: AsyncTarget, table: Table, row_id: Any, fence: int, returning: Columns = ()) -> Any:
    """See :func:`fencedlock.resource.claim`."""
    return await _AsyncSession(target).drive(_steps.claim(Dialect.POSTGRES, table, row_id, fence, returning))


async def write(target: AsyncTarget, table: Table, row_id: Any, fence: int, update: Update) -> bool:
    """See :func:`fencedlock.resource.write`."""
    applied, _ = await _AsyncSession(target).drive(_steps.write(Dialect.POSTGRES, table, row_id, fence, update, ()))
    return applied


async def write_returning(
    target: AsyncTarget, table: Table, row_id: Any, fence: int, update: Update, returning: Columns
) -> Optional[Any]:
    """See :func:`fencedlock.resource.write_returning`."""
    if not _steps.columns(returning):
        raise InvalidArgument("write_returning needs at least one column to return (or use write)")
    steps = _steps.write(Dialect.POSTGRES, table, row_id, fence, update, returning)
    _, row = await _AsyncSession(target).drive(steps)
    return row


async def add_fence_column(target: AsyncTarget, table: Table) -> None:
    """See :func:`fencedlock.resource.add_fence_column`."""
    await _AsyncSession(target).execute(_sql.add_fence_column_if_absent(table))
