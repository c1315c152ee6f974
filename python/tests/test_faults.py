"""Fences across a restart from the AOF and a replica's promotion; Redlock with a master
stopped; fences rising across majorities."""

from __future__ import annotations

import time

import pytest
import redis

import fencedlock
from fencedlock import Locker, Redlock
from servers import Server, Servers, calls

AOF = ["--appendonly", "yes", "--appendfsync", "always"]


@pytest.mark.all_flavors
def test_fences_rise_across_a_kill_9_and_a_restart_from_the_aof(servers: Servers, engine: str) -> None:
    server = servers.start(engine, args=AOF)
    locker = Locker(server.client(), ttl=5)
    before = locker.acquire("k")
    assert before is not None
    server.kill()
    server.start()
    again = Locker(server.client(), ttl=5)
    assert again.acquire("k") is None, "the acknowledged lease survived the restart"
    assert before.release() is True
    after = again.acquire("k")
    assert after is not None and after.fence > before.fence


@pytest.mark.all_flavors
def test_fences_after_a_promotion_are_above_the_old_primarys(servers: Servers, engine: str) -> None:
    primary = servers.start(engine)
    replica = servers.start(engine, args=["--replicaof", "127.0.0.1", str(primary.port)])
    locker = Locker(primary.client(), ttl=5)
    lease = locker.acquire("k")
    assert lease is not None
    # WAIT counts the calling connection's writes (the locker's are on its own): watch the
    # replica instead until the grant reached it.
    deadline = time.monotonic() + 10
    while not replica.admin().exists("k"):
        assert time.monotonic() < deadline, "the grant never reached the replica"
        time.sleep(0.01)
    primary.kill()
    replica.admin().execute_command("REPLICAOF", "NO", "ONE")  # type: ignore[no-untyped-call]
    promoted = Locker(replica.client(), ttl=5)
    assert promoted.acquire("k") is None, "the replicated lease is still held"
    assert promoted.release_token("k", lease.token) is True
    after = promoted.acquire("k")
    assert after is not None and after.fence > lease.fence


def masters(servers: Servers, engine: str, n: int = 3) -> "list[Server]":
    return [servers.start(engine) for _ in range(n)]


def test_redlock_grants_with_one_master_stopped(servers: Servers, engine: str) -> None:
    nodes = masters(servers, engine)
    redlock = Redlock([n.client(socket_timeout=1) for n in nodes], ttl=5, timeout=0.2)
    first = redlock.acquire("k")
    assert first is not None and first.release()
    nodes[1].pause()
    try:
        started = time.monotonic()
        lease = redlock.acquire("k")
        assert lease is not None and time.monotonic() - started < 1.5
        assert lease.fence > first.fence
        assert redlock.acquire("k") is None, "the other two refuse"
        lease.renew()
        assert lease.release() is True
    finally:
        nodes[1].resume()


@pytest.mark.engines("functions")
def test_redlock_release_is_not_held_up_by_requests_stuck_on_a_stopped_master(servers: Servers, engine: str) -> None:
    """A request to a stopped master outlives its round: a new connection waits for the
    client's socket timeout. However many are stuck there, a release must reach the live
    masters at once (a shared pool of threads once left it queued behind them, unsent)."""
    nodes = masters(servers, engine)
    redlock = Redlock([n.client(socket_timeout=10) for n in nodes], ttl=10, timeout=0.2)
    lease = redlock.acquire("k")
    assert lease is not None
    nodes[0].pause()
    try:
        # Refused rounds for 4 s, each leaving an ACQUIRE and a RELEASE stuck on master 0.
        assert redlock.acquire("k", wait=4) is None
        started = time.monotonic()
        assert lease.release() is True
        assert time.monotonic() - started < 1
        for node in nodes[1:]:
            status = Locker(node.client()).status("k")
            assert isinstance(status, fencedlock.LockStatus) and not status.held, f"port {node.port} still holds the lease"
    finally:
        nodes[0].resume()


def test_redlock_with_a_majority_stopped_is_unavailable(servers: Servers, engine: str) -> None:
    nodes = masters(servers, engine)
    redlock = Redlock([n.client(socket_timeout=1) for n in nodes], ttl=5, timeout=0.2)
    assert redlock.acquire("warm") is not None
    for node in nodes[:2]:
        node.pause()
    try:
        with pytest.raises(fencedlock.Unavailable):
            redlock.acquire("k")
    finally:
        for node in nodes[:2]:
            node.resume()


