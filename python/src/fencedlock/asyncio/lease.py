"""A held lease, and its keep-alive (a task on asyncio, a daemon thread in the sync package)."""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import Callable, Optional, Protocol, Type, Union

from .. import _terms
from ..errors import FencedLockError, LeaseLost
from . import _backend

log = logging.getLogger("fencedlock")


class Authority(Protocol):
    """Who granted a lease and renews and ends it: one server, or a Redlock majority."""

    async def renew(self, key: bytes, token: bytes, ttl_ms: int, timeout: Optional[float]) -> Optional[float]:
        """The new validity deadline (monotonic), or ``None`` when the token no longer holds
        the key; ``timeout`` bounds the request (the keep-alive's: the lease's validity)."""

    async def release(self, key: bytes, token: bytes) -> bool:
        """Whether the token still held the key, which is free now."""


LostCallback = Callable[["Lease"], object]
"""Called when a kept-alive lease is lost (and awaited on asyncio, if it returns an awaitable)."""


class Lease:
    """A lease on one key: pass :attr:`fence` to the resource with every write.

    Validity is measured on this process's monotonic clock from *before* the granting request
    was sent, minus drift. :meth:`ensure_valid` raises :class:`LeaseLost` once it ran out or
    the keep-alive lost the lease; :attr:`lost`, an event (``asyncio.Event``), is set at that
    moment. As a context manager (``async with lease:``), the lease is released on exit.
    """

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
        # Between the caller and the keep-alive thread, in the sync package; uncontended on
        # asyncio, where nothing awaits while it is held.
        self._state = threading.Lock()
        self._loss: Optional[LeaseLost] = None
        self._released = False
        self._keeper: Optional[_backend.Keeper] = None
        self._on_lost: Optional[LostCallback] = None
        self.lost = _backend.Event()
        """Set when the lease is known lost (a renewal failed, validity ran out in a
        renewal, or a release found it gone)."""

    @property
    def key(self) -> str:
        return self._key

    @property
    def fence(self) -> int:
        """Strictly greater than the fence of every earlier grant on this key."""
        return self._fence

    @property
    def label(self) -> Union[str, bytes, None]:
        """The public label the lease was granted with, as it was given (``str`` or
        ``bytes``; a periodic job records it as who ran the job)."""
        return self._shown_label

    @property
    def token(self) -> bytes:
        """The secret that proves ownership to the server (never logged or shown)."""
        return self._token

    @property
    def ttl(self) -> float:
        return self._ttl_ms / 1000

    @property
    def valid_until(self) -> float:
        """The ``time.monotonic()`` instant after which the lease must not be relied on."""
        return self._deadline

    @property
    def remaining(self) -> float:
        """Seconds of validity left; 0 once expired or lost."""
        if self.lost.is_set():
            return 0.0
        return max(self._deadline - time.monotonic(), 0.0)

    def is_valid(self) -> bool:
        return not self.lost.is_set() and time.monotonic() < self._deadline

    def ensure_valid(self) -> None:
        """Raises :class:`LeaseLost` once the lease is lost or its validity ran out."""
        loss = self._loss
        if loss is not None:
            raise loss
        if time.monotonic() >= self._deadline:
            raise LeaseLost(self._key, "validity expired")

    async def renew(self) -> None:
        """Extends the lease to a full ttl from now (measured from before the request).
        :class:`LeaseLost` when it ran out or the server no longer holds it; another error
        (:class:`~fencedlock.Unavailable`) leaves it as it was."""
        self.ensure_valid()
        await self._renew(None)

    async def _renew(self, timeout: Optional[float]) -> None:
        deadline = await self._authority.renew(self._raw_key, self._token, self._ttl_ms, timeout)
        if deadline is None:
            loss = LeaseLost(self._key, "the server no longer holds our token")
            await self._declare_lost(loss)
            raise self._loss or loss
        self._deadline = deadline

    async def release(self) -> bool:
        """Ends the lease (and its keep-alive). ``True`` if it was still held, ``False`` if it
        had expired or been taken over. The fence stays: the next grant's is higher."""
        await self._stop_keeper()
        with self._state:
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

    # -- keep-alive ----------------------------------------------------------------------

    def keep_alive(self, on_lost: Optional[LostCallback] = None) -> Lease:
        """Renews in the background (a task on the running loop; a daemon thread in the sync
        package) every renew interval (ttl / 3 by default). The first failed renewal (refused,
        timed out, or too late for the validity) stops it, sets :attr:`lost` and calls
        ``on_lost(lease)`` there."""
        with self._state:
            self._on_lost = on_lost
            if self._keeper is None and not self._released:
                self._keeper = _backend.Keeper(self._keep, name=f"fencedlock-keepalive-{self._key}")
        return self

    async def _keep(self, keeper: _backend.Keeper) -> None:
        while True:
            due = _terms.renewal_due(self._deadline, self._ttl_ms, self._clock, self._renew_every)
            if await keeper.pause(max(due - time.monotonic(), 0.0)):
                return
            left = self._deadline - time.monotonic()
            try:
                if left <= 0:
                    raise LeaseLost(self._key, "validity expired before the renewal")
                # A renewal that cannot answer before the validity ends is too late.
                await self._renew(left)
            except FencedLockError as err:
                if keeper.stopping:
                    return
                if not isinstance(err, LeaseLost):
                    err = LeaseLost(self._key, f"renewal failed: {err}", cause=err.cause)
                log.warning("fencedlock: %s (fence %d)", err, self._fence)
                await self._declare_lost(err)
                return

    async def _stop_keeper(self) -> None:
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            await keeper.stop()

    async def _declare_lost(self, err: LeaseLost, callback: bool = True) -> None:
        with self._state:
            if self._loss is None:
                self._loss = err
            first = not self.lost.is_set()
            self.lost.set()
            on_lost = self._on_lost
        if first and callback and on_lost is not None:
            try:
                await _backend.settle(on_lost(self))
            except Exception:
                log.exception("fencedlock: the on_lost callback of %r raised", self._key)

    # -- context manager -----------------------------------------------------------------

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
