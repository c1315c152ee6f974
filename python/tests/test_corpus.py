"""The client failure contract, run from its data: every scenario of
``protocol/corpus/client-faults.json`` on each engine it names, against real servers with real
faults, for the sync client and the asyncio client (``protocol/corpus/README.md`` says how a
scenario is read). The scenarios are not copied here: a step or a field this runner does not
know fails the test.

One flavor per run (the first of ``FENCEDLOCK_PY_FLAVORS``, Redis 7.0 by default): the
contract is the client's, not the server's.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import pytest
import redis
import redis.asyncio

import fencedlock
import fencedlock.asyncio
from fencedlock import Cause, FencedLockError, Unavailable
from servers import REPO, Server

CORPUS = REPO / "protocol/corpus/client-faults.json"
DATA: Dict[str, Any] = json.loads(CORPUS.read_text())
KINDS = {"module": "module", "library": "functions"}
"""The servers' kind (``servers.Server``) for each engine of the corpus."""
TWINS = ("sync", "asyncio")
SCENARIO_FIELDS = {"name", "why", "servers", "locker", "engines", "ttl_ms", "timeout_ms", "steps"}
HOLD_TTL = 60.0
POLL = 0.02
FLAVOR = (os.environ.get("FENCEDLOCK_PY_FLAVORS") or "redis70").split(",")[0]

AnyLocker = Union[fencedlock.Locker, fencedlock.Redlock, fencedlock.asyncio.Locker, fencedlock.asyncio.Redlock]
AnyLease = Union[fencedlock.Lease, fencedlock.asyncio.Lease]


def cases() -> List[Any]:
    out = []
    for scenario in DATA["scenarios"]:
        for engine in scenario["engines"]:
            for twin in TWINS:
                out.append(pytest.param(scenario, engine, twin, id=f"{scenario['name']}-{engine}-{twin}"))
    return out


def outcome(result: object) -> str:
    """The corpus's outcome of what ``acquire`` returned or raised."""
    if isinstance(result, (fencedlock.Lease, fencedlock.asyncio.Lease)):
        return "granted"
    if result is None:
        return "held"
    if isinstance(result, Unavailable):
        return "unavailable"
    if isinstance(result, FencedLockError) and result.cause is Cause.NO_MODULE and not result.is_unavailable:
        return "no_module"
    return f"other: {result!r}"


def fields(step: Dict[str, Any], allowed: set[str]) -> None:
    unknown = set(step) - allowed
    if unknown:
        pytest.fail(f"step {step}: fields this runner does not know: {sorted(unknown)}")


