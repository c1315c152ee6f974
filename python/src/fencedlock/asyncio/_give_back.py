"""The asyncio twin of :mod:`fencedlock._give_back`: a token that may have been granted
without our hearing of it (no answer, or cancelled) is released in a task, at once and
again one timeout later."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Sequence, Set

from ..errors import FencedLockError, Unavailable

Release = Callable[[bytes, bytes], Awaitable[bool]]
"""A locker's ``release(key, token)``."""


class GiveBack:
    """The give-backs of one locker, and the tasks running them (kept until done: the loop
    holds only weak references)."""

    def __init__(self, release: Release, timeout: float) -> None:
        self._release = release
        self._timeout = timeout
        self._background: Set[asyncio.Task[None]] = set()

    def release_later(self, token: bytes, *keys: bytes) -> asyncio.Event:
        """Releases ``keys`` in a task, at once and one timeout later (see the sync
        :class:`fencedlock._give_back.GiveBack`); the event is set when the first pass is done."""
        first = asyncio.Event()

        async def release() -> None:
            await self.release_each(token, keys)
            first.set()
            await asyncio.sleep(self._timeout)
            await self.release_each(token, keys)

        task = asyncio.get_running_loop().create_task(release())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return first

    async def release_each(self, token: bytes, keys: Sequence[bytes]) -> None:
        """See :meth:`fencedlock._give_back.GiveBack.release_each`."""
        for key in keys:
            try:
                await self._release(key, token)
            except Unavailable:
                return
            except FencedLockError:
                continue

    async def release_quietly(self, key: bytes, token: bytes) -> None:
        try:
            await self._release(key, token)
        except FencedLockError:
            pass

    async def release_set(self, keys: Sequence[bytes], token: bytes) -> None:
        """See :meth:`fencedlock._give_back.GiveBack.release_set`."""
        first = self.release_later(token, *keys)
        try:
            await asyncio.wait_for(first.wait(), self._timeout)
        except asyncio.TimeoutError:
            pass
