"""Several keys at once (``acquire_all``, ``lease_all``), as the Rust client's
``tests/client/multi.rs``: all or none (a refusal leaves nothing of the set held), no deadlock
between callers naming the same keys in opposite orders, and every lease valid on return
after a long wait; on the engines, over Redlock and on asyncio. On a module server that has
``FENCEDLOCK.ACQUIREALL``, and on the Functions library (``fencedlock_acquireall`` by
``FCALL``, or ``EVALSHA`` as the script) for keys of one slot, a set is one command for one
token, read back from the server's ``INFO commandstats``; elsewhere (a server hiding
``COMMAND``, keys of several slots on the library or a cluster node, more than 64 keys) key by
key, and the command is never sent."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import List, Optional

import pytest
import redis.asyncio

import fencedlock
import fencedlock.asyncio
from fencedlock import InvalidArgument, Leases, Locker, LockStatus, NotAcquired, Redlock, Unavailable, _keys
from servers import Server, Servers, calls, free_port


def free(server: Server, key: str) -> bool:
    status = Locker(server.client()).status(key)
    return status is None or (isinstance(status, LockStatus) and not status.held)


def assert_held_as_granted(locker: Locker, taken: Leases) -> None:
    """Every lease of ``taken`` (labelled ``host-a``, for 5 s) is held on the server with its
    fence and label, valid for the ttl counted from before the request."""
    for lease in taken:
        status = locker.status(lease.key)
        assert isinstance(status, LockStatus) and status.held and status.fence == lease.fence
        assert status.label == b"host-a" and lease.label == "host-a"
        assert 4.0 < lease.remaining <= 5.0, "valid for the ttl from before the request"


def assert_each_lease_is_its_own(server: Server, taken: Leases, first: str, other: str) -> None:
    """Each lease of ``taken`` is a lease like any other: ``first`` is renewed and released on
    its own key while ``other`` stays held; the set's release then finds ``first`` gone, and
    frees every key."""
    lease = taken.get(first)
    assert lease is not None
    lease.renew()
    assert lease.release() is True and free(server, first) and not free(server, other)
    assert taken.release() is False, f"{first} was released already"
    assert all(free(server, key) for key in taken.keys)


def test_every_key_or_none(server: Server) -> None:
    locker = Locker(server.client(), ttl=5)
    taken = locker.acquire_all(["m:b", "m:a", "m:c"], label="host-a")
    assert taken is not None
    assert taken.keys == [lease.key for lease in taken] == ["m:b", "m:a", "m:c"], "in the order named"
    assert all(lease.fence > 0 and lease.label == "host-a" for lease in taken), "each with its own fence"
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


# -- one ACQUIREALL where the server has it --------------------------------------------------


def errors(stats: redis.Redis, code: str) -> int:
    """Error replies of ``code`` so far (``INFO errorstats``)."""
    return int(stats.info("errorstats").get(f"errorstat_{code}", {}).get("count", 0))


ACQUIREALL = "fencedlock.acquireall"
ACQUIRE = "fencedlock.acquire"
LIBRARY_CALL = {"functions": "fcall", "script": "evalsha"}
"""The command that carries every call of the library on its engines (``commandstats`` does
not tell the library's functions apart)."""


def set_calls(stats: redis.Redis, engine: str) -> int:
    """Calls of the command that takes a set in one request on ``engine``: ``ACQUIREALL`` on
    the module; on the library, every ``FCALL`` (or ``EVALSHA``), whatever its function."""
    return calls(stats, ACQUIREALL if engine == "module" else LIBRARY_CALL[engine])


def held_by(server: Server, key: str, fence: int) -> bool:
    status = Locker(server.client()).status(key)
    return isinstance(status, LockStatus) and status.held and status.fence == fence


@pytest.mark.engines("module")
def test_a_set_is_one_command_for_one_token(server: Server) -> None:
    stats = server.admin()
    locker = Locker(server.client(), ttl=5)
    taken = locker.acquire_all(["o:c", "o:a", "o:b"], label="host-a")
    assert taken is not None and taken.keys == ["o:c", "o:a", "o:b"]
    assert calls(stats, ACQUIREALL) == 1 and calls(stats, ACQUIRE) == 0, "one ACQUIREALL, no ACQUIRE"
    assert len({lease.token for lease in taken}) == 1, "one token for every lease"
    fences = [lease.fence for lease in taken]
    assert fences == sorted(set(fences)), f"fences rise in the order named: {fences}"
    assert_held_as_granted(locker, taken)

    # Each lease is a lease like any other: renewed and released on its own key.
    assert_each_lease_is_its_own(server, taken, "o:a", "o:b")

    # The server's capability was asked once (COMMAND INFO: the engine, then ACQUIREALL).
    asked = calls(stats, "command|info")
    with locker.lease_all(["o:a", "o:b"], keep_alive=False) as leases:
        assert len({lease.token for lease in leases}) == 1 and all(lease.fence > max(fences) for lease in leases)
    assert calls(stats, "command|info") == asked, "asked once per server"
    assert calls(stats, ACQUIREALL) == 2 and calls(stats, ACQUIRE) == 0


@pytest.mark.engines("module")
def test_a_busy_key_refuses_the_whole_set_and_creates_nothing(server: Server) -> None:
    stats = server.admin()
    holder = Locker(server.client(), ttl=5).acquire("b:2")
    assert holder is not None
    locker = Locker(server.client(), ttl=5)
    assert locker.acquire_all(["b:1", "b:2", "b:3"]) is None
    assert stats.exists("b:1", "b:3") == 0, "no key of a refused set is created"
    assert calls(stats, ACQUIREALL) == 1 and calls(stats, ACQUIRE) == 1, "one attempt, the holder's ACQUIRE only"
    with pytest.raises(NotAcquired) as refused:
        with locker.lease_all(["b:3", "b:1", "b:2"]):
            raise AssertionError("never runs unlocked")
    assert refused.value.key == "b:2", "the key held now is named"
    assert stats.exists("b:1", "b:3") == 0
    assert calls(stats, ACQUIREALL) == 2
    assert held_by(server, "b:2", holder.fence), "the holder's lease is untouched"


@pytest.mark.engines("module")
def test_a_waiter_holds_nothing_and_gets_the_set_when_the_last_key_is_released(server: Server) -> None:
    stats = server.admin()
    holders = [Locker(server.client(), ttl=10).acquire(key) for key in ("w:1", "w:2")]
    one, two = holders
    assert one is not None and two is not None
    locker = Locker(server.client(), ttl=5)
    result: List[Optional[Leases]] = []
    got_at: List[float] = []

    def waiter() -> None:
        result.append(locker.acquire_all(["w:3", "w:2", "w:1"], wait=10))
        got_at.append(time.monotonic())

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.6)
    assert stats.exists("w:3") == 0 and held_by(server, "w:1", one.fence) and held_by(server, "w:2", two.fence)
    assert one.release()
    time.sleep(0.6)
    assert stats.exists("w:3") == 0, "a waiter holds no key of the set while one is busy"
    assert free(server, "w:1"), "w:1, free, is not taken while w:2 is busy"
    assert calls(stats, ACQUIREALL) >= 3, "whole attempts retried"
    released_at = time.monotonic()
    assert two.release()
    thread.join(10)
    (taken,) = result
    assert taken is not None and taken.keys == ["w:3", "w:2", "w:1"]
    assert got_at[0] - released_at < 1.0, "granted within a backoff step of the last release"
    assert len({lease.token for lease in taken}) == 1 and calls(stats, ACQUIRE) == 2, "the holders' ACQUIREs only"
    assert all(held_by(server, lease.key, lease.fence) for lease in taken)
    assert taken.release()


