"""The caller's own connection or cursor, sqlite3 or psycopg 3, as the helpers run queries on
it: in whatever transaction it is in, on a cursor of its own (the caller's cursor keeps its
results), with the caller's row factory for the rows the helpers return.

psycopg is never imported here: a psycopg connection exists only where the application
imported psycopg (which imports its ``rows`` and ``types.numeric`` too), so it is looked up in
``sys.modules``.
"""

from __future__ import annotations

import sqlite3
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

from ._sql import Dialect
from ._steps import Query, Result, Steps, T

if TYPE_CHECKING:
    import psycopg

    Target = Union[sqlite3.Connection, sqlite3.Cursor, "psycopg.Connection[Any]", "psycopg.Cursor[Any]"]
else:
    Target = Any

POSTGRES_EXTRA = "pip install 'fencedlock[postgres]'"


class SqliteSession:
    dialect = Dialect.SQLITE

    def __init__(self, target: Union[sqlite3.Connection, sqlite3.Cursor]) -> None:
        self.conn = target.connection if isinstance(target, sqlite3.Cursor) else target
        self.row_factory = target.row_factory

    def run(self, query: Query) -> Result:
        cursor = self.conn.cursor()
        try:
            cursor.row_factory = self.row_factory if query.user_rows else None
            # ?1, ?2, …: numbered parameters, which sqlite3 binds from a mapping by number.
            params: Dict[str, Any] = {str(n): value for n, value in enumerate(query.statement.params, 1)}
            cursor.execute(query.statement.sql, params)
            rows = cursor.fetchall()
            return cursor.rowcount, rows[0] if rows else None
        finally:
            cursor.close()

    def execute(self, sql: str, params: Optional[Dict[str, Any]] = None) -> List[Any]:
        """``sql`` with plain tuple rows (the schema step's own statements)."""
        cursor = self.conn.cursor()
        try:
            cursor.row_factory = None
            cursor.execute(sql, params or {})
            return cursor.fetchall()
        finally:
            cursor.close()


class PostgresSession:
    dialect = Dialect.POSTGRES

    def __init__(self, target: Any, psycopg: Any) -> None:
        self._psycopg = psycopg
        self.conn = target.connection if isinstance(target, psycopg.Cursor) else target
        self.row_factory = target.row_factory

    def run(self, query: Query) -> Result:
        # A raw cursor sends $1, $2, … to the server as written: the Rust crate's statements,
        # bound server-side, with no %-escaping of the caller's SQL fragments.
        row_factory = self.row_factory if query.user_rows else self._psycopg.rows.tuple_row
        with self._psycopg.RawCursor(self.conn, row_factory=row_factory) as cursor:
            cursor.execute(query.statement.sql, postgres_params(query, self._psycopg))
            row = cursor.fetchone() if cursor.description is not None else None
            return cursor.rowcount, row

    def execute(self, sql: str) -> None:
        with self._psycopg.RawCursor(self.conn) as cursor:
            cursor.execute(sql)


def postgres_params(query: Query, psycopg: Any) -> List[Any]:
    """The statement's values, the fence as ``bigint`` (the column's type, whatever its size)."""
    params = list(query.statement.params)
    if query.binds_fence:
        params[0] = psycopg.types.numeric.Int8(params[0])
    return params


Session = Union[SqliteSession, PostgresSession]


def session(target: object) -> Session:
    """The session for a sqlite3 or psycopg connection or cursor."""
    if isinstance(target, (sqlite3.Connection, sqlite3.Cursor)):
        return SqliteSession(target)
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        if isinstance(target, (psycopg.Connection, psycopg.Cursor)):
            return PostgresSession(target, psycopg)
        if isinstance(target, (psycopg.AsyncConnection, psycopg.AsyncCursor)):
            raise TypeError("an asyncio psycopg connection goes to fencedlock.asyncio.resource")
    raise TypeError(
        "fencedlock.resource works on a sqlite3 connection or cursor, or a psycopg 3 one "
        f"({POSTGRES_EXTRA}), not {type(target).__name__}"
    )


def drive(session: Session, steps: Steps[T]) -> T:
    """Runs ``steps`` on ``session`` to their result."""
    try:
        query = next(steps)
        while True:
            query = steps.send(session.run(query))
    except StopIteration as done:
        result: T = done.value
        return result
