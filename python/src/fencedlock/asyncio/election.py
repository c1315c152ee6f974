"""Leader election on asyncio: the twin of :mod:`fencedlock.election`."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import AsyncIterator, Optional, Type, Union

from .. import _terms
from .._election import MIN_CAMPAIGN_WINDOW, MIN_POLL_INTERVAL, Leader, leader_of, next_poll
from .lease import Lease, LostCallback
from .locker import Locker

__all__ = ["Election", "Leader", "Leadership"]


class Leadership:
    """Being the leader: a kept-alive lease; :attr:`lost` is an ``asyncio.Event``."""

    def __init__(self, lease: Lease, label: bytes) -> None:
        self.lease = lease
        self.label = label

    @property
    def epoch(self) -> int:
        return self.lease.fence

    @property
    def lost(self) -> asyncio.Event:
        return self.lease.lost

    @property
    def remaining(self) -> float:
        return self.lease.remaining

    def ensure_valid(self) -> None:
        self.lease.ensure_valid()

    async def resign(self) -> bool:
        return await self.lease.release()

    async def __aenter__(self) -> Leadership:
        return self

    async def __aexit__(self, kind: Optional[Type[BaseException]], value: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        await self.lease.__aexit__(kind, value, tb)


class Election:
    def __init__(self, locker: Locker, key: str, *, ttl: Optional[_terms.Seconds] = None) -> None:
        self.locker = locker
        self.key = key
        self._ttl = ttl

    async def campaign(self, label: Union[str, bytes], *, window: _terms.Seconds = 10, on_lost: Optional[LostCallback] = None) -> Leadership:
        """Waits until elected (cancel to stop campaigning), then leads under a kept-alive
        lease labelled ``label`` (public)."""
        raw_label = _terms.check_label(label)
        assert raw_label is not None
        wait = max(_terms.seconds(window, "window"), MIN_CAMPAIGN_WINDOW)
        while True:
            # Each window with the locker's own token (see fencedlock.Election.campaign): a
            # cancelled window's possible grant is given back, and never reused.
            lease = await self.locker.acquire(self.key, self._ttl, wait=wait, label=raw_label, keep_alive=True, on_lost=on_lost)
            if lease is not None:
                return Leadership(lease, raw_label)

    async def leader(self) -> Optional[Leader]:
        return leader_of(await self.locker.status(self.key))

    async def observe(self, every: _terms.Seconds = 1.0) -> AsyncIterator[Optional[Leader]]:
        interval = max(_terms.seconds(every, "every"), MIN_POLL_INTERVAL)
        last: Optional[object] = ()
        while True:
            leader = await self.leader()
            identity = None if leader is None else leader.identity()
            if identity != last:
                last = identity
                yield leader
            await asyncio.sleep(next_poll(leader, interval))