def test_an_attempt_whose_reply_was_lost_is_sent_again_with_the_same_token(server: Server, engine: str) -> None:
    """The server stops while the first attempt is under way and runs it when it resumes: the
    next attempt, with the same token, re-enters the keys (same fences). A new token would be
    refused until the first grant's ttl ended, past the wait. On every engine: the keys share
    a slot, so the library takes them in one call too."""
    stats = server.admin()
    locker = Locker(server.client(socket_timeout=1), ttl=30, timeout=0.3)
    warm_set = locker.acquire_all(["{l}:0"])  # the server's capability asked and kept
    assert warm_set is not None and warm_set.release()
    (warm,) = warm_set
    before = set_calls(stats, engine)
    result: List[Optional[Leases]] = []
    server.pause()
    try:
        thread = threading.Thread(target=lambda: result.append(locker.acquire_all(["{l}:1", "{l}:2"], wait=8)))
        thread.start()
        time.sleep(1.0)
    finally:
        server.resume()
    thread.join(15)
    (taken,) = result
    assert taken is not None, "granted after the server resumed"
    assert set_calls(stats, engine) - before >= 2, "the lost attempt ran, then another"
    assert len({lease.token for lease in taken}) == 1, "one token for the set"
    assert all(held_by(server, lease.key, lease.fence) for lease in taken), "the fences the server holds"
    if engine != "module":
        # The library's fences of one slot rise by one from its floor: the set was granted once
        # (by the lost attempt), and the attempt that was answered re-entered those fences.
        assert [lease.fence for lease in taken] == [warm.fence + 1, warm.fence + 2]
    assert taken.release()


