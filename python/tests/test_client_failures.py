"""Failures as the Rust client reports them (issue 41): an outage is never "held elsewhere",
the request timeout bounds the whole request (connection set-up and redis-py's own retries
included) over a client made as the docs show it, wrong client kinds are refused at
construction, and a misrouted request on a cluster node is final. Each runs sync and asyncio.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Awaitable, Callable, Iterator, List, Optional, Tuple, TypeVar

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

import fencedlock
import fencedlock.asyncio
from fencedlock import Cause, InvalidArgument, NoEngine, ServerError, Unavailable
from servers import Server, Servers

T = TypeVar("T")
TWINS = ["sync", "asyncio"]
BOUND = 2.0
"""Seconds a failing request of the default 0.5 s timeout may take at most here (a loaded
2-core machine); redis-py's own retries would take 5 to 59 s."""


def run(twin: str, sync: Callable[[], T], coro: Callable[[], Awaitable[T]]) -> T:
    return sync() if twin == "sync" else asyncio.run(_awaited(coro))


async def _awaited(coro: Callable[[], Awaitable[T]]) -> T:
    return await coro()


def timed(call: Callable[[], object]) -> Tuple[Optional[BaseException], float]:
    """What ``call`` raised (``None`` if it returned) and how long it took."""
    started = time.monotonic()
    try:
        call()
    except Exception as err:  # noqa: BLE001 - the caller asserts the type
        return err, time.monotonic() - started
    return None, time.monotonic() - started


@pytest.fixture
def stopped(servers: Servers) -> Iterator[List[Server]]:
    """The servers a test stops, resumed before they are stopped."""
    paused: List[Server] = []
    try:
        yield paused
    finally:
        for server in paused:
            server.resume()


def stop(paused: List[Server], *nodes: Server) -> None:
    for node in nodes:
        node.pause()
        paused.append(node)


# -- 6: Redlock with masters down is Unavailable, never None ------------------------------


def redlock_acquire(twin: str, ports: List[int], key: str, wait: float) -> Callable[[], object]:
    """One Redlock acquire over clients made as the docs show them (no socket timeout)."""
    if twin == "sync":
        lock = fencedlock.Redlock([redis.Redis(port=p) for p in ports], ttl=10, timeout=0.25)
        return lambda: lock.acquire(key, wait=wait)

    async def go() -> object:
        alock = fencedlock.asyncio.Redlock([redis.asyncio.Redis(port=p) for p in ports], ttl=10, timeout=0.25)
        return await alock.acquire(key, wait=wait)

    return lambda: asyncio.run(go())


@pytest.mark.engines("module", "functions")
@pytest.mark.parametrize("twin", TWINS)
@pytest.mark.parametrize("wait", [0, 1])
def test_redlock_with_two_of_three_stopped_is_unavailable(
    servers: Servers, engine: str, stopped: List[Server], twin: str, wait: float
) -> None:
    nodes = [servers.start(engine) for _ in range(3)]
    stop(stopped, nodes[1], nodes[2])
    err, took = timed(redlock_acquire(twin, [n.port for n in nodes], "k", wait))
    assert isinstance(err, Unavailable), f"{err!r} after {took:.1f} s (None: read as held elsewhere)"
    assert isinstance(err, fencedlock.QuorumNotReached) and err.is_unavailable
    assert took < wait + BOUND


@pytest.mark.engines("module", "functions")
@pytest.mark.parametrize("twin", TWINS)
@pytest.mark.parametrize("wait", [0, 1])
def test_redlock_with_two_of_three_refusing_is_unavailable(servers: Servers, engine: str, twin: str, wait: float) -> None:
    nodes = [servers.start(engine) for _ in range(3)]
    for node in nodes[1:]:
        node.kill()
    err, took = timed(redlock_acquire(twin, [n.port for n in nodes], "k", wait))
    assert isinstance(err, Unavailable), f"{err!r} after {took:.1f} s"
    assert took < wait + BOUND


@pytest.mark.engines("module")
@pytest.mark.parametrize("twin", TWINS)
def test_redlock_refused_by_one_with_two_stopped_is_held(
    servers: Servers, engine: str, stopped: List[Server], twin: str
) -> None:
    nodes = [servers.start(engine) for _ in range(3)]
    assert fencedlock.Locker(nodes[0].client()).acquire("k", ttl=60) is not None
    stop(stopped, nodes[1], nodes[2])
    err, took = timed(redlock_acquire(twin, [n.port for n in nodes], "k", 0))
    assert err is None, f"{err!r}: a refusal is the service answering held"
    assert took < BOUND


