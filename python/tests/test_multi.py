"""Several keys at once (``acquire_all``, ``lease_all``), as the Rust client's
``tests/client/multi.rs``: all or none (a refusal leaves nothing of the set held), no deadlock
between callers naming the same keys in opposite orders, and every lease valid on return
after a long wait; on the engines, over Redlock and on asyncio."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import List, Optional

import pytest
import redis.asyncio

import fencedlock
import fencedlock.asyncio
from fencedlock import InvalidArgument, Leases, Locker, LockStatus, NotAcquired, Redlock, _keys
from servers import Server, Servers


def free(server: Server, key: str) -> bool:
    status = Locker(server.client()).status(key)
    return status is None or (isinstance(status, LockStatus) and not status.held)


def test_every_key_or_none(server: Server) -> None:
    locker = Locker(server.client(), ttl=5)
    taken = locker.acquire_all(["m:b", "m:a", "m:c"], label="host-a")
    assert taken is not None
    assert taken.keys == [lease.key for lease in taken] == ["m:b", "m:a", "m:c"], "in the order named"
    assert all(lease.fence > 0 and lease.label == b"host-a" for lease in taken), "each with its own fence"
    first = taken.get("m:a")
    assert first is not None and first.key == "m:a" and taken.get("m:z") is None
    assert locker.acquire("m:c") is None

    # One key busy: what was taken before it (m:0) is released, what follows (m:z) never taken.
    other = Locker(server.client(), ttl=5)
    assert other.acquire_all(["m:z", "m:c", "m:0"]) is None
    assert free(server, "m:0") and free(server, "m:z"), "nothing of a refused set is held"
    with pytest.raises(NotAcquired) as refused:
        with other.lease_all(["m:z", "m:c", "m:0"]):
            raise AssertionError("never runs unlocked")
    assert refused.value.key == "m:c" and free(server, "m:0")
    assert taken.release() is True
    assert all(free(server, key) for key in ("m:a", "m:b", "m:c"))

    with other.lease_all(("m:a", "m:c"), ttl=5) as leases:
        assert len(leases) == 2 and locker.acquire("m:a") is None
        leases.ensure_valid()
    assert free(server, "m:a") and free(server, "m:c"), "released on exit"

    for bad in ([], ["a", "a"], "ab", ["ok", "bad\nkey"]):
        with pytest.raises(InvalidArgument):
            locker.acquire_all(bad)
    assert free(server, "ok"), "refused before anything was sent"


@pytest.mark.engines("module", "functions")
def test_opposite_orders_never_deadlock(server: Server) -> None:
    """Two threads take {x, y} and {y, x} 20 times each, waiting: both always get through,
    and never hold the pair at the same time."""
    inside = 0
    counting = threading.Lock()
    failures: List[BaseException] = []
    start = threading.Barrier(2, timeout=60)

    def contender(keys: List[str]) -> None:
        locker = Locker(server.client(), ttl=5)
        nonlocal inside
        try:
            for _ in range(20):
                start.wait()  # both start each round at once, when the keys are free
                taken = locker.acquire_all(keys, wait=10)
                assert taken is not None, "granted within the wait"
                with counting:
                    inside += 1
                    assert inside == 1, "both hold the pair"
                time.sleep(0.005)
                with counting:
                    inside -= 1
                assert taken.release()
        except BaseException as err:
            start.abort()
            failures.append(err)

    threads = [threading.Thread(target=contender, args=(keys,)) for keys in (["d:x", "d:y"], ["d:y", "d:x"])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(t.is_alive() for t in threads), "deadlocked"
    assert failures == []


@pytest.mark.engines("module")
def test_a_long_wait_leaves_every_lease_valid(server: Server) -> None:
    """w:b is held for most of w:a's ttl: w:a, taken first, is renewed before the call
    returns."""
    holder = Locker(server.client(), ttl=10).acquire("w:b")
    assert holder is not None
    locker = Locker(server.client(), ttl=3)
    result: List[Optional[Leases]] = []
    waiter = threading.Thread(target=lambda: result.append(locker.acquire_all(["w:a", "w:b"], wait=10)))
    waiter.start()
    time.sleep(2.0)  # most of w:a's validity goes by while w:b is awaited
    assert holder.release()
    waiter.join(30)
    (taken,) = result
    assert taken is not None, "granted after the release"
    taken.ensure_valid()
    first = taken.get("w:a")
    assert first is not None
    assert first.remaining > 2.0, f"w:a was not renewed: {first.remaining:.3f} s left"
    assert taken.release()


@pytest.mark.engines("module")
def test_over_redlock_each_key_by_majority(servers: Servers, engine: str) -> None:
    nodes = [servers.start(engine) for _ in range(3)]
    redlock = Redlock([n.client(socket_timeout=1) for n in nodes], ttl=5, timeout=0.2)
    taken = redlock.acquire_all(["r:2", "r:1"])
    assert taken is not None and taken.keys == ["r:2", "r:1"]
    assert all(sum(not free(n, key) for n in nodes) >= 2 for key in ("r:1", "r:2"))
    assert redlock.acquire_all(["r:0", "r:2"]) is None
    assert all(free(n, "r:0") for n in nodes), "nothing of a refused set is held"
    with pytest.raises(NotAcquired):
        redlock.lease_all(["r:0", "r:1"])
    assert taken.release() is True
    with redlock.lease_all(["r:0", "r:1"]) as leases:
        assert len(leases) == 2
    assert all(free(n, "r:0") and free(n, "r:1") for n in nodes)


@pytest.mark.engines("module", "functions")
def test_asyncio_all_or_none_and_opposite_orders(server: Server) -> None:
    def aclient() -> redis.asyncio.Redis:
        return redis.asyncio.Redis(port=server.port, socket_timeout=10)

    async def run() -> None:
        locker = fencedlock.asyncio.Locker(aclient(), ttl=5)
        taken = await locker.acquire_all(["a:b", "a:a"])
        assert taken is not None and taken.keys == ["a:b", "a:a"]
        assert await fencedlock.asyncio.Locker(aclient()).acquire_all(["a:0", "a:a"]) is None
        assert free(server, "a:0"), "nothing of a refused set is held"
        assert await taken.release() is True
        with pytest.raises(InvalidArgument):
            await locker.acquire_all(["a", "a"])

        inside = 0
        start = asyncio.Barrier(2)

        async def contender(keys: List[str]) -> None:
            nonlocal inside
            mine = fencedlock.asyncio.Locker(aclient(), ttl=5)
            for _ in range(20):
                # Both start each round at once (else the server's handoff to the waiter could
                # keep them taking turns, whatever the order).
                await start.wait()
                async with mine.lease_all(keys, wait=10, keep_alive=False):
                    inside += 1
                    assert inside == 1, "both hold the pair"
                    await asyncio.sleep(0.005)
                    inside -= 1

        await asyncio.wait_for(asyncio.gather(contender(["d:x", "d:y"]), contender(["d:y", "d:x"])), 60)

    asyncio.run(run())


def test_leases_release_sends_every_release_and_reports_each_held(server: Server) -> None:
    locker = Locker(server.client(), ttl=5)
    taken = locker.acquire_all(["k:1", "k:2"], keep_alive=True)
    assert taken is not None
    server.admin().delete("k:1")
    assert taken.release() is False, "k:1 was no longer held"
    assert free(server, "k:2"), "k:2 released all the same"
    assert isinstance(taken.get("k:2"), fencedlock.Lease)


def test_every_caller_takes_the_keys_in_one_order() -> None:
    assert _keys.taking_order(["b", "a", "c"]) == (["b", "a", "c"], ["a", "b", "c"])
    # Two callers naming the same keys in opposite orders take them in the same order.
    assert _keys.taking_order(["k:2", "k:10", "k:1"])[1] == _keys.taking_order(["k:1", "k:2", "k:10"])[1]
    assert _keys.taking_order(["\u00e9", "z", "Z"])[1] == ["Z", "z", "\u00e9"], "by the keys' UTF-8 bytes"
