"""The statements, built once here for both databases, in the same shapes as the Rust crate
``fencedlock-guard`` builds them (``guard/src/sql.rs``; ``tests/test_resource_contract.py``
compares the two).

Every statement binds the fence as parameter 1 and the row id as parameter 2, then the
update's own values. The fence check and the write are always the same statement::

    claim:  UPDATE t SET "last_fence" = $1 WHERE "id" = $2 AND "last_fence" <= $1 RETURNING …
    write:  UPDATE t SET …, "last_fence" = $1 WHERE "id" = $2 AND "last_fence" <= $1 [AND …]
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, List, Sequence

from ._names import Table, quote_list
from ._update import Update

FENCE_PARAM = 1
"""The parameter every statement binds the fence to."""
ID_PARAM = 2
"""The parameter every statement binds the row id to."""
FIRST_UPDATE_PARAM = 3
"""The first parameter of an update's own values."""
FIRST_NAME_PARAM = 3
"""The first name :func:`unknown_column` asks about (1 and 2 are the table and its schema)."""


class Dialect(enum.Enum):
    """Which database a statement is for: its placeholders and its fence column's type."""

    POSTGRES = "postgres"
    """``$1``, ``bigint`` (psycopg's raw cursors send ``$n`` to the server as written)."""
    SQLITE = "sqlite"
    """``?1``, ``INTEGER`` (SQLite's 64-bit signed integer)."""

    def placeholder(self, n: int) -> str:
        """The placeholder of the 1-based parameter ``n``."""
        return f"${n}" if self is Dialect.POSTGRES else f"?{n}"

    @property
    def fence_type(self) -> str:
        return "bigint" if self is Dialect.POSTGRES else "INTEGER"


@dataclass(frozen=True)
class Statement:
    """SQL text and the values of its parameters 1, 2, … in order."""

    sql: str
    params: List[Any]


def add_fence_column(table: Table, dialect: Dialect) -> str:
    """``ALTER TABLE t ADD COLUMN "last_fence" bigint NOT NULL DEFAULT 0``: existing rows get
    0, below every fence, so the first holder's claim or write passes."""
    return f"ALTER TABLE {table.quoted_name} ADD COLUMN {table.quoted_fence} {dialect.fence_type} NOT NULL DEFAULT 0"


def add_fence_column_if_absent(table: Table) -> str:
    """PostgreSQL's schema step that is a no-op when the column exists."""
    return add_fence_column(table, Dialect.POSTGRES).replace(" ADD COLUMN ", " ADD COLUMN IF NOT EXISTS ", 1)


def claim(table: Table, dialect: Dialect, fence: int, row_id: Any, returning: Sequence[str]) -> Statement:
    """Raise the fence where it is not above ours, and return what the holder inherits
    (``returning``, or the fence column when empty)."""
    fence_column = table.quoted_fence
    columns = quote_list(returning) if returning else fence_column
    f, i = dialect.placeholder(FENCE_PARAM), dialect.placeholder(ID_PARAM)
    sql = (
        f"UPDATE {table.quoted_name} SET {fence_column} = {f} WHERE {table.quoted_id} = {i} "
        f"AND {fence_column} <= {f} RETURNING {columns}"
    )
    return Statement(sql, [fence, row_id])


def write(
    table: Table, dialect: Dialect, fence: int, row_id: Any, update: Update, returning: Sequence[str] = ()
) -> Statement:
    """The update's assignments plus the fence, where the fence is not above ours and the
    precondition holds."""
    sets, conditions, values = update.render(dialect.placeholder, FIRST_UPDATE_PARAM)
    fence_column, f = table.quoted_fence, dialect.placeholder(FENCE_PARAM)
    sets.append(f"{fence_column} = {f}")
    sql = (
        f"UPDATE {table.quoted_name} SET {', '.join(sets)} WHERE {table.quoted_id} = {dialect.placeholder(ID_PARAM)} "
        f"AND {fence_column} <= {f}"
    )
    for condition in conditions:
        sql += f" AND {condition}"
    if returning:
        sql += f" RETURNING {quote_list(returning)}"
    return Statement(sql, [fence, row_id, *values])


def fence_of(table: Table, dialect: Dialect, row_id: Any) -> Statement:
    """The row's fence, read after a statement matched no row to tell why."""
    sql = f"SELECT {table.quoted_fence} FROM {table.quoted_name} WHERE {table.quoted_id} = {dialect.placeholder(1)}"
    return Statement(sql, [row_id])


def unknown_column(table: Table, names: Sequence[str]) -> Statement:
    """SQLite only: the first of ``names`` that is no column of the table, else no row. SQLite
    reads a double-quoted name that matches no column as a string literal, so the helpers ask
    first. Names match as SQLite matches them (ASCII case folded); ``rowid``, ``oid`` and
    ``_rowid_`` are names on a table with a rowid (WITHOUT ROWID: its primary key index carries
    no rowid, ``cid`` -1). A table with no columns does not exist: the statement itself then
    says so. A NULL schema searches as SQLite does (temp, main, attached)."""
    values = ", ".join(f"({Dialect.SQLITE.placeholder(FIRST_NAME_PARAM + i)})" for i in range(len(names)))
    sql = (
        f"SELECT n.column1 FROM (VALUES {values}) AS n WHERE EXISTS (SELECT 1 FROM pragma_table_xinfo(?1, ?2)) "
        "AND n.column1 COLLATE NOCASE NOT IN (SELECT name FROM pragma_table_xinfo(?1, ?2)) "
        "AND (n.column1 COLLATE NOCASE NOT IN ('rowid', 'oid', '_rowid_') "
        "OR EXISTS (SELECT 1 FROM pragma_index_list(?1, ?2) AS i WHERE i.origin = 'pk' "
        "AND NOT EXISTS (SELECT 1 FROM pragma_index_xinfo(i.name, ?2) WHERE cid = -1))) LIMIT 1"
    )
    return Statement(sql, [table.name, table.schema, *names])
