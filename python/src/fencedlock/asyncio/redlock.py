"""Fenced Redlock over N independent masters, each a redis-py client of yours.

A lease is granted when a majority grants it within its validity (ttl minus the time the
round took minus drift). Plain Redlock has no usable fence: every master counts its own, and
successive grants from different majorities can carry falling fences. So, as the Rust
client's ``Fencing::Raise``: after a majority granted with fences ``f_1..f_k``, every granting
master below ``F = max f_i`` is asked to ``RAISE`` the key's fence to ``F`` (owner-checked),
and the lease is handed out with fence ``F`` only once a majority holds it (a master that
granted ``F`` itself counts without a RAISE). Any later grant's majority shares a master with
that confirming majority, which held ``F`` before it could grant again, so the later fence is
higher (while a majority keeps its state; see the Rust docs of ``fencedlock::Fencing``).
"""

from __future__ import annotations

import random
import time
from typing import Awaitable, Callable, Iterable, List, Optional, Sequence, TypeVar, Union

import redis.asyncio

from .. import _clients, _contract, _keys, _periodic, _quorum, _terms, _wire
from .._quorum import Answer, Tally, Vote
from .._terms import BACKOFF, EngineName, engine_choice
from ..errors import FencedLockError, InvalidArgument, NotAcquired, Unavailable
from . import _backend, periodic
from ._server import Server
from .lease import Lease, LostCallback
from .multi import Leases, take_all
from .periodic import Due, LastRun, NotDue, Periodic

T = TypeVar("T")