# -- 7: the request timeout bounds the whole request ---------------------------------------


def locker_acquire(twin: str, port: int, key: str = "k", wait: float = 0) -> Callable[[], object]:
    """One acquire by a Locker over ``redis.Redis(port=P)``, the client as the docs show it."""
    if twin == "sync":
        locker = fencedlock.Locker(redis.Redis(port=port))
        return lambda: locker.acquire(key, wait=wait)

    async def go() -> object:
        return await fencedlock.asyncio.Locker(redis.asyncio.Redis(port=port)).acquire(key, wait=wait)

    return lambda: asyncio.run(go())


@pytest.mark.engines("module", "functions")
@pytest.mark.parametrize("twin", TWINS)
def test_a_fresh_connection_to_a_stopped_server_is_unavailable_within_the_timeout(
    server: Server, stopped: List[Server], twin: str
) -> None:
    stop(stopped, server)
    err, took = timed(locker_acquire(twin, server.port))
    assert isinstance(err, Unavailable) and err.cause is Cause.TIMED_OUT, repr(err)
    assert took < BOUND, f"{took:.1f} s: redis-py's retries were not bounded"


@pytest.mark.engines("module")
@pytest.mark.parametrize("twin", TWINS)
def test_a_port_that_refuses_is_unavailable_at_once(server: Server, twin: str) -> None:
    server.kill()
    err, took = timed(locker_acquire(twin, server.port))
    assert isinstance(err, Unavailable) and err.cause is Cause.UNREACHABLE, repr(err)
    assert took < 1.0, f"{took:.1f} s: redis-py's retries were not bounded"


@pytest.mark.engines("module")
@pytest.mark.parametrize("twin", TWINS)
def test_a_wait_on_a_stopped_server_ends_unavailable_within_the_wait(server: Server, stopped: List[Server], twin: str) -> None:
    stop(stopped, server)
    err, took = timed(locker_acquire(twin, server.port, wait=1))
    assert isinstance(err, Unavailable), repr(err)
    assert took < 1 + BOUND


# -- 8: client kinds, cluster ---------------------------------------------------------------


def test_an_asyncio_client_is_refused_by_the_sync_classes() -> None:
    client = redis.asyncio.Redis(port=1)
    makers: List[Tuple[str, Callable[[], object]]] = [("goes to fencedlock.asyncio.Locker", lambda: fencedlock.Locker(client)),  # type: ignore[arg-type]
              ("goes to fencedlock.asyncio.Redlock", lambda: fencedlock.Redlock([client]))]  # type: ignore[list-item]
    for right, make in makers:
        with pytest.raises(InvalidArgument) as refused:
            make()
        assert right in str(refused.value)


def test_a_sync_client_is_refused_by_the_asyncio_classes() -> None:
    client = redis.Redis(port=1)
    makers: List[Tuple[str, Callable[[], object]]] = [("goes to fencedlock.Locker", lambda: fencedlock.asyncio.Locker(client)),  # type: ignore[arg-type]
              ("goes to fencedlock.Redlock", lambda: fencedlock.asyncio.Redlock([client]))]  # type: ignore[list-item]
    for right, make in makers:
        with pytest.raises(InvalidArgument) as refused:
            make()
        assert right in str(refused.value)


def two_node_cluster(servers: Servers, engine: str) -> List[Server]:
    """Two primaries, slots 0-8191 and 8192-16383, both reporting cluster_state:ok."""
    nodes = [servers.start(engine, args=["--cluster-enabled", "yes"]) for _ in range(2)]
    nodes[0].admin().execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 8191)  # type: ignore[no-untyped-call]
    nodes[1].admin().execute_command("CLUSTER", "ADDSLOTSRANGE", 8192, 16383)  # type: ignore[no-untyped-call]
    nodes[0].admin().execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[1].port)  # type: ignore[no-untyped-call]
    deadline = time.monotonic() + 15
    for node in nodes:
        while b"cluster_state:ok" not in node.admin().execute_command("CLUSTER", "INFO"):  # type: ignore[no-untyped-call]
            assert time.monotonic() < deadline, "the cluster did not come up"
            time.sleep(0.05)
    return nodes