def test_redlock_fences_rise_across_majorities(servers: Servers, engine: str) -> None:
    """A takes a high fence on one master; successive grants by other majorities must still
    carry higher fences (the raise step; with quorum-max alone they would fall)."""
    nodes = masters(servers, engine)
    clients = [n.client(socket_timeout=1) for n in nodes]
    solo = Locker(clients[0], ttl=5)
    for _ in range(5):
        lease = solo.acquire("k")
        assert lease is not None and lease.release()
    # A stopped master runs the requests it was sent once it resumes, in no set order across
    # connections: an abandoned round's ACQUIRE can land after its RELEASE, a lease nobody
    # holds until its ttl. A majority is up at every step, so a grant must come within a wait
    # past that ttl (and past redis-py's reconnection backoff, up to 1 s).
    redlock = Redlock(clients, ttl=2, timeout=0.2)
    fences = []
    for down in (None, 0, 1, 2, 0):
        if down is not None:
            nodes[down].pause()
        try:
            lease = redlock.acquire("k", wait=6)
            assert lease is not None
            fences.append(lease.fence)
            assert lease.release() is True
        finally:
            if down is not None:
                nodes[down].resume()
    assert fences == sorted(fences) and len(set(fences)) == len(fences), fences


def _raises(node: Server) -> int:
    return calls(node.admin(), "FENCEDLOCK.RAISE")


def _set_fence(node: Server, key: str, fence: int) -> None:
    """The key's fence on ``node`` to ``fence``: a lease taken, raised and released there."""
    admin = node.admin()
    assert admin.execute_command("FENCEDLOCK.ACQUIRE", key, "setter", 60000) is not None  # type: ignore[no-untyped-call]
    assert admin.execute_command("FENCEDLOCK.RAISE", key, "setter", fence) == fence  # type: ignore[no-untyped-call]
    assert admin.execute_command("FENCEDLOCK.RELEASE", key, "setter") == 1  # type: ignore[no-untyped-call]


def _fence(node: Server, key: str) -> int:
    return int(node.admin().execute_command("FENCEDLOCK.STATUS", key)[0])  # type: ignore[no-untyped-call]


@pytest.mark.engines("module")
def test_redlock_raises_only_the_masters_below_the_fence(servers: Servers, engine: str) -> None:
    """A master whose grant carried the majority's fence is not sent a RAISE (its grant proves
    it holds that fence); the others are raised; grants that agree need no RAISE at all.
    (Counted by the module's command stats; the client's logic is the same on every engine.)"""
    nodes = masters(servers, engine)
    for node in nodes:
        admin = node.admin()
        assert admin.execute_command("FENCEDLOCK.ACQUIRE", "k", "first", 60000) is not None  # type: ignore[no-untyped-call]
        assert admin.execute_command("FENCEDLOCK.RELEASE", "k", "first") == 1  # type: ignore[no-untyped-call]
    high = max(_fence(node, "k") for node in nodes)
    _set_fence(nodes[2], "k", high + 1000)
    # The first master refuses (another holder), so the majority must include the third.
    assert nodes[0].admin().execute_command("FENCEDLOCK.ACQUIRE", "k", "other", 60000) is not None  # type: ignore[no-untyped-call]
    redlock = Redlock([n.client(socket_timeout=1) for n in nodes], ttl=5, timeout=0.5)
    before = [_raises(node) for node in nodes]
    lease = redlock.acquire("k")
    assert lease is not None and lease.fence == high + 1001
    assert _raises(nodes[2]) == before[2], "no RAISE to the master whose grant carried the fence"
    assert _raises(nodes[1]) == before[1] + 1, "the master below it was raised"
    assert _fence(nodes[1], "k") == lease.fence
    assert lease.release() is True
    assert nodes[0].admin().execute_command("FENCEDLOCK.RELEASE", "k", "other") == 1  # type: ignore[no-untyped-call]

    for node in nodes:
        _set_fence(node, "k", lease.fence + 10)
    before = [_raises(node) for node in nodes]
    again = redlock.acquire("k")
    assert again is not None and again.fence == lease.fence + 11
    assert [_raises(node) for node in nodes] == before, "grants that agree need no RAISE"
    assert again.release() is True


def test_redlock_kept_alive_and_released(servers: Servers, engine: str) -> None:
    nodes = masters(servers, engine)
    redlock = Redlock([n.client(socket_timeout=1) for n in nodes], ttl=0.6, timeout=0.2)
    lease = redlock.acquire("k", keep_alive=True)
    assert lease is not None
    time.sleep(1.2)
    lease.ensure_valid()
    assert redlock.acquire("k") is None
    assert lease.release() is True
    assert redlock.acquire("k") is not None
