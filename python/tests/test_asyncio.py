"""The asyncio API over redis.asyncio: the same leases, waiting in arrival order with
several tasks, keep-alive as a task, cancellation that leaves nothing held, Redlock and
elections."""

from __future__ import annotations

import asyncio
import time
from typing import List

import pytest
import redis.asyncio

import fencedlock
from fencedlock.asyncio import Election, Engine, Locker, Redlock
from servers import Server, Servers


def aclient(server: Server, **kwargs: object) -> redis.asyncio.Redis:
    return redis.asyncio.Redis(port=server.port, socket_timeout=10, **kwargs)  # type: ignore[arg-type]


@pytest.mark.all_flavors
def test_leases_fences_and_refusals(server: Server, engine: str) -> None:
    async def run() -> None:
        locker = Locker(aclient(server), ttl=5)
        first = await locker.acquire("k")
        assert first is not None and locker.engine is Engine(engine)
        assert await locker.acquire("k") is None
        assert await first.release()
        await server_delete(server, "k")
        second = await locker.acquire("k")
        assert second is not None and second.fence > first.fence
        status = await locker.status("k")
        assert isinstance(status, fencedlock.LockStatus) and status.fence == second.fence
        with pytest.raises(fencedlock.InvalidArgument):
            await locker.acquire("bad\nkey")
        with pytest.raises(fencedlock.NotAcquired):
            async with locker.lease("k", wait=0.1):
                raise AssertionError("never runs unlocked")
        await second.release()
        async with locker.lease("k", ttl=0.6) as lease:
            await asyncio.sleep(1.0)
            lease.ensure_valid()
        assert await locker.acquire("k") is not None

    asyncio.run(run())


async def server_delete(server: Server, key: str) -> None:
    server.admin().delete(key)


def test_tasks_are_granted_in_arrival_order(server: Server) -> None:
    async def run() -> None:
        locker = Locker(aclient(server), ttl=10)
        holder = await locker.acquire("hot")
        assert holder is not None
        order: List[int] = []

        async def waiter(i: int) -> None:
            lease = await locker.acquire("hot", wait=20)
            assert lease is not None
            order.append(i)
            await asyncio.sleep(0.02)
            await lease.release()

        tasks = []
        for i in range(5):
            tasks.append(asyncio.create_task(waiter(i)))
            await asyncio.sleep(0.15)
        await holder.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        assert order == list(range(5))

    asyncio.run(run())


def test_keep_alive_task_signals_loss_on_del(server: Server) -> None:
    async def run() -> None:
        locker = Locker(aclient(server), ttl=0.6, timeout=0.2)
        lost: List[fencedlock.asyncio.Lease] = []

        async def on_lost(lease: fencedlock.asyncio.Lease) -> None:
            lost.append(lease)

        lease = await locker.acquire("job", keep_alive=True, on_lost=on_lost)
        assert lease is not None
        await asyncio.sleep(0.9)
        lease.ensure_valid()
        server.admin().delete("job")
        await asyncio.wait_for(lease.lost.wait(), 1.0)
        assert lost == [lease]
        with pytest.raises(fencedlock.LeaseLost):
            lease.ensure_valid()

    asyncio.run(run())


def test_a_cancelled_wait_holds_nothing_and_leaves_the_queue(server: Server) -> None:
    async def run() -> None:
        locker = Locker(aclient(server), ttl=10)
        holder = await locker.acquire("k")
        assert holder is not None
        waiting = asyncio.create_task(locker.acquire("k", wait=10))
        await asyncio.sleep(0.2)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert await holder.release()
        await asyncio.sleep(0.6)
        nxt = await locker.acquire("k")
        assert nxt is not None, "the cancelled waiter holds nothing"

    asyncio.run(run())


def test_redlock_with_one_master_stopped(servers: Servers, engine: str) -> None:
    nodes = [servers.start(engine) for _ in range(3)]

    async def run() -> None:
        redlock = Redlock([aclient(n) for n in nodes], ttl=5, timeout=0.2)
        first = await redlock.acquire("k")
        assert first is not None and await first.release()
        nodes[0].pause()
        try:
            started = time.monotonic()
            lease = await redlock.acquire("k")
            assert lease is not None and lease.fence > first.fence
            assert time.monotonic() - started < 1.5
            assert await redlock.acquire("k") is None
            assert await lease.release()
        finally:
            nodes[0].resume()

    asyncio.run(run())


@pytest.mark.engines("functions")
def test_redlock_release_is_not_held_up_by_requests_stuck_on_a_stopped_master(servers: Servers, engine: str) -> None:
    """The asyncio twin of the test in test_faults.py: requests stuck on a stopped master
    (each waiting for a new connection's socket timeout) leave a release to the others
    unhindered."""
    nodes = [servers.start(engine) for _ in range(3)]

    async def run() -> None:
        redlock = Redlock([aclient(n) for n in nodes], ttl=10, timeout=0.2)
        lease = await redlock.acquire("k")
        assert lease is not None
        nodes[0].pause()
        try:
            assert await redlock.acquire("k", wait=4) is None
            started = time.monotonic()
            assert await lease.release() is True
            assert time.monotonic() - started < 1
            for node in nodes[1:]:
                status = await Locker(aclient(node)).status("k")
                assert isinstance(status, fencedlock.LockStatus) and not status.held, f"port {node.port} still holds the lease"
        finally:
            nodes[0].resume()

    asyncio.run(run())


def test_election_epochs_rise_and_observers_see_the_leader(server: Server) -> None:
    async def run() -> None:
        locker = Locker(aclient(server), ttl=2)
        election = Election(locker, "scheduler")
        assert await election.leader() is None
        a = await election.campaign("host-a")
        b_task = asyncio.create_task(election.campaign("host-b"))
        seen = election.observe(every=0.05)
        first = await seen.__anext__()
        assert first is not None and first.label == b"host-a" and first.epoch == a.epoch
        await asyncio.sleep(0.1)
        assert not b_task.done()
        assert await a.resign()
        b = await asyncio.wait_for(b_task, 5)
        assert b.epoch > a.epoch
        second = await asyncio.wait_for(seen.__anext__(), 5)
        assert second is not None and second.label == b"host-b"
        await b.resign()

    asyncio.run(run())