def test_a_final_attempt_without_an_answer_gives_the_set_back(server: Server, engine: str) -> None:
    locker = Locker(server.client(socket_timeout=1), ttl=30, timeout=0.3)
    warm_set = locker.acquire_all(["{g}:0"])
    assert warm_set is not None and warm_set.release()
    (warm,) = warm_set
    before = set_calls(server.admin(), engine)
    server.pause()
    try:
        with pytest.raises(Unavailable):
            locker.acquire_all(["{g}:1", "{g}:2"])
    finally:
        server.resume()
    # The server runs the set's one request as it resumes; the releases sent by its token end it.
    deadline = time.monotonic() + 5
    while not (free(server, "{g}:1") and free(server, "{g}:2")):
        assert time.monotonic() < deadline, "the set granted unheard is still held"
        time.sleep(0.05)
    assert set_calls(server.admin(), engine) > before, "the unanswered attempt did run"
    if engine != "module":
        # It was granted (the library keeps a released key's last fence), then given back.
        shown = [Locker(server.client()).status(key) for key in ("{g}:1", "{g}:2")]
        assert [s.fence if isinstance(s, LockStatus) else None for s in shown] == [warm.fence + 1, warm.fence + 2]


# -- the Functions library's fencedlock_acquireall: keys of one slot ----------------------------


def warm_library(server: Server) -> Locker:
    """A locker whose engine is detected (its library loaded, or its script) and whose
    connection is made, so that the calls counted after are the set's."""
    locker = Locker(server.client(), ttl=5)
    warm = locker.acquire("{warm}")
    assert warm is not None and warm.release()
    return locker


@pytest.mark.engines("functions", "script")
def test_on_the_library_a_set_of_one_slot_is_one_call_for_one_token(server: Server, engine: str) -> None:
    stats = server.admin()
    locker = warm_library(server)
    errs, asked, before = errors(stats, "ERR"), calls(stats, "command|info"), set_calls(stats, engine)
    taken = locker.acquire_all(["{o}:c", "{o}:a", "{o}:b"], label="host-a")
    assert taken is not None and taken.keys == ["{o}:c", "{o}:a", "{o}:b"]
    assert set_calls(stats, engine) - before == 1, "one call for the set"
    assert len({lease.token for lease in taken}) == 1, "one token for every lease"
    fences = [lease.fence for lease in taken]
    assert fences == list(range(fences[0], fences[0] + 3)), f"the slot's next fences, in the order named: {fences}"
    assert_held_as_granted(locker, taken)
    assert errors(stats, "ERR") == errs and calls(stats, "command|info") == asked, "nothing refused, nothing asked"

    # Each lease is a lease like any other: renewed and released on its own key.
    assert_each_lease_is_its_own(server, taken, "{o}:a", "{o}:c")

    # Up to 64 keys in one call; 65 key by key (a token each). (Errors counted on the
    # locker's own connection: on Redis 7.0 every new one adds some, redis-py's CLIENT SETINFO.)
    keys = [f"{{o}}:n{i}" for i in range(65)]
    errs, before = errors(stats, "ERR"), set_calls(stats, engine)
    with locker.lease_all(keys[:64], keep_alive=False) as leases:
        assert set_calls(stats, engine) - before == 1 and len({lease.token for lease in leases}) == 1
    with locker.lease_all(keys, keep_alive=False) as leases:
        assert len({lease.token for lease in leases}) == 65
    assert errors(stats, "ERR") == errs


