"""Leases from one server through the user's own redis-py client."""

from __future__ import annotations

import contextlib
import random
import time
from typing import AsyncIterator, Awaitable, Callable, Iterable, List, Optional, Sequence, TypeVar, Union

import redis.asyncio

from .. import _clients, _contract, _keys, _multi, _periodic, _terms, _wire
from .._terms import BACKOFF, EngineName, engine_choice
from .._wire import Engine, Status
from ..errors import Cause, FencedLockError, InvalidArgument, NotAcquired, Unavailable
from . import _backend, periodic
from ._give_back import GiveBack
from ._server import Server
from .lease import Lease, LostCallback
from .multi import Leases, take_all
from .periodic import Due, LastRun, NotDue, Periodic

T = TypeVar("T")


class Locker:
    """Takes leases on keys of one server, over the redis-py client you configured
    (``redis.Redis``, ``Sentinel(...).master_for(...)``, TLS, unix sockets).

    >>> locker = Locker(redis.asyncio.Redis())
    >>> lease = await locker.acquire("invoice:inv_72", ttl=30)   # a Lease, or None if held elsewhere
    >>> async with locker.lease("nightly-report", ttl=30, wait=10) as lease:
    ...     build_report(lease.fence)                        # kept alive; NotAcquired if not granted

    ``ttl`` is the default lease time in seconds; ``timeout`` bounds each request (seconds),
    the whole of it: connecting and the connection's handshake included, on connections the
    locker makes from the client's settings without redis-py's retries (see ``_clients``);
    ``engine`` is ``"auto"`` (the module where loaded, else the Functions library, loaded when
    missing or older, else the library as a script) or one of them.
    """

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
        """The engine serving this server, once a request found it out."""
        return self._server.engine

    async def detect_engine(self) -> Engine:
        """The engine, asking the server now if no request has yet."""
        return await self._server.detect()

    # -- acquiring -----------------------------------------------------------------------

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
        """A lease on ``key``, or ``None`` while another owner holds it (after ``wait``
        seconds of waiting, if given: on the module in the server's FIFO queue, on the
        Functions engine woken by releases). ``permits=n`` makes the key a semaphore of n
        holders; ``label`` is public (``STATUS`` shows it); ``token`` re-enters a lease
        held with that token (same fence, the lease restarted). Read leases are
        :class:`~fencedlock.ReadWriteLock`'s.

        A ``token`` passed in stays the caller's: it is never released here, not even when
        an attempt went unanswered (that would end the lease the caller holds with it), so a
        call that raises may leave it holding the key, re-entered or newly granted, until its
        ttl or the caller's :meth:`release_token`. Without ``token`` an attempt that may have
        been granted unheard is given back, and nothing is left held when the call fails (or,
        on asyncio, is cancelled: a cancelled wait leaves the server's queue)."""
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
        server = self._server
        until = time.monotonic() + wait_s
        while True:
            engine = await server.detect()
            attempt = _wire.acquire(engine, raw_key, token, ttl_ms, label=raw_label, permits=permits, shared=shared)
            sent = time.monotonic()
            try:
                if wait_s > 0:
                    fence = await self._wait(engine, raw_key, token, ttl_ms, raw_label, permits, shared, until, ours=ours)
                else:
                    fence = _wire.fence_of(await server.call(attempt, secret=token))
                break
            except FencedLockError as err:
                if ours and err.cause is Cause.TIMED_OUT:
                    # The server may grant it when it answers again: give it back then.
                    self._give_back.release_later(token, raw_key)
                if not err.is_retryable or time.monotonic() >= until:
                    raise
                if ours:
                    # Retried with a fresh token, never the one just given up: a release of
                    # it still in flight (the background passes above, at once and one
                    # timeout later, or _wait's own release, which may itself go unanswered
                    # and run late) would otherwise end the lease this retry returns, and
                    # another owner could take the lock while the caller works under it.
                    # Releases by the old token can end only the old token's late grant,
                    # never the new token's lease. (Waiting for them instead would not do:
                    # one without an answer may still run later, in any order with the retry.)
                    # A caller's token is retried as it is and never released (it may hold
                    # the caller's lease): a late grant of it is the same lease re-entered.
                    token = _terms.new_token()
            await _backend.sleep(min(random.uniform(*BACKOFF), max(until - time.monotonic(), 0)))
        if fence is None:
            return None
        lease = Lease(self, key, raw_key, token, fence, ttl_ms, self._clock.deadline(sent, ttl_ms), self._clock, self._renew_every, raw_label,
                      shown_label=label)
        if self._clock.needs_anchor(time.monotonic() - sent, ttl_ms):
            # A grant handed over after a long wait began at the handoff: measure from a RENEW.
            try:
                await lease._renew(None)
            except Unavailable:
                if not lease.is_valid():
                    if ours:
                        await self._give_back.release_unheard(token, raw_key)
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
        """One waiting request. With a token that is ``ours`` (made by :meth:`_take`), a
        grant the server may have made without our hearing of it (no answer, or interrupted)
        is given back before the error goes on, and again one timeout later (a release that
        reaches a stopped server may run before the grant it gives back); a caller's token is
        left alone (see :meth:`_take`)."""
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
                await self._give_back.release_unheard(token, key)
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
        """``async with locker.lease(key, ttl=30, wait=10) as lease:`` runs the body under a
        (kept-alive) lease and releases it after; raises :class:`NotAcquired` when the lock
        was not granted, so the body never runs unlocked."""
        lease = await self.acquire(
            key, ttl, wait=wait, permits=permits, label=label, keep_alive=keep_alive, on_lost=on_lost
        )
        if lease is None:
            raise NotAcquired(key)
        async with lease:
            yield lease

    # -- several keys ----------------------------------------------------------------------

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
        """A lease on every key of ``keys``, each with its own fence, or ``None`` with nothing
        held when one is held elsewhere (after ``wait`` seconds in all, if given). Keys are
        taken in their byte order, so callers naming overlapping keys in different orders
        cannot deadlock; a refusal or an error releases every key taken before the call
        returns. :class:`InvalidArgument` for no keys or a key named twice.

        Where the server's module has ``ACQUIREALL`` (on a Redis Cluster node, for keys of one
        slot), or its leases are the Functions library's (``fencedlock_acquireall``, for keys of
        one slot on any server), a set of up to 64 keys is taken in one command, for one token:
        every key or none, at once, retried whole with backoff while ``wait`` lasts, holding
        nothing in between. Elsewhere (an older module, keys of several slots on the library
        or a cluster node, more than 64 keys) key by key, as above."""
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
        """``async with locker.lease_all([a, b], ttl=30, wait=10) as leases:``: the body runs under
        (kept-alive) leases on every key, released after; :class:`NotAcquired` naming the
        key that was refused (a set refused in one command: the key held now, or every key
        when none is)."""
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
        """Whether the server takes ``keys`` in one ``ACQUIREALL`` (``Server.one_command``).
        A server that cannot be asked now is passed over: the keys are then taken one by one,
        with each key's retries."""
        try:
            return (await self._server.one_command()).takes(keys)
        except FencedLockError:
            return False

    async def _take_at_once(
        self, keys: List[str], raw: List[bytes], ttl_ms: int, label: Optional[bytes], wait: float, *,
        shown_label: Union[str, bytes, None] = None,
    ) -> Union[Leases, str]:
        """``keys`` in ``ACQUIREALL``s for one token (the module's command, or the library's
        ``fencedlock_acquireall`` by ``FCALL`` or ``EVALSHA``, whose script the server loads
        again when it lost it): once, or with backoff until granted, an error is final, or
        ``wait`` ran out; the leases, or the name of the key held now. Every attempt sends the
        same token, so one sent again after a lost reply gets the same fences (the server
        re-enters them); a set that may have been granted without our hearing of it is
        released before the call raises or returns."""
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
                await _backend.sleep(min(random.uniform(*BACKOFF), max(until - time.monotonic(), 0)))
        except BaseException:
            # Interrupted mid-request or between attempts: a grant may have come unheard.
            self._give_back.release_later(token, *raw)
            raise
        if unheard:
            await self._give_back.release_set(raw, token)
        if failure is not None:
            raise failure
        return await self._held_key(keys)

    async def _held_key(self, keys: Sequence[str]) -> str:
        """The key of a refused set to name: the first one ``STATUS`` shows held now, or every
        key when none is (refused for a waiter queued on one, or freed since)."""
        for key in keys:
            try:
                if _multi.holds(await self.status(key)):
                    return key
            except FencedLockError:
                continue
        return _multi.every_key(keys)

    # -- periodic jobs -------------------------------------------------------------------

    async def schedule(self, lease: Lease, every: _terms.Seconds) -> Union[Due, NotDue]:
        """Whether the job guarded by ``lease`` (one this locker granted) is due, for a job
        that runs at most once every ``every`` seconds: read under the lease, on the server's
        clock. :class:`Due` (run the job, then :meth:`Due.record` it before releasing) or
        :class:`NotDue`. :class:`BadRecord` when the key's record was not written by
        fencedlock."""
        every_ms = _periodic.period_ms(every)
        if lease._authority is not self:
            raise InvalidArgument("schedule takes a lease this locker granted")
        return await periodic.schedule(self._server, lease, every_ms)

    async def last_run(self, key: str) -> Optional[LastRun]:
        """The last counted run of the periodic job on ``key``, if one is on record."""
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
        """Runs ``work(lease)`` at most once every ``every`` seconds across every process
        that calls this for ``key``: takes the lease without waiting (:class:`Busy` when
        another holder has it), runs ``work`` under the kept-alive lease only if the job is
        due (else :class:`NotDue`), records the run when ``work`` returns, and releases:
        :class:`Ran` with what ``work`` returned. A ``work`` that raises is not counted (the
        next holder runs the job again) and its exception goes on; a lease lost during the
        run is :class:`LeaseLost` when ``work`` returns, and the run is not counted either.
        ``label`` is recorded as who ran the job."""
        _keys.check_key(key)
        every_ms = _periodic.period_ms(every)
        return await periodic.run(self._server, lambda: self.acquire(key, ttl, label=label), every_ms, work)

    # -- the server's view ---------------------------------------------------------------

    async def status(self, key: str) -> Optional[Status]:
        """``STATUS``: a :class:`LockStatus` or a :class:`SemaphoreStatus` (never a token);
        ``None`` for a key without lock state."""
        raw_key = _keys.check_key(key)
        engine = await self._server.detect()
        return _wire.decode_status(await self._server.call(_wire.command(engine, _contract.STATUS, raw_key, ())))

    async def release_token(self, key: str, token: bytes) -> bool:
        """Ends the lease ``token`` holds on ``key`` (a token handed over by another process)."""
        return await self.release(_keys.check_key(key), _terms.check_token(token))

    async def _downgrade(self, lease: Lease, label: Optional[bytes]) -> None:
        """``ACQUIRE … SHARED`` with the write lease's own token, one attempt, no wait: the
        server keeps its fence and restarts it as a read lease. Any other answer means the
        lease had ended (another writer may have come between): a new grant is released
        again, and the lease is lost."""
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

    # -- the lease's authority -----------------------------------------------------------

    async def renew(self, key: bytes, token: bytes, ttl_ms: int, timeout: Optional[float] = None) -> Optional[float]:
        engine = await self._server.detect()
        sent = time.monotonic()
        args = _wire.command(engine, _contract.RENEW, key, (token, ttl_ms))
        if not _wire.flag_of(await self._server.call(args, secret=token, timeout=min(timeout or self._server.timeout, self._server.timeout))):
            return None
        return self._clock.deadline(sent, ttl_ms)

    async def release(self, key: bytes, token: bytes) -> bool:
        engine = await self._server.detect()
        args = _wire.command(engine, _contract.RELEASE, key, (token,))
        return _wire.flag_of(await self._server.call(args, secret=token))
