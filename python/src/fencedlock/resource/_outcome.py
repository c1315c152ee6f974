"""A fence as the databases store it, and what a claim or guarded write that matched no row
means: decided once here for every driver, sync and asyncio."""

from __future__ import annotations

from typing import Any, Optional

from .. import _contract
from ..errors import FencedLockError, InvalidArgument, RowNotFound, Stale
from ._names import Table
from ._refusals import Refusal, stale_refusals


class InvalidFence(InvalidArgument):
    """A fence outside ``1..=MAX_FENCE`` (or not an ``int``), refused before any statement:
    0 is the column's default, so a "fence" of 0 would pass on every untouched row, and
    ``bigint``/``INTEGER`` are signed 64-bit, which every fence the server hands out fits."""

    def __init__(self, fence: object) -> None:
        super().__init__(f"fence {fence!r} is not a fence: fences are 1..={_contract.MAX_FENCE}")
        self.fence = fence


class NullFence(FencedLockError):
    """The row has the id but its fence column is NULL: there is no fence to compare, so
    nothing was written. :func:`add_fence_column` adds the column ``NOT NULL DEFAULT 0`` but
    leaves an existing one as it is: set the NULLs to 0 and make the column ``NOT NULL``."""

    def __init__(self, table: str, column: str) -> None:
        super().__init__(f'the fence column "{column}" of {table} is NULL on that row: nothing written')
        self.table = table
        """The table, ``schema.table`` or ``table``."""
        self.column = column


def checked_fence(fence: object) -> int:
    """``fence`` as bound to the statements, or :class:`InvalidFence`."""
    if not isinstance(fence, int) or isinstance(fence, bool) or not 1 <= fence <= _contract.MAX_FENCE:
        raise InvalidFence(fence)
    return fence


def stored_fence(table: Table, row: Any) -> Optional[int]:
    """The fence column's value from the one-column row of the fence read; ``None`` for no
    row. :class:`NullFence` for a NULL: it compares with nothing, so no statement matches the
    row, and it is neither a missing row nor fence 0."""
    if row is None:
        return None
    value = next(iter(row.values())) if isinstance(row, dict) else row[0]
    if value is None:
        raise NullFence(table.qualified_name, table.fence_column)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def claim_refused(table: Table, fence: int, stored: Optional[int]) -> Exception:
    """Why a claim matched no row: :class:`Stale` (counted and logged) for a newer fence,
    else :class:`RowNotFound` (the row was absent when the claim ran)."""
    return _stale(table, "claim", fence, stored) or RowNotFound(table.resource)


def write_refused(table: Table, fence: int, stored: Optional[int], precondition: bool) -> None:
    """Why a guarded write matched no row: raises :class:`Stale` for a newer fence,
    :class:`RowNotFound` for a missing row; returns (the precondition did not hold) when the
    write has one and the fence is current."""
    stale = _stale(table, "write", fence, stored)
    if stale is not None:
        raise stale
    if stored is None or not precondition:
        # Nothing else could stop the statement: the row was absent when it ran (and may
        # have been inserted since, which READ COMMITTED's next statement sees).
        raise RowNotFound(table.resource)


def _stale(table: Table, step: str, fence: int, stored: Optional[int]) -> Optional[Stale]:
    if stored is None or stored <= fence:
        return None
    resource = table.resource
    stale_refusals.record(Refusal(resource, step, fence, stored))
    return Stale(resource, fence, stored)