@pytest.mark.engines("module", "functions")
def test_cluster_clients_are_refused_and_moved_is_final(servers: Servers, engine: str) -> None:
    nodes = two_node_cluster(servers, engine)
    with pytest.raises(InvalidArgument) as refused:
        fencedlock.Locker(redis.cluster.RedisCluster(host="127.0.0.1", port=nodes[0].port))  # type: ignore[arg-type]
    assert "RedisCluster" in str(refused.value)
    with pytest.raises(InvalidArgument):
        fencedlock.Redlock([redis.cluster.RedisCluster(host="127.0.0.1", port=nodes[0].port)])  # type: ignore[list-item]

    async def async_cluster() -> None:
        client = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=nodes[0].port)
        with pytest.raises(InvalidArgument):
            fencedlock.asyncio.Locker(client)  # type: ignore[arg-type]

    asyncio.run(async_cluster())

    # "k" is in slot 7629 (node 0), "a" in slot 15495 (node 1): a redis.Redis on node 0.
    for twin in TWINS:
        err, took = timed(locker_acquire(twin, nodes[0].port, key="a", wait=2))
        assert isinstance(err, ServerError) and not isinstance(err, Unavailable), repr(err)
        assert err.cause is Cause.MISROUTED and not err.is_retryable and not err.is_unavailable
        assert took < 1.0, f"{took:.1f} s: MOVED was retried for the whole wait"
        here = "{k}" + twin
        assert run(twin, lambda: fencedlock.Locker(nodes[0].client()).acquire(here),
                   lambda: fencedlock.asyncio.Locker(redis.asyncio.Redis(port=nodes[0].port)).acquire(here)) is not None


# -- Both: messages and labels ----------------------------------------------------------------


@pytest.mark.engines("script")
def test_no_engine_names_the_library_this_package_carries(server: Server) -> None:
    for twin in TWINS:
        err, _ = timed(lambda: run(
            twin,
            lambda: fencedlock.Locker(server.client(), engine="functions").acquire("k"),
            lambda: fencedlock.asyncio.Locker(redis.asyncio.Redis(port=server.port), engine="functions").acquire("k"),
        ))
        assert isinstance(err, NoEngine), repr(err)
        library = err.library
        assert isinstance(library, Path) and str(library) in str(err)
        # The library the package loads: in a checkout, protocol/'s (an installed package's own copy).
        assert library.read_text() == (Path(__file__).resolve().parents[2] / "protocol" / "src" / "functions.lua").read_text()


@pytest.mark.engines("module")
def test_the_loss_is_logged_once_in_one_line(server: Server, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="fencedlock")
    lost: List[str] = []

    async def kept_async() -> None:
        locker = fencedlock.asyncio.Locker(redis.asyncio.Redis(port=server.port), ttl=0.6)
        lease = await locker.acquire("ka", keep_alive=True, on_lost=lambda lease: lost.append("asyncio"))
        assert lease is not None
        server.admin().delete("ka")
        await asyncio.wait_for(lease.lost.wait(), 2)

    lease = fencedlock.Locker(server.client(), ttl=0.6).acquire("k", keep_alive=True, on_lost=lambda lease: lost.append("sync"))
    assert lease is not None
    server.admin().delete("k")
    assert lease.lost.wait(2)
    asyncio.run(kept_async())
    assert sorted(lost) == ["asyncio", "sync"]
    lines = [r.getMessage() for r in caplog.records if r.name == "fencedlock"]
    assert len(lines) == 2, lines
    for line, key in zip(lines, ["'k'", "'ka'"]):
        assert line.count(key) == 1 and line.count("lost") == 1, line


@pytest.mark.engines("module")
def test_a_label_comes_back_as_it_was_given(server: Server) -> None:
    locker = fencedlock.Locker(server.client())
    for given in ("host-a", b"host-b"):
        lease = locker.acquire(f"k-{given!r}", label=given)
        assert lease is not None and lease.label == given and type(lease.label) is type(given)

    async def go() -> None:
        alocker = fencedlock.asyncio.Locker(redis.asyncio.Redis(port=server.port))
        for given in ("host-a", b"host-b"):
            lease = await alocker.acquire(f"a-{given!r}", label=given)
            assert lease is not None and lease.label == given and type(lease.label) is type(given)

    asyncio.run(go())


def test_an_unsupported_redis_py_is_refused_naming_the_supported_releases() -> None:
    from fencedlock import _clients

    for old in ("4.5.5", "3.5.3", "4.0.0b1"):
        with pytest.raises(InvalidArgument) as refused:
            _clients.check_redis_version(old)
        assert "4.6" in str(refused.value) and old in str(refused.value)
    for supported in ("4.6.0", "5.0.0b1", "8.2.0", "10.0"):
        _clients.check_redis_version(supported)
