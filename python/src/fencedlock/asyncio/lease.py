"""A held lease on asyncio, and its keep-alive task."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from types import TracebackType
from typing import Any, Callable, Optional, Protocol, Type, Union

from .. import _terms
from ..errors import FencedLockError, LeaseLost

log = logging.getLogger("fencedlock")


class Authority(Protocol):
    async def renew(self, key: bytes, token: bytes, ttl_ms: int, timeout: Optional[float]) -> Optional[float]: ...

    async def release(self, key: bytes, token: bytes) -> bool: ...


LostCallback = Callable[["Lease"], Any]
"""Called (and awaited, if it returns an awaitable) when a kept-alive lease is lost."""


class Lease:
    """The asyncio twin of :class:`fencedlock.Lease`: :attr:`lost` is an ``asyncio.Event``,
    the keep-alive a task, and ``async with lease:`` releases it on exit."""

    def __init__(
        self,
        authority: Authority,
        key: str,
        raw_key: bytes,
        token: bytes,
        fence: int,
        ttl_ms: int,
        deadline: float,
        clock: _terms.Clock,
        renew_every: Optional[float],
        label: Optional[bytes] = None,
        *,
        shown_label: Union[str, bytes, None] = None,
    ) -> None:
        self._authority = authority
        self._key = key
        self._raw_key = raw_key
        self._token = token
        self._fence = fence
        self._label = label
        self._shown_label = shown_label if shown_label is not None else label
        self._ttl_ms = ttl_ms
        self._deadline = deadline
        self._clock = clock
        self._renew_every = renew_every if renew_every is not None else ttl_ms / 3000
        self._loss: Optional[LeaseLost] = None
        self._released = False
        self._keeper: Optional[asyncio.Task[None]] = None
        self._on_lost: Optional[LostCallback] = None
        self.lost = asyncio.Event()
        """Set when the lease is known lost."""

    @property
    def key(self) -> str:
        return self._key

    @property
    def fence(self) -> int:
        return self._fence

    @property
    def label(self) -> Union[str, bytes, None]:
        """The public label the lease was granted with, as it was given (``str`` or
        ``bytes``; a periodic job records it as who ran the job)."""
        return self._shown_label

    @property
    def token(self) -> bytes:
        return self._token

    @property
    def ttl(self) -> float:
        return self._ttl_ms / 1000

    @property
    def valid_until(self) -> float:
        return self._deadline

    @property
    def remaining(self) -> float:
        if self.lost.is_set():
            return 0.0
        return max(self._deadline - time.monotonic(), 0.0)

    def is_valid(self) -> bool:
        return not self.lost.is_set() and time.monotonic() < self._deadline

    def ensure_valid(self) -> None:
        if self._loss is not None:
            raise self._loss
        if time.monotonic() >= self._deadline:
            raise LeaseLost(self._key, "validity expired")

    async def renew(self) -> None:
        self.ensure_valid()
        await self._renew(None)

    async def _renew(self, timeout: Optional[float]) -> None:
        deadline = await self._authority.renew(self._raw_key, self._token, self._ttl_ms, timeout)
        if deadline is None:
            loss = LeaseLost(self._key, "the server no longer holds our token")
            await self._declare_lost(loss)
            raise loss
        self._deadline = deadline

    async def release(self) -> bool:
        await self._stop_keeper()
        if self._released:
            return False
        self._released = True
        held = await self._authority.release(self._raw_key, self._token)
        if not held:
            await self._declare_lost(LeaseLost(self._key, "it was no longer held at release"), callback=False)
        return held

    async def _ended(self, why: str) -> LeaseLost:
        """Marks the lease lost now (its keep-alive stops) and returns the error to raise."""
        loss = LeaseLost(self._key, why)
        await self._stop_keeper()
        self._deadline = min(self._deadline, time.monotonic())
        await self._declare_lost(loss, callback=False)
        return self._loss or loss

    def keep_alive(self, on_lost: Optional[LostCallback] = None) -> Lease:
        """Renews in a task every renew interval (ttl / 3 by default); the first failed
        renewal stops it, sets :attr:`lost` and calls ``on_lost(lease)``."""
        self._on_lost = on_lost
        if self._keeper is None and not self._released:
            self._keeper = asyncio.get_running_loop().create_task(self._keep(), name=f"fencedlock-keepalive-{self._key}")
        return self

    async def _keep(self) -> None:
        while True:
            due = _terms.renewal_due(self._deadline, self._ttl_ms, self._clock, self._renew_every)
            await asyncio.sleep(max(due - time.monotonic(), 0.0))
            left = self._deadline - time.monotonic()
            try:
                if left <= 0:
                    raise LeaseLost(self._key, "validity expired before the renewal")
                await self._renew(left)
            except FencedLockError as err:
                if not isinstance(err, LeaseLost):
                    err = LeaseLost(self._key, f"renewal failed: {err}", cause=err.cause)
                log.warning("fencedlock: %s (fence %d)", err, self._fence)
                await self._declare_lost(err)
                return

    async def _stop_keeper(self) -> None:
        keeper, self._keeper = self._keeper, None
        if keeper is not None and keeper is not asyncio.current_task():
            keeper.cancel()
            try:
                await keeper
            except asyncio.CancelledError:
                pass

    async def _declare_lost(self, err: LeaseLost, callback: bool = True) -> None:
        if self._loss is None:
            self._loss = err
        first = not self.lost.is_set()
        self.lost.set()
        if first and callback and self._on_lost is not None:
            try:
                result = self._on_lost(self)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("fencedlock: the on_lost callback of %r raised", self._key)

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(
        self, kind: Optional[Type[BaseException]], value: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        try:
            await self.release()
        except FencedLockError as err:
            log.warning("fencedlock: release of %r failed; the lease expires after its ttl: %s", self._key, err)

    def __repr__(self) -> str:
        return f"Lease(key={self._key!r}, fence={self._fence}, remaining={self.remaining:.3f})"