@pytest.mark.engines("functions", "script")
def test_on_the_library_a_busy_key_refuses_the_set_and_creates_nothing(server: Server) -> None:
    stats = server.admin()
    holder = Locker(server.client(), ttl=5).acquire("{b}:2")
    assert holder is not None
    locker = warm_library(server)
    assert locker.acquire_all(["{b}:1", "{b}:2", "{b}:3"]) is None
    assert stats.exists("{b}:1", "{b}:3") == 0, "no key of a refused set is created"
    with pytest.raises(NotAcquired) as refused:
        with locker.lease_all(["{b}:3", "{b}:1", "{b}:2"]):
            raise AssertionError("never runs unlocked")
    assert refused.value.key == "{b}:2", "the key held now is named"
    assert stats.exists("{b}:1", "{b}:3") == 0
    assert held_by(server, "{b}:2", holder.fence), "the holder's lease is untouched"

    # A waiter holds nothing of the set while a key is busy, and gets it when it is released.
    result: List[Optional[Leases]] = []
    thread = threading.Thread(target=lambda: result.append(locker.acquire_all(["{b}:3", "{b}:2", "{b}:1"], wait=10)))
    thread.start()
    time.sleep(0.6)
    assert stats.exists("{b}:1", "{b}:3") == 0, "a waiter holds no key of the set while one is busy"
    assert holder.release()
    thread.join(10)
    (taken,) = result
    assert taken is not None and taken.keys == ["{b}:3", "{b}:2", "{b}:1"]
    assert len({lease.token for lease in taken}) == 1
    # Nothing refused took a fence: the set has the slot's next three, in the order named.
    assert [lease.fence for lease in taken] == [holder.fence + 1, holder.fence + 2, holder.fence + 3]
    assert all(held_by(server, lease.key, lease.fence) for lease in taken)
    assert taken.release()


@pytest.mark.engines("functions", "script")
def test_on_the_library_keys_of_several_slots_are_taken_one_by_one(server: Server, engine: str) -> None:
    stats = server.admin()
    locker = warm_library(server)
    assert _keys.key_slot(b"f:2") != _keys.key_slot(b"f:1")
    errs, asked, before = errors(stats, "ERR"), calls(stats, "command|info"), set_calls(stats, engine)
    taken = locker.acquire_all(["f:2", "f:1"])
    assert taken is not None and taken.keys == ["f:2", "f:1"]
    assert errors(stats, "ERR") == errs, "no call the library refuses (a key of another slot: wrong floor)"
    assert calls(stats, "command|info") == asked, "not asked: the library's capability is known"
    assert calls(stats, ACQUIREALL) == 0
    assert len({lease.token for lease in taken}) == 2, "a token per key"
    assert set_calls(stats, engine) - before == 2, "one ACQUIRE per key"

    # Still all or none at the API: f:1 busy, f:0 (taken first) is given back.
    other = Locker(server.client(), ttl=5)
    assert other.acquire_all(["f:1", "f:0"]) is None
    assert free(server, "f:0"), "nothing of a refused set is held"
    assert taken.release()


@pytest.mark.engines("script")
def test_on_the_script_a_set_is_one_call_after_the_server_lost_the_script(server: Server) -> None:
    stats = server.admin()
    locker = warm_library(server)
    stats.script_flush()
    before = calls(stats, "script|load")
    taken = locker.acquire_all(["{n}:1", "{n}:2"])
    assert taken is not None and len({lease.token for lease in taken}) == 1, "one call for one token"
    assert calls(stats, "script|load") == before + 1, "NOSCRIPT: loaded again, then sent again"
    assert all(held_by(server, lease.key, lease.fence) for lease in taken)
    assert taken.release()


@pytest.mark.engines("module")
def test_a_server_that_hides_command_is_not_sent_acquireall(servers: Servers) -> None:
    server = servers.start("module", args=["--user", "default", "on", "nopass", "~*", "&*", "+@all", "-command"])
    stats = server.admin()
    locker = Locker(server.client(), ttl=5)
    taken = locker.acquire_all(["h:1", "h:2"])
    assert taken is not None and locker.engine is fencedlock.Engine.MODULE
    assert calls(stats, ACQUIREALL) == 0 and calls(stats, ACQUIRE) == 2, "key by key"
    assert errors(stats, "NOPERM") >= 1, "COMMAND was refused, so ACQUIREALL counts as unknown"
    assert taken.release()


@pytest.mark.engines("module")
def test_on_a_cluster_node_only_keys_of_one_slot_go_in_one_command(servers: Servers) -> None:
    server = servers.start(
        "module",
        args=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port", str(free_port())],
    )
    stats = server.admin()
    stats.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)  # type: ignore[no-untyped-call]
    deadline = time.monotonic() + 10
    while b"cluster_state:ok" not in stats.execute_command("CLUSTER", "INFO"):  # type: ignore[no-untyped-call]
        assert time.monotonic() < deadline, "the one-node cluster never came up"
        time.sleep(0.05)
    locker = Locker(server.client(), ttl=5)
    one_slot = locker.acquire_all(["{acct}:ledger", "{acct}:mail"])
    assert one_slot is not None and calls(stats, ACQUIREALL) == 1 and calls(stats, ACQUIRE) == 0
    assert len({lease.token for lease in one_slot}) == 1
    keys = ["c:x", "c:y"]
    assert _keys.key_slot(b"c:x") != _keys.key_slot(b"c:y")
    spread = locker.acquire_all(keys)
    assert spread is not None and spread.keys == keys, "keys of two slots, taken one by one"
    assert calls(stats, ACQUIREALL) == 1 and calls(stats, ACQUIRE) == 2 and errors(stats, "CROSSSLOT") == 0
    assert one_slot.release() and spread.release()


