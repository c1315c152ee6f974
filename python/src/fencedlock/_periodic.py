"""Periodic jobs without I/O: the outcomes, the run record's decoding and the due rule, as
``protocol/src/periodic.rs`` defines them (the scripts and names are in ``_contract``).

The server's clock decides: the ``READ_RECORD`` script replies the server's ``TIME`` with the
record, so the age of the last run is measured on the clock that stamped it, whatever the
hosts' clocks say."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Generic, Optional, TypeVar, Union

from . import _contract, _keys, _terms
from ._wire import Args
from .errors import InvalidArgument

T = TypeVar("T")

U64_MAX = (1 << 64) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


@dataclass(frozen=True)
class LastRun:
    """A job's last counted run, as the server that keeps its record tells it."""

    started: float
    """When the run started, on the server's clock, in seconds since the Unix epoch (as
    ``time.time()``)."""
    age: float
    """How long ago that was, in seconds, on the server's clock."""
    fence: int
    """The fence of the lease the run held."""
    label: Optional[bytes]
    """The label of the lease the run held, if it had one (who ran it)."""
    exit_code: int
    """The job's exit code (non-zero only where failed runs are counted)."""


@dataclass(frozen=True)
class NotDue:
    """The last counted run started less than a period ago: do nothing now."""

    last: LastRun
    due_in: float
    """Seconds until the job is due, on the server's clock."""


@dataclass(frozen=True)
class Ran(Generic[T]):
    """The job was due; it ran, returned ``value`` and was recorded."""

    value: T


@dataclass(frozen=True)
class Busy:
    """Another holder has the lock (it is running the job, or finding it not due)."""


Periodic = Union[Ran[T], NotDue, Busy]
"""What ``run_at_most_every`` came to."""


@dataclass(frozen=True)
class Record:
    """A run record's fields (the protocol's ``RunRecord``)."""

    started_ms: int
    fence: int
    label: Optional[bytes]
    exit: int


@dataclass(frozen=True)
class Reading:
    """A ``READ_RECORD`` reply, decoded: the server's time and the record, if any."""

    now_ms: int
    last: Optional[Record]

    def age_ms(self) -> Optional[int]:
        """How long ago the last run started; zero for a start stamped later than now (a
        server clock that stepped back must not make a job due early)."""
        return None if self.last is None else max(self.now_ms - self.last.started_ms, 0)

    def due_in_ms(self, every_ms: int) -> int:
        """0 when a job run at most once every ``every_ms`` is due (no run on record, or the
        last one started at least that long ago), else the milliseconds until it is."""
        age = self.age_ms()
        return 0 if age is None or age >= every_ms else every_ms - age

    def last_run(self) -> Optional[LastRun]:
        last = self.last
        if last is None:
            return None
        age = self.age_ms() or 0
        return LastRun(last.started_ms / 1000, age / 1000, last.fence, last.label, last.exit)


class Malformed(Exception):
    """A reply that is no record fencedlock wrote (the protocol's ``MalformedRecord``)."""


# Rust's integer parsing: ASCII digits, an optional sign ('+' only for unsigned).
_UNSIGNED = re.compile(rb"\+?[0-9]+")
_SIGNED = re.compile(rb"[+-]?[0-9]+")


def _bytes(value: Any) -> Optional[bytes]:
    if value is None:
        return None
    if isinstance(value, str):  # a client with decode_responses=True
        return value.encode("utf-8")
    if isinstance(value, bytes):
        return value
    raise Malformed()


def _number(value: Any, pattern: re.Pattern[bytes], low: int, high: int) -> Optional[int]:
    raw = _bytes(value)
    if raw is None:
        return None
    if not pattern.fullmatch(raw) or not low <= int(raw) <= high:
        raise Malformed()
    return int(raw)


def parse(fields: Any) -> Reading:
    """The six fields of a ``READ_RECORD`` reply (``ReadReply::parse``): :class:`Malformed`
    for anything fencedlock does not write."""
    if not isinstance(fields, list) or len(fields) != 6:
        raise Malformed()
    seconds, micros, started_ms, fence = (_number(f, _UNSIGNED, 0, U64_MAX) for f in fields[:4])
    if seconds is None or micros is None:
        raise Malformed()
    now_ms = min(seconds * 1000 + micros // 1000, U64_MAX)
    if started_ms is None and fence is None:
        return Reading(now_ms, None)
    if started_ms is None or fence is None:
        raise Malformed()
    exit_code = _number(fields[5], _SIGNED, I64_MIN, I64_MAX)
    return Reading(now_ms, Record(started_ms, fence, _bytes(fields[4]), 0 if exit_code is None else exit_code))


def period_ms(every: object) -> int:
    """A period (seconds or a ``timedelta``) in whole milliseconds, at least 1."""
    ms = int(_terms.seconds(every, "every") * 1000 + 1e-6)
    if ms < 1:
        raise InvalidArgument("a periodic job's period must be at least 1 ms")
    return ms


def check_exit_code(exit_code: object) -> int:
    if isinstance(exit_code, bool) or not isinstance(exit_code, int) or not I64_MIN <= exit_code <= I64_MAX:
        raise InvalidArgument(f"an exit code is a 64-bit signed integer, got {exit_code!r}")
    return exit_code


def read_args(key: bytes) -> Args:
    """``EVAL READ_RECORD 1 record``."""
    return ("EVAL", _contract.READ_RECORD, 1, _keys.record_key(key))


def write_args(key: bytes, started_ms: int, fence: int, label: Optional[bytes], exit_code: int, every_ms: int) -> Args:
    """``EVAL WRITE_RECORD 1 record started_ms fence label exit retention_ms``: an empty label
    removes the field; the record outlives its period by ``RECORD_RETENTION_MS``."""
    retention = min(every_ms + _contract.RECORD_RETENTION_MS, U64_MAX)
    return ("EVAL", _contract.WRITE_RECORD, 1, _keys.record_key(key), started_ms, fence, label or b"", exit_code, retention)


MULTI_MASTER = (
    "a periodic job needs one server: the period is measured on its clock, and independent "
    "Redlock masters have none in common (use a Locker)"
)