class Run:
    """One scenario on one engine with one twin: its servers, the locker under test, and the
    steps done in order (a coroutine either way; the sync twin's calls block, as they do)."""

    def __init__(self, scenario: Dict[str, Any], engine: str, twin: str) -> None:
        unknown = set(scenario) - SCENARIO_FIELDS
        if unknown:
            pytest.fail(f"scenario fields this runner does not know: {sorted(unknown)}")
        if engine not in KINDS:
            pytest.fail(f"engine {engine!r} unknown to this runner")
        if scenario["locker"] not in ("single", "redlock"):
            pytest.fail(f"locker {scenario['locker']!r} unknown to this runner")
        self.scenario = scenario
        self.engine = engine
        self.twin = twin
        self.key: str = DATA["key"]
        self.ttl = scenario["ttl_ms"] / 1000
        self.timeout = scenario["timeout_ms"] / 1000
        self.nodes: List[Server] = []
        self.stopped: set[int] = set()
        self.timers: List[threading.Timer] = []
        self.kept: List[AnyLease] = []
        self.leases: List[AnyLease] = []
        self.last: Optional[AnyLease] = None
        self.lost_sync = threading.Event()
        self.lost_async: Optional[asyncio.Event] = None
        self.locker: Optional[AnyLocker] = None

    # -- the client under test -------------------------------------------------------------

    def client(self, port: int) -> Any:
        """A client as the docs show it: ``redis.Redis(port=P)``, no settings of its own."""
        return redis.Redis(port=port) if self.twin == "sync" else redis.asyncio.Redis(port=port)

    def make_locker(self) -> AnyLocker:
        ports = [n.port for n in self.nodes]
        kwargs: Dict[str, Any] = dict(ttl=self.ttl, timeout=self.timeout)
        if self.twin == "sync":
            if self.scenario["locker"] == "single":
                return fencedlock.Locker(self.client(ports[0]), **kwargs)
            return fencedlock.Redlock([self.client(p) for p in ports], **kwargs)
        if self.scenario["locker"] == "single":
            return fencedlock.asyncio.Locker(self.client(ports[0]), **kwargs)
        return fencedlock.asyncio.Redlock([self.client(p) for p in ports], **kwargs)

    async def acquire(self, locker: AnyLocker, key: str, ttl: Optional[float] = None, wait: float = 0,
                      keep_alive: bool = False) -> Tuple[object, float]:
        """What the locker's ``acquire`` returned or raised, and how long it took."""
        on_lost: Callable[[Any], object] = self.signal_lost
        started = time.monotonic()
        try:
            if isinstance(locker, (fencedlock.Locker, fencedlock.Redlock)):
                result: object = locker.acquire(key, ttl, wait=wait, keep_alive=keep_alive, on_lost=on_lost)
            else:
                result = await locker.acquire(key, ttl, wait=wait, keep_alive=keep_alive, on_lost=on_lost)
        except FencedLockError as err:
            result = err
        return result, time.monotonic() - started

    def signal_lost(self, lease: Any) -> None:
        self.lost_sync.set()
        if self.lost_async is not None:
            self.lost_async.set()

    async def release(self, lease: AnyLease) -> None:
        try:
            if isinstance(lease, fencedlock.Lease):
                lease.release()
            else:
                await lease.release()
        except FencedLockError:
            pass

    # -- the steps ------------------------------------------------------------------------------

    async def run(self) -> None:
        self.lost_async = asyncio.Event() if self.twin == "asyncio" else None
        kind = KINDS[self.engine]
        self.nodes = [Server(FLAVOR, kind) for _ in range(self.scenario["servers"])]
        try:
            self.locker = self.make_locker()
            for number, step in enumerate(self.scenario["steps"]):
                await self.step(number, step)
        finally:
            await self.clean_up()

    async def step(self, number: int, step: Dict[str, Any]) -> None:
        where = f"step {number} {json.dumps(step)}"
        if "hold" in step:
            fields(step, {"hold"})
            for i in step["hold"]:
                other = (fencedlock.Locker if self.twin == "sync" else fencedlock.asyncio.Locker)(
                    self.client(self.nodes[i].port), timeout=self.timeout)
                held, _ = await self.acquire(other, self.key, ttl=HOLD_TTL)
                assert outcome(held) == "granted", f"{where}: the other owner was not granted: {held!r}"
        elif "warm" in step:
            fields(step, {"warm"})
            assert self.locker is not None
            if step["warm"]:
                warm, _ = await self.acquire(self.locker, "corpus:warm")
                assert isinstance(warm, (fencedlock.Lease, fencedlock.asyncio.Lease)), f"{where}: {warm!r}"
                await self.release(warm)
        elif "stop" in step:
            fields(step, {"stop"})
            for i in step["stop"]:
                self.nodes[i].pause()
                self.stopped.add(i)
        elif "resume" in step:
            fields(step, {"resume", "after_ms"})
            after = (step.get("after_ms") or 0) / 1000
            for i in step["resume"]:
                if after > 0:
                    timer = threading.Timer(after, self.nodes[i].resume)
                    timer.start()
                    self.timers.append(timer)
                else:
                    self.nodes[i].resume()
        elif "kill" in step:
            fields(step, {"kill"})
            for i in step["kill"]:
                self.nodes[i].kill()
                self.stopped.discard(i)
        elif "restart_without_module" in step:
            fields(step, {"restart_without_module"})
            for i in step["restart_without_module"]:
                port = self.nodes[i].port
                self.nodes[i].stop()
                self.stopped.discard(i)
                self.nodes[i] = Server(FLAVOR, "bare", port=port)
        elif "del" in step:
            fields(step, {"del"})
            for i in step["del"]:
                self.nodes[i].admin().delete(self.key)
        elif "acquire" in step:
            await self.acquire_step(where, step)
        elif "lost" in step:
            fields(step, {"lost", "within_ms"})
            await self.lost_step(where, step)
        elif "free" in step:
            fields(step, {"free", "within_ms"})
            await self.free_step(where, step)
        else:
            pytest.fail(f"{where}: a step this runner does not know")

    async def acquire_step(self, where: str, step: Dict[str, Any]) -> None:
        fields(step, {"acquire", "expect", "within_ms", "not_before_ms"})
        how = step["acquire"]
        unknown = set(how) - {"wait_ms", "keep_alive"}
        if unknown:
            pytest.fail(f"{where}: acquire fields this runner does not know: {sorted(unknown)}")
        expect = step["expect"]
        if expect not in DATA["outcomes"]:
            pytest.fail(f"{where}: outcome {expect!r} is not one of the corpus's")
        assert self.locker is not None
        keep = bool(how.get("keep_alive", False))
        result, took = await self.acquire(self.locker, self.key, wait=how.get("wait_ms", 0) / 1000, keep_alive=keep)
        if isinstance(result, (fencedlock.Lease, fencedlock.asyncio.Lease)):
            self.leases.append(result)
            self.last = result
        got = outcome(result)
        assert got == expect, f"{where}: {got} after {took * 1000:.0f} ms ({result!r})"
        assert took * 1000 <= step["within_ms"], f"{where}: {got} after {took * 1000:.0f} ms"
        if "not_before_ms" in step:
            assert took * 1000 >= step["not_before_ms"], f"{where}: {got} already after {took * 1000:.0f} ms"

    async def lost_step(self, where: str, step: Dict[str, Any]) -> None:
        assert step["lost"] is True, f"{where}: only 'lost: true' is defined"
        assert self.last is not None, f"{where}: no lease was granted before"
        within = step["within_ms"] / 1000
        started = time.monotonic()
        if self.lost_async is not None:
            try:
                await asyncio.wait_for(self.lost_async.wait(), within)
            except asyncio.TimeoutError:
                pass
            signalled = self.lost_async.is_set()
        else:
            signalled = self.lost_sync.wait(within)
        took = time.monotonic() - started
        assert signalled and took <= within, f"{where}: on_lost not called within {step['within_ms']} ms"
        assert self.last.lost.is_set(), f"{where}: on_lost was called but lease.lost is not set"

    async def free_step(self, where: str, step: Dict[str, Any]) -> None:
        deadline = time.monotonic() + step["within_ms"] / 1000
        for i in step["free"]:
            node = self.nodes[i]
            while True:
                held = self.held_on(node)
                if not held:
                    break
                assert time.monotonic() < deadline, f"{where}: the key is still held on server {i}"
                await asyncio.sleep(POLL)

    def held_on(self, node: Server) -> bool:
        """``STATUS`` on an admin connection: nil, or ``[fence, held, pttl]``."""
        admin = node.admin()
        if node.kind == "module":
            reply = admin.execute_command("FENCEDLOCK.STATUS", self.key)  # type: ignore[no-untyped-call]
        else:
            reply = admin.execute_command("FCALL", "fencedlock_status", 1, self.key)  # type: ignore[no-untyped-call]
        return reply is not None and int(reply[1]) != 0

    async def clean_up(self) -> None:
        for timer in self.timers:
            timer.cancel()
        for i in sorted(self.stopped):
            self.nodes[i].resume()
        for lease in self.leases:
            await self.release(lease)
        for node in self.nodes:
            node.stop()


@pytest.mark.parametrize(("scenario", "engine", "twin"), cases())
def test_corpus(scenario: Dict[str, Any], engine: str, twin: str) -> None:
    asyncio.run(Run(scenario, engine, twin).run())


def test_the_corpus_is_read_whole() -> None:
    """Every scenario on every engine it names is a case of this runner, once per twin."""
    assert DATA["schema"] == 1
    names = [s["name"] for s in DATA["scenarios"]]
    assert len(names) == len(set(names)) and names
    assert len(cases()) == 2 * sum(len(s["engines"]) for s in DATA["scenarios"])