@pytest.mark.engines("module")
def test_asyncio_a_set_is_one_command_and_a_busy_key_refuses_it(server: Server) -> None:
    stats = server.admin()

    async def run() -> None:
        locker = fencedlock.asyncio.Locker(redis.asyncio.Redis(port=server.port, socket_timeout=10), ttl=5)
        taken = await locker.acquire_all(["s:b", "s:a"], label="host-a")
        assert taken is not None and taken.keys == ["s:b", "s:a"]
        assert calls(stats, ACQUIREALL) == 1 and calls(stats, ACQUIRE) == 0
        assert len({lease.token for lease in taken}) == 1
        assert all(held_by(server, lease.key, lease.fence) for lease in taken)
        fences = [lease.fence for lease in taken]
        assert fences == sorted(set(fences))

        other = fencedlock.asyncio.Locker(redis.asyncio.Redis(port=server.port, socket_timeout=10), ttl=5)
        assert await other.acquire_all(["s:0", "s:a"]) is None
        assert stats.exists("s:0") == 0 and calls(stats, ACQUIREALL) == 2
        with pytest.raises(NotAcquired) as refused:
            async with other.lease_all(["s:0", "s:a"]):
                raise AssertionError("never runs unlocked")
        assert refused.value.key == "s:a" and stats.exists("s:0") == 0
        assert await taken.release() is True
        async with other.lease_all(["s:0", "s:a"], wait=2) as leases:
            assert len({lease.token for lease in leases}) == 1
        assert calls(stats, ACQUIREALL) == 4 and calls(stats, ACQUIRE) == 0

    asyncio.run(run())


@pytest.mark.engines("functions", "script")
def test_asyncio_on_the_library_a_set_of_one_slot_is_one_call_and_a_busy_key_refuses_it(server: Server, engine: str) -> None:
    stats = server.admin()

    def aclient() -> redis.asyncio.Redis:
        return redis.asyncio.Redis(port=server.port, socket_timeout=10)

    async def run() -> None:
        locker = fencedlock.asyncio.Locker(aclient(), ttl=5)
        warm = await locker.acquire("{warm}")  # the engine detected, the connection made
        assert warm is not None and await warm.release()
        before = set_calls(stats, engine)
        taken = await locker.acquire_all(["{s}:b", "{s}:a"], label="host-a")
        assert taken is not None and taken.keys == ["{s}:b", "{s}:a"]
        assert set_calls(stats, engine) - before == 1, "one call for the set"
        assert len({lease.token for lease in taken}) == 1
        assert all(held_by(server, lease.key, lease.fence) and lease.label == "host-a" for lease in taken)
        fences = [lease.fence for lease in taken]
        assert fences == [fences[0], fences[0] + 1]

        other = fencedlock.asyncio.Locker(aclient(), ttl=5)
        assert await other.acquire_all(["{s}:0", "{s}:a"]) is None
        assert stats.exists("{s}:0") == 0, "no key of a refused set is created"
        with pytest.raises(NotAcquired) as refused:
            async with other.lease_all(["{s}:0", "{s}:a"]):
                raise AssertionError("never runs unlocked")
        assert refused.value.key == "{s}:a" and stats.exists("{s}:0") == 0
        assert await taken.release() is True
        if engine == "script":
            stats.script_flush()  # NOSCRIPT: the script is loaded again and the call sent again
        async with other.lease_all(["{s}:0", "{s}:a"], wait=2) as leases:
            assert len({lease.token for lease in leases}) == 1
            assert [lease.fence for lease in leases] == [fences[1] + 1, fences[1] + 2], "nothing refused took a fence"

        # Keys of several slots: one by one, a token each, and still all or none.
        spread = await locker.acquire_all(["a:b", "a:a"])
        assert spread is not None and len({lease.token for lease in spread}) == 2
        assert await other.acquire_all(["a:0", "a:a"]) is None
        assert free(server, "a:0"), "nothing of a refused set is held"
        assert await spread.release() is True

    asyncio.run(run())
