"""Periodic jobs on asyncio: the twin of :mod:`fencedlock.periodic`, whose outcome types
(:class:`LastRun`, :class:`NotDue`, :class:`Ran`, :class:`Busy`) it shares."""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Optional, TypeVar, Union

from .. import _keys, _periodic, _wire
from .._periodic import Busy, LastRun, NotDue, Periodic, Ran
from ..errors import BadRecord, FencedLockError
from ._server import Server
from .lease import Lease

__all__ = ["Busy", "Due", "LastRun", "NotDue", "Periodic", "Ran"]

log = logging.getLogger("fencedlock")

T = TypeVar("T")


class Due:
    """See :class:`fencedlock.Due`; :meth:`record` is awaited."""

    def __init__(
        self, server: Server, lease: Lease, raw_key: bytes, started_ms: int, every_ms: int, previous: Optional[LastRun]
    ) -> None:
        self._server = server
        self._key = lease.key
        self._raw_key = raw_key
        self._fence = lease.fence
        self._label = lease._label
        self._started_ms = started_ms
        self._every_ms = every_ms
        self._previous = previous

    @property
    def previous(self) -> Optional[LastRun]:
        return self._previous

    @property
    def started(self) -> float:
        return self._started_ms / 1000

    async def record(self, exit_code: int = 0) -> bool:
        """See :meth:`fencedlock.Due.record`: ``False`` when a newer holder's run is on
        record already."""
        exit_code = _periodic.check_exit_code(exit_code)
        args = _periodic.write_args(self._raw_key, self._started_ms, self._fence, self._label, exit_code, self._every_ms)
        return _wire.flag_of(await self._server.call(args))

    def __repr__(self) -> str:
        return f"Due(key={self._key!r}, fence={self._fence}, previous={self._previous!r})"


async def read(server: Server, key: str, raw_key: bytes) -> _periodic.Reading:
    try:
        return _periodic.parse(await server.call(_periodic.read_args(raw_key)))
    except _periodic.Malformed:
        raise BadRecord(server.name, key) from None


async def schedule(server: Server, lease: Lease, every_ms: int) -> Union[Due, NotDue]:
    raw_key = _keys.check_key(lease.key)
    reading = await read(server, lease.key, raw_key)
    previous = reading.last_run()
    due_in_ms = reading.due_in_ms(every_ms)
    if due_in_ms > 0 and previous is not None:
        return NotDue(previous, due_in_ms / 1000)
    return Due(server, lease, raw_key, reading.now_ms, every_ms, previous)


async def run(
    server: Server, acquire: Callable[[], Awaitable[Optional[Lease]]], every_ms: int, work: Callable[[Lease], Awaitable[T]]
) -> Periodic[T]:
    lease = await acquire()
    if lease is None:
        return Busy()
    try:
        found = await schedule(server, lease, every_ms)
    except BaseException:
        await _release(lease)
        raise
    if isinstance(found, NotDue):
        await lease.release()
        return found
    lease.keep_alive()
    try:
        value = await while_held(lease, work)
        await found.record(0)
    finally:
        await _release(lease)
    return Ran(value)


async def while_held(lease: Lease, work: Callable[[Lease], Awaitable[T]]) -> T:
    """``work(lease)``, cancelled the moment the lease is lost, whose loss is raised then (as
    the Rust client's ``while_held``)."""
    running = asyncio.ensure_future(work(lease))
    lost = asyncio.ensure_future(lease.lost.wait())
    try:
        await asyncio.wait({running, lost}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        lost.cancel()
        if not running.done():
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
    # The loss first, as Rust's biased select: work that finished as the lease was lost is
    # not counted either.
    lease.ensure_valid()
    return running.result()


async def _release(lease: Lease) -> None:
    try:
        await lease.release()
    except FencedLockError as err:
        log.warning("fencedlock: release of %r after a periodic run failed; the lease expires after its ttl: %s", lease.key, err)
