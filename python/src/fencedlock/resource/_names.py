"""SQL identifiers from the user (table, schema and column names), quoted, and the fenced
table that names them.

Every name that goes into a statement is a delimited identifier: wrapped in double quotes
with each ``"`` doubled, which PostgreSQL and SQLite both read back as exactly the given name.
Values never go into statement text: they are bound parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

from ..errors import InvalidArgument

MAX_IDENTIFIER_BYTES = 63
"""PostgreSQL's longest identifier (``NAMEDATALEN - 1`` bytes). It truncates longer names
with only a notice, so two long names could silently become one column: refused instead."""

DEFAULT_FENCE_COLUMN = "last_fence"
"""The column every helper reads and raises unless told otherwise."""

DEFAULT_ID_COLUMN = "id"
"""The row id column unless told otherwise."""


class InvalidIdentifier(InvalidArgument):
    """A table, schema or column name the helpers refuse to quote: empty, with a NUL
    character, or longer than :data:`MAX_IDENTIFIER_BYTES` bytes. Nothing was sent."""

    def __init__(self, name: object, reason: str) -> None:
        super().__init__(f"invalid SQL identifier {name!r}: {reason}")
        self.name = name
        self.reason = reason


class UnknownColumn(InvalidArgument):
    """A column name that is no column of the table, refused before anything was written.
    SQLite reads a double-quoted name that matches no column as a string literal, so on SQLite
    every name given is checked against the table first; PostgreSQL refuses it itself
    (``psycopg.errors.UndefinedColumn``)."""

    def __init__(self, table: str, column: str) -> None:
        super().__init__(f'no column "{column}" in {table}')
        self.table = table
        """The table, ``schema.table`` or ``table``."""
        self.column = column


def quote(name: object) -> str:
    """``name`` as a delimited identifier: ``"…"`` with each ``"`` doubled."""
    if not isinstance(name, str):
        raise InvalidIdentifier(name, f"a name is a str, not {type(name).__name__}")
    if not name:
        raise InvalidIdentifier(name, "empty")
    if "\0" in name:
        raise InvalidIdentifier(name, "contains a NUL byte")
    if len(name.encode("utf-8")) > MAX_IDENTIFIER_BYTES:
        raise InvalidIdentifier(name, "longer than 63 bytes (PostgreSQL would truncate it)")
    return '"' + name.replace('"', '""') + '"'


def quote_list(names: Iterable[str]) -> str:
    """Each name quoted, joined with ``, ``."""
    return ", ".join(quote(name) for name in names)


@dataclass(frozen=True)
class Table:
    """A table whose rows carry a fence column, as the helpers address it: its name (and
    schema), the column that picks one row, the fence column, and the label stale refusals
    are counted and logged under.

    >>> jobs = Table("invoice_jobs", id_column="job_id")
    >>> Table("invoices", schema="billing").resource
    'billing.invoices'

    Any name works (it is quoted); one the helpers refuse (empty, a NUL, over 63 bytes) is an
    :class:`InvalidIdentifier` here, before anything is sent.
    """

    name: str
    schema: Optional[str] = None
    """The schema (PostgreSQL), or an attached database's name (SQLite)."""
    id_column: str = DEFAULT_ID_COLUMN
    fence_column: str = DEFAULT_FENCE_COLUMN
    resource_label: Optional[str] = field(default=None)
    """The label refusals are counted under (default ``schema.table`` or ``table``). Keep
    it to a handful of values per application: one counter each, never a row id."""

    def __post_init__(self) -> None:
        for name in (self.name, self.id_column, self.fence_column):
            quote(name)
        if self.schema is not None:
            quote(self.schema)
        if self.resource_label is not None and not isinstance(self.resource_label, str):
            raise InvalidArgument(f"a resource label is a str, not {type(self.resource_label).__name__}")

    @property
    def resource(self) -> str:
        """The label stale refusals of this table are counted and logged under."""
        if self.resource_label is not None:
            return self.resource_label
        return f"{self.schema}.{self.name}" if self.schema is not None else self.name

    @property
    def qualified_name(self) -> str:
        """``schema.table`` or ``table``, unquoted: how errors name the table."""
        return f"{self.schema}.{self.name}" if self.schema is not None else self.name

    @property
    def quoted_name(self) -> str:
        """``"schema"."table"`` or ``"table"``."""
        table = quote(self.name)
        return table if self.schema is None else f"{quote(self.schema)}.{table}"

    @property
    def quoted_id(self) -> str:
        return quote(self.id_column)

    @property
    def quoted_fence(self) -> str:
        return quote(self.fence_column)