class Redlock:
    """Leases by majority of ``clients`` (one per independent master), with fences that rise
    across successive grants. ``timeout`` bounds each request to a master, connection set-up
    included (see :class:`fencedlock.Locker`)."""

    def __init__(
        self,
        clients: Sequence[redis.asyncio.Redis],
        *,
        ttl: _terms.Seconds = 30,
        timeout: _terms.Seconds = 0.25,
        engine: EngineName = None,
        drift_factor: float = 0.01,
        drift: _terms.Seconds = 0.002,
        renew_every: Optional[_terms.Seconds] = None,
    ) -> None:
        if not clients:
            raise InvalidArgument("Redlock needs at least one client")
        for client in clients:
            _clients.check_async(client, "Redlock")
        if len({id(c) for c in clients}) != len(clients):
            raise InvalidArgument("a client is given twice")
        self._ttl_ms = _terms.ttl_ms(ttl)
        request_timeout = _terms.seconds(timeout, "timeout")
        if request_timeout <= 0:
            raise InvalidArgument("timeout must be positive")
        choice = engine_choice(engine)
        self._servers = [Server(c, timeout=request_timeout, engine=choice) for c in clients]
        self._timeout = request_timeout
        self._clock = _terms.Clock(drift_factor, _terms.seconds(drift, "drift"))
        self._renew_every = None if renew_every is None else _terms.seconds(renew_every, "renew_every")
        self.quorum = _quorum.quorum(len(clients))
        # The requests to the masters: tasks, or threads (see _backend.Pool).
        self._pool = _backend.Pool("fencedlock-redlock")

    @property
    def names(self) -> List[str]:
        return [s.name for s in self._servers]

    async def acquire(
        self,
        key: str,
        ttl: Optional[_terms.Seconds] = None,
        *,
        wait: Optional[_terms.Seconds] = None,
        keep_alive: bool = False,
        on_lost: Optional[LostCallback] = None,
    ) -> Optional[Lease]:
        """A lease granted by a majority, or ``None`` while another owner holds it (after
        rounds with jittered backoff for ``wait`` seconds). :class:`QuorumNotReached` (an
        :class:`Unavailable`) when the last round had no majority because masters did not
        answer and none refused."""
        raw_key = _keys.check_key(key)
        ttl_ms = self._ttl_ms if ttl is None else _terms.ttl_ms(ttl)
        until = time.monotonic() + _terms.wait_seconds(wait)
        while True:
            # A fresh token every round: a failed round's release that got no answer (a
            # stopped or slow master) may still run there later, after the next round was
            # granted; with the same token it would end the lease on that master, which would
            # then stand on fewer masters than its majority counted (another client could win
            # one while the caller works under it). The lease has the granted round's token.
            token = _terms.new_token()
            lease, failure = await self._round(key, raw_key, token, ttl_ms)
            if lease is not None:
                if keep_alive:
                    lease.keep_alive(on_lost)
                return lease
            left = until - time.monotonic()
            if left <= 0:
                if failure is not None:
                    raise failure
                return None
            await _backend.sleep(min(random.uniform(*BACKOFF), left))

    async def lease(self, key: str, ttl: Optional[_terms.Seconds] = None, *, wait: Optional[_terms.Seconds] = None,
              keep_alive: bool = True, on_lost: Optional[LostCallback] = None) -> Lease:
        """The lease for ``with``: :class:`NotAcquired` when it was not granted."""
        lease = await self.acquire(key, ttl, wait=wait, keep_alive=keep_alive, on_lost=on_lost)
        if lease is None:
            raise NotAcquired(key)
        return lease

    async def acquire_all(
        self,
        keys: Iterable[str],
        ttl: Optional[_terms.Seconds] = None,
        *,
        wait: Optional[_terms.Seconds] = None,
        keep_alive: bool = False,
        on_lost: Optional[LostCallback] = None,
    ) -> Optional[Leases]:
        """A lease on every key, each granted by a majority, or ``None`` with nothing held
        (see :meth:`fencedlock.Locker.acquire_all`)."""
        taken = await self._take_all(keys, ttl, wait)
        if isinstance(taken, str):
            return None
        return taken.keep_alive(on_lost) if keep_alive else taken

    async def lease_all(self, keys: Iterable[str], ttl: Optional[_terms.Seconds] = None, *, wait: Optional[_terms.Seconds] = None,
                  keep_alive: bool = True, on_lost: Optional[LostCallback] = None) -> Leases:
        """The leases for ``with``: :class:`NotAcquired` naming the key that was refused."""
        taken = await self._take_all(keys, ttl, wait)
        if isinstance(taken, str):
            raise NotAcquired(taken)
        return taken.keep_alive(on_lost) if keep_alive else taken

    async def _take_all(self, keys: Iterable[str], ttl: Optional[_terms.Seconds], wait: Optional[_terms.Seconds]) -> Union[Leases, str]:
        ttl_ms = self._ttl_ms if ttl is None else _terms.ttl_ms(ttl)
        return await take_all(lambda key, left: self.acquire(key, ttl, wait=left), keys, _terms.wait_seconds(wait), self._clock.window(ttl_ms))

    # -- periodic jobs: on one master only -----------------------------------------------

    def _periodic_server(self) -> Server:
        """The one server whose clock measures periods; independent masters have none."""
        if len(self._servers) != 1:
            raise InvalidArgument(_periodic.MULTI_MASTER)
        return self._servers[0]

    async def schedule(self, lease: Lease, every: _terms.Seconds) -> Union[Due, NotDue]:
        """:class:`InvalidArgument` over several masters (see :meth:`fencedlock.Locker.schedule`)."""
        server = self._periodic_server()
        if lease._authority is not self:
            raise InvalidArgument("schedule takes a lease this Redlock granted")
        return await periodic.schedule(server, lease, _periodic.period_ms(every))

    async def last_run(self, key: str) -> Optional[LastRun]:
        """:class:`InvalidArgument` over several masters (see :meth:`fencedlock.Locker.last_run`)."""
        raw_key = _keys.check_key(key)
        return (await periodic.read(self._periodic_server(), key, raw_key)).last_run()

    async def run_at_most_every(
        self, key: str, every: _terms.Seconds, work: Callable[[Lease], Awaitable[T]], *, ttl: Optional[_terms.Seconds] = None
    ) -> Periodic[T]:
        """:class:`InvalidArgument` over several masters, before anything is taken (see
        :meth:`fencedlock.Locker.run_at_most_every`)."""
        server = self._periodic_server()
        _keys.check_key(key)
        every_ms = _periodic.period_ms(every)
        return await periodic.run(server, lambda: self.acquire(key, ttl), every_ms, work)

    async def _round(self, key: str, raw_key: bytes, token: bytes, ttl_ms: int) -> tuple[Optional[Lease], Optional[FencedLockError]]:
        sent = time.monotonic()

        async def ask(server: Server) -> Vote:
            engine = await server.detect()
            fence = _wire.fence_of(await server.call(_wire.acquire(engine, raw_key, token, ttl_ms), secret=token))
            return Answer.REFUSED if fence is None else fence

        votes = await self._parallel(ask, Tally(self.quorum, len(self._servers)))
        grants = [(i, v) for i, v in enumerate(votes) if isinstance(v, int)]
        fence: Optional[int] = None
        if len(grants) >= self.quorum and time.monotonic() < self._clock.deadline(sent, ttl_ms):
            fence = await self._raise(raw_key, token, grants)
        if fence is not None and time.monotonic() < self._clock.deadline(sent, ttl_ms):
            return Lease(self, key, raw_key, token, fence, ttl_ms, self._clock.deadline(sent, ttl_ms), self._clock, self._renew_every), None
        # No usable majority: give back what any node may have granted (not the refusers').
        owed = [i for i, v in enumerate(votes) if v is not Answer.REFUSED]
        await self._parallel(lambda s: self._release_one(s, raw_key, token), Tally(len(owed), len(owed)), only=owed, settle=True)
        return None, _quorum.not_reached(key, votes, self.names)

    async def _raise(self, key: bytes, token: bytes, grants: List[tuple[int, int]]) -> Optional[int]:
        """RAISE to the grants' maximum on every granting node below it; the fence if a majority
        holds it. A node that granted the maximum is not asked: it issued that fence to our
        token, which is what a RAISE reply would confirm, so on a key leased again and again
        (where one raise leaves every node at the same fence) most leases need no raise."""
        target = max(fence for _, fence in grants)
        at_target = sum(1 for _, fence in grants if fence == target)
        if at_target >= self.quorum:
            return target
        below = [i for i, fence in grants if fence < target]

        async def ask(server: Server) -> Vote:
            engine = await server.detect()
            reply = _wire.fence_of(await server.call(_wire.command(engine, _contract.RAISE, key, (token, target)), secret=token))
            return reply if reply is not None and reply >= target else Answer.REFUSED

        votes = await self._parallel(ask, Tally(self.quorum - at_target, len(below)), only=below)
        return target if at_target + sum(map(_quorum.is_yes, votes)) >= self.quorum else None

    async def _parallel(self, ask: Callable[[Server], Awaitable[Vote]], tally: Tally, only: Optional[List[int]] = None, settle: bool = False) -> List[Vote]:
        """``ask`` of every server (or those in ``only``) at once, until ``tally`` is decided
        or every request's timeout passed; one vote per server, ``NOT_AWAITED`` for those not
        asked or not waited for."""
        targets = list(range(len(self._servers))) if only is None else only
        votes: List[Vote] = [Answer.NOT_AWAITED] * len(self._servers)

        async def guarded(server: Server) -> Vote:
            try:
                return await ask(server)
            except FencedLockError as err:
                return err

        pending = {self._pool.submit(guarded, self._servers[i]): i for i in targets}
        # Detection may take a few requests: a generous bound over one request's timeout.
        give_up = time.monotonic() + 4 * self._timeout
        if settle:
            # A release waits for every answer for one request's time, so that a release
            # still in flight to a node is not overtaken by the next round's ACQUIRE there.
            give_up = time.monotonic() + self._timeout
        while pending and (settle or not tally.decided()):
            done, _ = await self._pool.first_done(pending, max(give_up - time.monotonic(), 0))
            if not done:
                # The round's time ran out: a node that has not answered did not answer.
                for i in pending.values():
                    votes[i] = _quorum.unanswered(self._servers[i].name, self._timeout)
                break
            for future in done:
                i = pending.pop(future)
                votes[i] = future.result()
                tally.record(votes[i])
        return votes

    @staticmethod
    async def _release_one(server: Server, key: bytes, token: bytes) -> Vote:
        engine = await server.detect()
        held = _wire.flag_of(await server.call(_wire.command(engine, _contract.RELEASE, key, (token,)), secret=token))
        return Answer.YES if held else Answer.REFUSED

    # -- the lease's authority -----------------------------------------------------------

    async def renew(self, key: bytes, token: bytes, ttl_ms: int, timeout: Optional[float] = None) -> Optional[float]:
        sent = time.monotonic()

        async def ask(server: Server) -> Vote:
            engine = await server.detect()
            held = _wire.flag_of(await server.call(_wire.command(engine, _contract.RENEW, key, (token, ttl_ms)), secret=token))
            return Answer.YES if held else Answer.REFUSED

        votes = await self._parallel(ask, Tally(self.quorum, len(self._servers), either_way=True))
        held = _quorum.majority_held(votes, self.quorum)
        if held and time.monotonic() < self._clock.deadline(sent, ttl_ms):
            return self._clock.deadline(sent, ttl_ms)
        if held is False:
            return None
        raise Unavailable(f"renewal without a majority: {_quorum.describe(votes, self.names)}")

    async def release(self, key: bytes, token: bytes) -> bool:
        n = len(self._servers)
        votes = await self._parallel(lambda s: self._release_one(s, key, token), Tally(self.quorum, n, either_way=True), settle=True)
        held = _quorum.majority_held(votes, self.quorum)
        if held is None:
            raise Unavailable(f"release without a majority's answer: {_quorum.describe(votes, self.names)}")
        return held

    def close(self) -> None:
        """Stops the threads that ask the masters, in the sync package (requests still out
        finish first); nothing to stop on asyncio, whose requests are tasks on the loop."""
        self._pool.close()
