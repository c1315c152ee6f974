"""Fenced read-write locks: many readers or one writer on a key (``ACQUIRE … SHARED`` for a
read lease; the plain ``ACQUIRE``, the mutex, for the write lease), after the Rust client's
``ReadWriteLock``.

Both leases are ordinary leases (:class:`~fencedlock.Lease`): renew, release, keep-alive and
``lease.fence`` work as for a lock. Every grant takes the next fence of the key's one
sequence, so a writer's fence is above every reader's and writer's before it. Waiting is the
server's queue, in arrival order: readers that come after a waiting writer wait behind it, so
a stream of readers cannot starve it, and the readers queued behind a writer enter together
when it leaves.

:meth:`ReadWriteLock.downgrade` turns a write lease into a read lease in one step, keeping
its fence. There is no upgrade: two readers upgrading at once would each wait for the other,
so the server refuses a reader's own write request (:class:`~fencedlock.UpgradeRefused`).

Read-write locks run on a :class:`~fencedlock.Locker` (one server), as semaphores do: fenced
Redlock cannot lift a key held by several readers to one fence.
"""

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
    """A fenced read-write lock on ``key`` of ``locker``'s server.

    >>> prices = ReadWriteLock(locker, "prices", wait=30)
    >>> async with prices.writing() as lease:          # alone: no reader, no other writer
    ...     write_prices(fence=lease.fence)
    ...     await prices.downgrade(lease)              # now a reader, same fence; readers join
    ...     check_prices(fence=lease.fence)
    >>> async with prices.reading() as lease:          # together with other readers
    ...     read_prices(fence=lease.fence)

    ``ttl`` is the leases' (the locker's by default), ``wait`` how long :meth:`read` and
    :meth:`write` wait by default (seconds; the Rust client's ``max_wait``), ``label`` the
    public label every lease carries (``STATUS`` shows it; never a secret). Its write lease is
    the same lease as ``locker.acquire(key)``'s. A wait that is interrupted (or cancelled)
    leaves nothing held, as :meth:`Locker.acquire`'s.
    """

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
            raise InvalidArgument("a ReadWriteLock runs on a fencedlock.asyncio.Locker (one server), as semaphores do: not on a Redlock")
        self._terms = Terms.checked(key, ttl, wait, label)
        self._locker = locker

    @property
    def key(self) -> str:
        return self._terms.key

    @property
    def locker(self) -> Locker:
        """The locker the lock takes its leases from."""
        return self._locker

    # -- read leases ---------------------------------------------------------------------

    async def try_read(self, *, keep_alive: bool = False, on_lost: Optional[LostCallback] = None) -> Optional[Lease]:
        """One attempt at a read lease: ``None`` while a writer holds the key or others wait
        for it (a reader never passes a waiting writer)."""
        return await self._take(True, 0, keep_alive, on_lost)

    async def read(
        self,
        *,
        wait: Optional[_terms.Seconds] = None,
        keep_alive: bool = False,
        on_lost: Optional[LostCallback] = None,
    ) -> Optional[Lease]:
        """A read lease, waiting up to ``wait`` seconds (the lock's by default) in the
        server's queue; ``None`` when the wait ran out."""
        return await self._take(True, wait, keep_alive, on_lost)

    @contextlib.asynccontextmanager
    async def reading(
        self, *, wait: Optional[_terms.Seconds] = None, on_lost: Optional[LostCallback] = None
    ) -> AsyncIterator[Lease]:
        """``async with lock.reading() as lease:`` runs the body under a kept-alive read lease and
        releases it after; :class:`~fencedlock.NotAcquired` when the wait ran out."""
        lease = await self.read(wait=wait, keep_alive=True, on_lost=on_lost)
        if lease is None:
            raise NotAcquired(self._terms.key)
        async with lease:
            yield lease

    # -- the write lease -----------------------------------------------------------------

    async def try_write(self, *, keep_alive: bool = False, on_lost: Optional[LostCallback] = None) -> Optional[Lease]:
        """One attempt at the write lease: ``None`` while anyone holds the key (or others
        wait for it)."""
        return await self._take(False, 0, keep_alive, on_lost)

    async def write(
        self,
        *,
        wait: Optional[_terms.Seconds] = None,
        keep_alive: bool = False,
        on_lost: Optional[LostCallback] = None,
    ) -> Optional[Lease]:
        """The write lease, waiting up to ``wait`` seconds (the lock's by default) in the
        server's queue: the readers already in finish, those who come later wait behind it.
        ``None`` when the wait ran out."""
        return await self._take(False, wait, keep_alive, on_lost)

    @contextlib.asynccontextmanager
    async def writing(
        self, *, wait: Optional[_terms.Seconds] = None, on_lost: Optional[LostCallback] = None
    ) -> AsyncIterator[Lease]:
        """``async with lock.writing() as lease:`` runs the body under the kept-alive write lease
        (which :meth:`downgrade` may turn into a read lease) and releases it after;
        :class:`~fencedlock.NotAcquired` when the wait ran out."""
        lease = await self.write(wait=wait, keep_alive=True, on_lost=on_lost)
        if lease is None:
            raise NotAcquired(self._terms.key)
        async with lease:
            yield lease

    # -- downgrade, status ---------------------------------------------------------------

    async def downgrade(self, lease: Lease) -> None:
        """Turns ``lease``, this lock's write lease, into a read lease with the same fence and
        a fresh ttl; the readers waiting at the head of the queue come in with it. One
        request, not waited for: nothing can hold the key between the two.
        :class:`~fencedlock.LeaseLost` when the lease had ended (another writer may have come
        between: a new grant is given back); :class:`~fencedlock.InvalidArgument` for a lease
        of another key or another locker."""
        self._terms.check_downgrade(lease.key, lease._authority, self._locker)
        await self._locker._downgrade(lease, self._terms.label)

    async def status(self) -> Optional[SemaphoreStatus]:
        """The key's holders: readers show as a semaphore of 0 permits
        (:attr:`SemaphoreStatus.is_shared`), each with its fence, time left and label; a
        writer as one permit. ``None``: no lock state."""
        return as_semaphore(await self._locker.status(self._terms.key))

    async def _take(
        self, shared: bool, wait: Optional[_terms.Seconds], keep_alive: bool, on_lost: Optional[LostCallback]
    ) -> Optional[Lease]:
        t = self._terms
        return await self._locker._take(t.key, t.ttl, t.wait_for(wait), 1, t.label, None, keep_alive, on_lost, shared=shared)

    def __repr__(self) -> str:
        return f"ReadWriteLock(key={self._terms.key!r})"
