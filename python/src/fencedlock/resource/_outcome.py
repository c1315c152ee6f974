"""A fence as the databases store it, and what a claim or guarded write that matched no row
means: decided once here for every driver, sync and asyncio."""

from __future__ import annotations

from typing import Any, Optional

from .. import _contract
from ..errors import InvalidArgument, RowNotFound, Stale
from ._names import Table
from ._refusals import Refusal, stale_refusals


class InvalidFence(InvalidArgument):
    """A fence outside ``1..=MAX_FENCE`` (or not an ``int``), refused before any statement:
    0 is the column's default, so a "fence" of 0 would pass on every untouched row, and
    ``bigint``/``INTEGER`` are signed 64-bit, which every fence the server hands out fits."""

    def __init__(self, fence: object) -> None:
        super().__init__(f"fence {fence!r} is not a fence: fences are 1..={_contract.MAX_FENCE}")
        self.fence = fence


def checked_fence(fence: object) -> int:
    """``fence`` as bound to the statements, or :class:`InvalidFence`."""
    if not isinstance(fence, int) or isinstance(fence, bool) or not 1 <= fence <= _contract.MAX_FENCE:
        raise InvalidFence(fence)
    return fence


def stored_fence(row: Any) -> Optional[int]:
    """The fence column's value from the one-column row of the fence read; ``None`` for no
    row (the schema step makes the column ``NOT NULL``)."""
    if row is None:
        return None
    value = next(iter(row.values())) if isinstance(row, dict) else row[0]
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
