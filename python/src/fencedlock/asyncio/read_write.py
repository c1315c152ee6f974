"""Fenced read-write locks on asyncio: the twin of :mod:`fencedlock.read_write`."""

from __future__ import annotations

import contextlib
from typing import AsyncIterator, Optional, Union

from .. import _terms
from .._read_write import Terms
from .._wire import SemaphoreStatus, as_semaphore
from ..errors import InvalidArgument, NotAcquired
from .lease import Lease, LostCallback
from .locker import Locker

__all__ = ["ReadWriteLock"]


class ReadWriteLock:
    """``prices = ReadWriteLock(locker, "prices")``; ``async with prices.writing() as
    lease:``, ``await prices.downgrade(lease)``, ``async with prices.reading() as lease:``.
    The same arguments and semantics as :class:`fencedlock.ReadWriteLock`; waits are
    cancel-safe, as :meth:`Locker.acquire`'s."""

    def __init__(
        self,
        locker: Locker,
        key: str,
        *,
        ttl: Optional[_terms.Seconds] = None,
        wait: _terms.Seconds = 10,
        label: Union[str, bytes, None] = None,
    ) -> None:
        if not isinstance(locker, Locker):
            raise InvalidArgument(
                "a ReadWriteLock runs on a fencedlock.asyncio.Locker (one server), as semaphores do: not on a Redlock"
            )
        self._terms = Terms.checked(key, ttl, wait, label)
        self._locker = locker

    @property
    def key(self) -> str:
        return self._terms.key

    @property
    def locker(self) -> Locker:
        return self._locker

    async def try_read(self, *, keep_alive: bool = False, on_lost: Optional[LostCallback] = None) -> Optional[Lease]:
        """See :meth:`fencedlock.ReadWriteLock.try_read`."""
        return await self._take(True, 0, keep_alive, on_lost)

    async def read(
        self, *, wait: Optional[_terms.Seconds] = None, keep_alive: bool = False, on_lost: Optional[LostCallback] = None
    ) -> Optional[Lease]:
        """See :meth:`fencedlock.ReadWriteLock.read`."""
        return await self._take(True, wait, keep_alive, on_lost)

    @contextlib.asynccontextmanager
    async def reading(
        self, *, wait: Optional[_terms.Seconds] = None, on_lost: Optional[LostCallback] = None
    ) -> AsyncIterator[Lease]:
        """``async with lock.reading() as lease:``; :class:`NotAcquired` when the wait ran out."""
        lease = await self.read(wait=wait, keep_alive=True, on_lost=on_lost)
        if lease is None:
            raise NotAcquired(self._terms.key)
        async with lease:
            yield lease

    async def try_write(self, *, keep_alive: bool = False, on_lost: Optional[LostCallback] = None) -> Optional[Lease]:
        """See :meth:`fencedlock.ReadWriteLock.try_write`."""
        return await self._take(False, 0, keep_alive, on_lost)

    async def write(
        self, *, wait: Optional[_terms.Seconds] = None, keep_alive: bool = False, on_lost: Optional[LostCallback] = None
    ) -> Optional[Lease]:
        """See :meth:`fencedlock.ReadWriteLock.write`."""
        return await self._take(False, wait, keep_alive, on_lost)

    @contextlib.asynccontextmanager
    async def writing(
        self, *, wait: Optional[_terms.Seconds] = None, on_lost: Optional[LostCallback] = None
    ) -> AsyncIterator[Lease]:
        """``async with lock.writing() as lease:``; :class:`NotAcquired` when the wait ran out."""
        lease = await self.write(wait=wait, keep_alive=True, on_lost=on_lost)
        if lease is None:
            raise NotAcquired(self._terms.key)
        async with lease:
            yield lease

    async def downgrade(self, lease: Lease) -> None:
        """See :meth:`fencedlock.ReadWriteLock.downgrade`."""
        self._terms.check_downgrade(lease.key, lease._authority, self._locker)
        await self._locker._downgrade(lease, self._terms.label)

    async def status(self) -> Optional[SemaphoreStatus]:
        """See :meth:`fencedlock.ReadWriteLock.status`."""
        return as_semaphore(await self._locker.status(self._terms.key))

    async def _take(
        self, shared: bool, wait: Optional[_terms.Seconds], keep_alive: bool, on_lost: Optional[LostCallback]
    ) -> Optional[Lease]:
        t = self._terms
        return await self._locker._take(t.key, t.ttl, t.wait_for(wait), 1, t.label, None, keep_alive, on_lost, shared=shared)

    def __repr__(self) -> str:
        return f"ReadWriteLock(key={self._terms.key!r})"
