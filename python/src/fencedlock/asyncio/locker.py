"""Leases from one server through the user's ``redis.asyncio`` client: the asyncio twin of
:class:`fencedlock.Locker`."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from typing import AsyncIterator, Awaitable, Callable, Iterable, List, Optional, Sequence, TypeVar, Union

import redis.asyncio

from .. import _clients, _contract, _keys, _multi, _periodic, _terms, _wire
from .._wire import Engine, Status
from ..errors import Cause, FencedLockError, InvalidArgument, NotAcquired, Unavailable
from ..locker import BACKOFF, EngineName, engine_choice
from . import periodic
from ._give_back import GiveBack
from ._server import Server
from .lease import Lease, LostCallback
from .multi import Leases, take_all
from .periodic import Due, LastRun, NotDue, Periodic

T = TypeVar("T")


class Locker:
    """``locker = Locker(redis.asyncio.Redis())``; ``lease = await locker.acquire(key,
    ttl=30)``; ``async with locker.lease(key, ttl=30, wait=10) as lease:``. The same
    arguments and semantics as :class:`fencedlock.Locker`."""

    def __init__(
        self,
        client: redis.asyncio.Redis,
        *,
        ttl: _terms.Seconds = 30,
        timeout: _terms.Seconds = 0.5,
        engine: EngineName = None,
        drift_factor: float = 0.01,
        drift: _terms.Seconds = 0.002,
        renew_every: Optional[_terms.Seconds] = None,
    ) -> None:
        _clients.check_async(client, "Locker")
        self._ttl_ms = _terms.ttl_ms(ttl)
        request_timeout = _terms.seconds(timeout, "timeout")
        if request_timeout <= 0:
            raise InvalidArgument("timeout must be positive")
        self._clock = _terms.Clock(drift_factor, _terms.seconds(drift, "drift"))
        self._renew_every = None if renew_every is None else _terms.seconds(renew_every, "renew_every")
        if self._renew_every is not None and self._renew_every <= 0:
            raise InvalidArgument("renew_every must be positive")
        self._server = Server(client, timeout=request_timeout, engine=engine_choice(engine))
        self._give_back = GiveBack(self.release, request_timeout)

    @property
    def engine(self) -> Optional[Engine]:
        return self._server.engine

    async def detect_engine(self) -> Engine:
        return await self._server.detect()

    async def acquire(
        self,
        key: str,
        ttl: Optional[_terms.Seconds] = None,
        *,
        wait: Optional[_terms.Seconds] = None,
        permits: int = 1,
        label: Union[str, bytes, None] = None,
        token: Optional[bytes] = None,
        keep_alive: bool = False,
        on_lost: Optional[LostCallback] = None,
    ) -> Optional[Lease]:
        """See :meth:`fencedlock.Locker.acquire`. Cancel-safe: a cancelled wait leaves the
        server's queue, and a grant it may have received is released (never one of a
        ``token`` passed in: that stays the caller's to release)."""
        return await self._take(key, ttl, wait, permits, label, token, keep_alive, on_lost, shared=False)

    async def _take(
        self,
        key: str,
        ttl: Optional[_terms.Seconds],
        wait: Optional[_terms.Seconds],
        permits: int,
        label: Union[str, bytes, None],
        token: Optional[bytes],
        keep_alive: bool,
        on_lost: Optional[LostCallback],
        *,
        shared: bool,
    ) -> Optional[Lease]:
        """:meth:`acquire`, or with ``shared`` a read lease (``ACQUIRE … SHARED``)."""
        raw_key = _keys.check_key(key)
        ttl_ms = self._ttl_ms if ttl is None else _terms.ttl_ms(ttl)
        wait_s = _terms.wait_seconds(wait)
        permits = _terms.check_permits(permits)
        raw_label = _terms.check_label(label)
        # Ours to give back (a token we made), or the caller's (never released here).
        ours = token is None
        token = _terms.new_token() if token is None else _terms.check_token(token)
        until = time.monotonic() + wait_s
        while True:
            engine = await self._server.detect()
            sent = time.monotonic()
            try:
                if wait_s > 0:
                    fence = await self._wait(engine, raw_key, token, ttl_ms, raw_label, permits, shared, until, ours=ours)
                else:
                    attempt = _wire.acquire(engine, raw_key, token, ttl_ms, label=raw_label, permits=permits, shared=shared)
                    fence = _wire.fence_of(await self._server.call(attempt, secret=token))
                break
            except FencedLockError as err:
                if ours and err.cause is Cause.TIMED_OUT:
                    self._give_back.release_later(token, raw_key)
                if not err.is_retryable or time.monotonic() >= until:
                    raise
                if ours:
                    # A fresh token for the retry: the releases of the old one still in flight
                    # (the task above, _wait's) must never reach the lease the retry returns
                    # (two holders). A caller's token is never released: retried as it is.
                    # See fencedlock.Locker._take.
                    token = _terms.new_token()
            await asyncio.sleep(min(random.uniform(*BACKOFF), max(until - time.monotonic(), 0)))
        if fence is None:
            return None
        deadline = self._clock.deadline(sent, ttl_ms)
        lease = Lease(self, key, raw_key, token, fence, ttl_ms, deadline, self._clock, self._renew_every, raw_label, shown_label=label)
        if self._clock.needs_anchor(time.monotonic() - sent, ttl_ms):
            try:
                await lease._renew(None)
            except Unavailable:
                if not lease.is_valid():
                    if ours:
                        self._give_back.release_later(token, raw_key)
                    raise
        if keep_alive:
            lease.keep_alive(on_lost)
        return lease

    async def _wait(
        self,
        engine: Engine,
        key: bytes,
        token: bytes,
        ttl_ms: int,
        label: Optional[bytes],
        permits: int,
        shared: bool,
        until: float,
        *,
        ours: bool,
    ) -> Optional[int]:
        """See :meth:`fencedlock.Locker._wait`: only a token that is ``ours`` is released."""
        block_ms = max(1, min(int((until - time.monotonic()) * 1000) + 1, _contract.MAX_BLOCK_MS))
        attempt = _wire.acquire(
            engine,
            key,
            token,
            ttl_ms,
            label=label,
            permits=permits,
            shared=shared,
            block_ms=block_ms if engine is Engine.MODULE else None,
        )
        registering = _wire.acquire(engine, key, token, ttl_ms, label=label, permits=permits, shared=shared, waiting=True)
        status = _wire.command(engine, _contract.STATUS, key, ())
        try:
            return _wire.fence_of(await self._server.wait(attempt, registering, status, key, until, token))
        except BaseException as err:
            # A refusal the module answered with (an upgrade refused, a permit count
            # mismatch, ...) granted nothing: the token may hold a lease of its own.
            unheard = not isinstance(err, FencedLockError) or (err.cause is not None and err.reply_error is None)
            if ours and unheard:
                self._give_back.release_later(token, key)
            raise

    @contextlib.asynccontextmanager
    async def lease(
        self,
        key: str,
        ttl: Optional[_terms.Seconds] = None,
        *,
        wait: Optional[_terms.Seconds] = None,
        permits: int = 1,
        label: Union[str, bytes, None] = None,
        keep_alive: bool = True,
        on_lost: Optional[LostCallback] = None,
    ) -> AsyncIterator[Lease]:
        """``async with locker.lease(key, ttl=30, wait=10) as lease:``; :class:`NotAcquired`
        when not granted, so the body never runs unlocked."""
        lease = await self.acquire(key, ttl, wait=wait, permits=permits, label=label, keep_alive=keep_alive, on_lost=on_lost)
        if lease is None:
            raise NotAcquired(key)
        async with lease:
            yield lease

    async def acquire_all(
        self,
        keys: Iterable[str],
        ttl: Optional[_terms.Seconds] = None,
        *,
        wait: Optional[_terms.Seconds] = None,
        label: Union[str, bytes, None] = None,
        keep_alive: bool = False,
        on_lost: Optional[LostCallback] = None,
    ) -> Optional[Leases]:
        """See :meth:`fencedlock.Locker.acquire_all` (in one ``ACQUIREALL`` where the server
        has it). Cancel-safe: a cancelled call releases what it took, or may have been
        granted."""
        taken = await self._take_all(keys, ttl, wait, label)
        if isinstance(taken, str):
            return None
        return taken.keep_alive(on_lost) if keep_alive else taken

    @contextlib.asynccontextmanager
    async def lease_all(
        self,
        keys: Iterable[str],
        ttl: Optional[_terms.Seconds] = None,
        *,
        wait: Optional[_terms.Seconds] = None,
        label: Union[str, bytes, None] = None,
        keep_alive: bool = True,
        on_lost: Optional[LostCallback] = None,
    ) -> AsyncIterator[Leases]:
        """``async with locker.lease_all([a, b], ttl=30, wait=10) as leases:``;
        :class:`NotAcquired` naming the key that was refused."""
        taken = await self._take_all(keys, ttl, wait, label)
        if isinstance(taken, str):
            raise NotAcquired(taken)
        if keep_alive:
            taken.keep_alive(on_lost)
        async with taken:
            yield taken

    async def _take_all(
        self, keys: Iterable[str], ttl: Optional[_terms.Seconds], wait: Optional[_terms.Seconds], label: Union[str, bytes, None]
    ) -> Union[Leases, str]:
        ttl_ms = self._ttl_ms if ttl is None else _terms.ttl_ms(ttl)
        raw_label = _terms.check_label(label)
        wait_s = _terms.wait_seconds(wait)
        named, _ = _keys.taking_order(keys)
        raw = [_keys.check_key(key) for key in named]
        if await self._takes_at_once(raw):
            return await self._take_at_once(named, raw, ttl_ms, raw_label, wait_s, shown_label=label)
        return await take_all(
            lambda key, left: self.acquire(key, ttl, wait=left, label=label),
            named,
            wait_s,
            self._clock.window(ttl_ms),
        )

    async def _takes_at_once(self, keys: Sequence[bytes]) -> bool:
        """See :meth:`fencedlock.Locker._takes_at_once`."""
        try:
            return (await self._server.one_command()).takes(keys)
        except FencedLockError:
            return False

    async def _take_at_once(
        self, keys: List[str], raw: List[bytes], ttl_ms: int, label: Optional[bytes], wait: float, *,
        shown_label: Union[str, bytes, None] = None,
    ) -> Union[Leases, str]:
        """See :meth:`fencedlock.Locker._take_at_once`."""
        token = _terms.new_token()
        args = _wire.acquire_all(raw, token, ttl_ms, label=label, engine=await self._server.detect())
        until = time.monotonic() + wait
        unheard = False
        try:
            while True:
                failure: Optional[FencedLockError] = None
                sent = time.monotonic()
                try:
                    fences = _wire.fences_of(await self._server.call(args, secret=token), len(raw))
                except FencedLockError as err:
                    failure, fences = err, None
                if fences is not None:
                    deadline = self._clock.deadline(sent, ttl_ms)
                    if time.monotonic() < deadline:
                        return Leases([
                            Lease(self, key, raw_key, token, fence, ttl_ms, deadline, self._clock, self._renew_every, label,
                                  shown_label=shown_label)
                            for key, raw_key, fence in zip(keys, raw, fences)
                        ])
                    failure = _multi.granted_too_late(self._server.name)
                unheard = unheard or (failure is not None and _multi.may_have_granted(failure))
                if (failure is not None and not failure.is_retryable) or time.monotonic() >= until:
                    break
                await asyncio.sleep(min(random.uniform(*BACKOFF), max(until - time.monotonic(), 0)))
        except BaseException:
            # Cancelled mid-request or between attempts: a grant may have come unheard.
            self._give_back.release_later(token, *raw)
            raise
        if unheard:
            await self._give_back.release_set(raw, token)
        if failure is not None:
            raise failure
        return await self._held_key(keys)

    async def _held_key(self, keys: Sequence[str]) -> str:
        """See :meth:`fencedlock.Locker._held_key`."""
        for key in keys:
            try:
                if _multi.holds(await self.status(key)):
                    return key
            except FencedLockError:
                continue
        return _multi.every_key(keys)

    async def schedule(self, lease: Lease, every: _terms.Seconds) -> Union[Due, NotDue]:
        """See :meth:`fencedlock.Locker.schedule`."""
        every_ms = _periodic.period_ms(every)
        if lease._authority is not self:
            raise InvalidArgument("schedule takes a lease this locker granted")
        return await periodic.schedule(self._server, lease, every_ms)

    async def last_run(self, key: str) -> Optional[LastRun]:
        """See :meth:`fencedlock.Locker.last_run`."""
        return (await periodic.read(self._server, key, _keys.check_key(key))).last_run()

    async def run_at_most_every(
        self,
        key: str,
        every: _terms.Seconds,
        work: Callable[[Lease], Awaitable[T]],
        *,
        ttl: Optional[_terms.Seconds] = None,
        label: Union[str, bytes, None] = None,
    ) -> Periodic[T]:
        """See :meth:`fencedlock.Locker.run_at_most_every`; ``work(lease)`` is awaited, and
        cancelled the moment the lease is lost (:class:`LeaseLost` is raised, the run not
        counted)."""
        _keys.check_key(key)
        every_ms = _periodic.period_ms(every)
        return await periodic.run(self._server, lambda: self.acquire(key, ttl, label=label), every_ms, work)

    async def status(self, key: str) -> Optional[Status]:
        raw_key = _keys.check_key(key)
        engine = await self._server.detect()
        return _wire.decode_status(await self._server.call(_wire.command(engine, _contract.STATUS, raw_key, ())))

    async def release_token(self, key: str, token: bytes) -> bool:
        return await self.release(_keys.check_key(key), _terms.check_token(token))

    async def _downgrade(self, lease: Lease, label: Optional[bytes]) -> None:
        """See :meth:`fencedlock.Locker._downgrade`."""
        lease.ensure_valid()
        engine = await self._server.detect()
        ttl_ms = lease._ttl_ms
        args = _wire.acquire(engine, lease._raw_key, lease.token, ttl_ms, label=label, shared=True)
        sent = time.monotonic()
        fence = _wire.fence_of(await self._server.call(args, secret=lease.token))
        if fence == lease.fence:
            lease._deadline = self._clock.deadline(sent, ttl_ms)
            return
        if fence is not None:
            await self._give_back.release_quietly(lease._raw_key, lease.token)
        raise await lease._ended("the server no longer held it to downgrade")

    async def renew(self, key: bytes, token: bytes, ttl_ms: int, timeout: Optional[float] = None) -> Optional[float]:
        engine = await self._server.detect()
        sent = time.monotonic()
        args = _wire.command(engine, _contract.RENEW, key, (token, ttl_ms))
        bound = min(timeout or self._server.timeout, self._server.timeout)
        if not _wire.flag_of(await self._server.call(args, secret=token, timeout=bound)):
            return None
        return self._clock.deadline(sent, ttl_ms)

    async def release(self, key: bytes, token: bytes) -> bool:
        engine = await self._server.detect()
        args = _wire.command(engine, _contract.RELEASE, key, (token,))
        return _wire.flag_of(await self._server.call(args, secret=token))
