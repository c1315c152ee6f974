"""A Redlock round that fails gives back what it may have been granted: a RELEASE of its token
to each master that did not refuse. A release that gets no answer (a paused or slow master,
a slow link) can still run on that master later. If the next round asked with the same
token, such a stale release, run after that round was granted there, ends the lease on that
master: the lease handed out stands on fewer masters than counted for its majority, and
another client can win a majority for the same key while the first works under its lease.

Three real masters A, B, C. A is behind a relay (a slow link) that holds back round 1's
RELEASE and delivers it only once the lease was handed out (or, when rounds ask with fresh
tokens, A refuses them while round 1's grant holds it, after a few of those rounds). Round 1
is refused on B and C (other owners hold the key there), so it fails for want of a majority
after A granted it; B's owner leaves right after round 1, C's stays, so the lease needs A and
B. The stale release must not end it on A. (A plain SIGSTOP of A gives the same scenario,
but the order in which A then runs the release and the next round's request, each on a new
connection through redis-py's handshake, differs from run to run.)"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable, List, Optional, Sequence, Tuple

import redis
import redis.asyncio

from fencedlock import Lease, Locker, Redlock, _contract
from fencedlock import asyncio as fasyncio
from fencedlock._wire import as_semaphore
from relay import Relay, wait_until
from servers import Server, Servers

KEY = "redlock-stale-release"
TIMEOUT = 0.5
"""The Redlock's per-request timeout: round 1's release to A goes unanswered for this long."""
WAIT = 10.0
ROUNDS_REFUSED_ON_A = 3
"""Rounds asked of A while the release is held after which it is delivered anyway: with a
fresh token per round A refuses them (round 1's grant holds it until the release runs)."""


def words(engine: str, command: str) -> Sequence[bytes]:
    """What a request of ``command`` on KEY carries on ``engine``'s wire."""
    name = command if engine == "module" else _contract.FUNCTIONS[command]
    return (name.encode(), KEY.encode())


def holder_fences(node: Server, key: str) -> List[int]:
    """The fences of the key's unexpired holders on ``node``, by ``STATUS``."""
    shown = as_semaphore(Locker(node.client()).status(key))
    return [] if shown is None else [h.fence for h in shown.holders]


def masters(servers: Servers, engine: str) -> Tuple[List[Server], Relay]:
    """Three masters A, B and C, and the relay the Redlock under test reaches A through."""
    nodes = [servers.start(engine) for _ in range(3)]
    return nodes, Relay(nodes[0].port)


def refused_on_b_and_c(nodes: List[Server]) -> Tuple[Lease, Lease]:
    """Another owner's leases of KEY on B and C: round 1 is refused there."""
    on_b = Locker(nodes[1].client()).acquire(KEY)
    on_c = Locker(nodes[2].client()).acquire(KEY)
    assert on_b is not None and on_c is not None
    return on_b, on_c


def check_the_lease_stands(nodes: List[Server], fence: int) -> None:
    """Both masters of the lease's majority hold it after the stale release ran."""
    a, b, _ = nodes
    assert fence in holder_fences(a, KEY), (
        f"master A counted for the lease (fence {fence}) but no longer holds it: a stale release of an "
        f"earlier round's token ended it there (A's holders: {holder_fences(a, KEY)})"
    )
    assert fence in holder_fences(b, KEY), f"master B no longer holds the lease (holders {holder_fences(b, KEY)})"


def test_a_stale_release_of_a_failed_round_cannot_end_the_lease_a_later_round_returns(
    servers: Servers, engine: str
) -> None:
    nodes, relay = masters(servers, engine)
    _, b, c = nodes
    try:
        redlock = Redlock([redis.Redis(port=relay.port, socket_timeout=10), b.client(), c.client()], ttl=30, timeout=TIMEOUT)
        warm = redlock.acquire("warm")  # engines detected, connections made
        assert warm is not None and warm.release()
        on_b, on_c = refused_on_b_and_c(nodes)
        relay.hold(words(engine, _contract.RELEASE), count=words(engine, _contract.ACQUIRE))
        result: List[Optional[Lease]] = []
        worker = threading.Thread(target=lambda: result.append(redlock.acquire(KEY, wait=WAIT)))
        worker.start()
        try:
            assert relay.held.wait(10), "round 1 sent no release to master A"
            assert on_b.release() is True  # B is free for the next round; C stays held
            wait_until(lambda: not worker.is_alive() or relay.counted_after_hold >= ROUNDS_REFUSED_ON_A, WAIT + 5)
            asked_before_release = relay.counted_after_hold
            relay.deliver()
            assert relay.answered.wait(10), "the held release never ran on master A"
        finally:
            relay.deliver()
            worker.join(WAIT + 5)
        assert not worker.is_alive()
        assert asked_before_release >= 1, "a later round asked master A before the stale release ran there"
        (lease,) = result
        assert lease is not None, "granted once B was free (C refuses throughout: the majority is A and B)"
        check_the_lease_stands(nodes, lease.fence)
        lease.renew()
        assert on_c.release() is True
        rival = Redlock([n.client() for n in nodes], ttl=30, timeout=TIMEOUT)
        assert rival.acquire(KEY) is None, "another Redlock won a majority while the lease is held"
        assert lease.release() is True
    finally:
        relay.close()



async def until(done: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.005)
    return True


def aclient(port: int) -> redis.asyncio.Redis:
    return redis.asyncio.Redis(port=port, socket_timeout=10)


def test_asyncio_a_stale_release_of_a_failed_round_cannot_end_the_lease_a_later_round_returns(
    servers: Servers, engine: str
) -> None:
    nodes, relay = masters(servers, engine)
    _, b, c = nodes

    async def run() -> None:
        redlock = fasyncio.Redlock([aclient(relay.port), aclient(b.port), aclient(c.port)], ttl=30, timeout=TIMEOUT)
        warm = await redlock.acquire("warm")
        assert warm is not None and await warm.release()
        on_b, on_c = refused_on_b_and_c(nodes)
        relay.hold(words(engine, _contract.RELEASE), count=words(engine, _contract.ACQUIRE))
        task = asyncio.ensure_future(redlock.acquire(KEY, wait=WAIT))
        try:
            assert await until(relay.held.is_set, 10), "round 1 sent no release to master A"
            assert on_b.release() is True
            await until(lambda: task.done() or relay.counted_after_hold >= ROUNDS_REFUSED_ON_A, WAIT + 5)
            asked_before_release = relay.counted_after_hold
            relay.deliver()
            assert await until(relay.answered.is_set, 10), "the held release never ran on master A"
        finally:
            relay.deliver()
            lease = await asyncio.wait_for(task, WAIT + 5)
        assert asked_before_release >= 1, "a later round asked master A before the stale release ran there"
        assert lease is not None, "granted once B was free (C refuses throughout: the majority is A and B)"
        check_the_lease_stands(nodes, lease.fence)
        await lease.renew()
        assert on_c.release() is True
        rival = fasyncio.Redlock([aclient(n.port) for n in nodes], ttl=30, timeout=TIMEOUT)
        assert await rival.acquire(KEY) is None, "another Redlock won a majority while the lease is held"
        assert await lease.release() is True

    try:
        asyncio.run(run())
    finally:
        relay.close()
