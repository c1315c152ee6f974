"""Fenced read-write locks against real servers: readers together with their own fences, a
writer alone with a fence above every reader's, the downgrade keeping the fence and letting a
waiting reader in, a reader that comes after a waiting writer queued behind it (the module's
queue), an upgrade refused, a lost write lease never downgraded, and ``STATUS`` of a key held
by readers."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest
import redis.asyncio

import fencedlock
from fencedlock import Engine, Lease, Locker, LockStatus, ReadWriteLock, SemaphoreStatus
from fencedlock._contract import ReplyError
from servers import Server


def waiters(server: Server) -> int:
    """Clients queued in the module now (``INFO fencedlock``)."""
    return int(server.admin().info("fencedlock")["fencedlock_waiters"])


def until(what: str, check: Callable[[], bool], limit: float = 5.0) -> None:
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, f"{what} within {limit} s"
        time.sleep(0.005)


class Background:
    """A call in a thread of its own, and what it returned."""

    def __init__(self, call: Callable[[], Optional[Lease]]) -> None:
        self.result: List[Optional[Lease]] = []
        self.thread = threading.Thread(target=lambda: self.result.append(call()), daemon=True)
        self.thread.start()

    def done(self) -> bool:
        return bool(self.result)

    def lease(self, limit: float = 5.0) -> Lease:
        self.thread.join(limit)
        assert self.result, "the call returned in time"
        lease = self.result[0]
        assert lease is not None, "granted"
        return lease


@pytest.mark.all_flavors
def test_readers_hold_together_and_a_writer_waits_for_them_with_a_higher_fence(server: Server, engine: str) -> None:
    locker = Locker(server.client(), ttl=10)
    lock = ReadWriteLock(locker, "rw:modes", label="reader")
    first, second = lock.try_read(), lock.try_read()
    assert first is not None and second is not None, "readers hold the key together"
    assert locker.engine is Engine(engine)
    assert second.fence > first.fence, "each reader its own fence, from the key's one sequence"
    assert lock.try_write() is None, "no writer while anyone reads"
    status = lock.status()
    assert isinstance(status, SemaphoreStatus) and status.is_shared
    assert (status.permits, status.capacity, status.free) == (0, 1024, 1022)
    assert [h.fence for h in status.holders] == [first.fence, second.fence]
    assert [h.label for h in status.holders] == [b"reader", b"reader"]
    seen = locker.status("rw:modes")
    assert isinstance(seen, SemaphoreStatus) and (seen.fence, seen.permits, len(seen.holders)) == (
        status.fence, 0, 2), "the locker's STATUS decodes the same"

    writer = Background(lambda: lock.write(wait=10))
    time.sleep(0.3)
    assert not writer.done(), "the writer waits while readers hold the key"
    assert first.release() is True
    time.sleep(0.1)
    assert not writer.done(), "one reader still holds the key"
    assert second.release() is True
    written = writer.lease()
    assert written.fence > second.fence, "a writer's fence is above every reader's"
    assert lock.try_read() is None and lock.try_write() is None, "a writer is alone"
    status = lock.status()
    assert isinstance(status, SemaphoreStatus) and not status.is_shared and status.permits == 1
    assert [h.fence for h in status.holders] == [written.fence]
    assert isinstance(locker.status("rw:modes"), LockStatus), "the write lease is the mutex"
    assert locker.acquire("rw:modes") is None, "the write lease is locker.acquire's lease"
    assert written.release() is True
    reader = lock.try_read()
    assert reader is not None and reader.fence > written.fence
    reader.release()


@pytest.mark.engines("module")
def test_a_downgrade_keeps_the_fence_and_lets_the_waiting_reader_in(server: Server) -> None:
    locker = Locker(server.client(), ttl=10)
    lock = ReadWriteLock(locker, "rw:down", label="exporter")
    lease = lock.write()
    assert lease is not None
    fence = lease.fence
    reader = Background(lambda: lock.read(wait=10))
    until("the reader to queue", lambda: waiters(server) == 1)
    time.sleep(1.0)
    before = time.monotonic()
    lock.downgrade(lease)
    assert lease.fence == fence, "the same fence"
    assert lease.valid_until > before + 9.8, "a fresh ttl, measured from before the request"
    read = reader.lease()
    assert read.fence > fence, "the waiting reader came in with it"
    status = lock.status()
    assert status is not None and status.is_shared, status
    assert [h.fence for h in status.holders] == [fence, read.fence]
    assert status.holders[0].label == b"exporter"
    assert lock.try_write() is None, "no writer while the downgraded lease reads"
    lease.renew()
    assert lease.release() is True and read.release() is True
    # A lease of another key is refused before anything is sent.
    other = ReadWriteLock(locker, "rw:other").write()
    assert other is not None
    with pytest.raises(fencedlock.InvalidArgument):
        lock.downgrade(other)
    assert isinstance(locker.status("rw:other"), LockStatus), "still a write lease"


@pytest.mark.engines("module")
def test_a_reader_that_comes_after_a_waiting_writer_waits_behind_it(server: Server) -> None:
    locker = Locker(server.client(), ttl=10)
    lock = ReadWriteLock(locker, "rw:queue")
    first = lock.try_read()
    assert first is not None
    writer = Background(lambda: lock.write(wait=10))
    until("the writer to queue", lambda: waiters(server) == 1)
    assert lock.try_read() is None, "a fresh reader does not pass the waiting writer"
    late = Background(lambda: lock.read(wait=10))
    until("the late reader to queue behind the writer", lambda: waiters(server) == 2)
    assert first.release() is True
    written = writer.lease()
    assert written.fence > first.fence
    time.sleep(0.2)
    assert not late.done(), "the late reader waits for the writer"
    assert written.release() is True
    read = late.lease()
    assert read.fence > written.fence
    read.release()


@pytest.mark.all_flavors
def test_an_upgrade_is_refused_and_the_read_lease_stays(server: Server) -> None:
    locker = Locker(server.client(), ttl=10)
    lock = ReadWriteLock(locker, "rw:up")
    reader = lock.try_read()
    assert reader is not None
    with pytest.raises(fencedlock.UpgradeRefused) as refused:
        locker.acquire("rw:up", token=reader.token)
    err = refused.value
    assert isinstance(err, fencedlock.ServerError) and err.reply_error is ReplyError.UPGRADE_REFUSED
    assert not err.is_retryable and not err.is_unavailable
    assert reader.token.hex() not in str(err), "the token never shows"
    with pytest.raises(fencedlock.UpgradeRefused):
        locker.acquire("rw:up", token=reader.token, wait=1)  # refused at once, not waited out
    with pytest.raises(fencedlock.PermitsMismatch):
        locker.acquire("rw:up", permits=3)
    status = lock.status()
    assert status is not None and status.is_shared and [h.fence for h in status.holders] == [reader.fence]
    again = locker._take("rw:up", None, None, 1, None, reader.token, False, None, shared=True)
    assert again is not None and again.fence == reader.fence, "the reader's own SHARED re-enters"
    assert reader.release() is True


@pytest.mark.all_flavors
def test_a_write_lease_that_ended_is_not_downgraded(server: Server) -> None:
    locker = Locker(server.client(), ttl=10)
    lock = ReadWriteLock(locker, "rw:gone")
    lease = lock.write(keep_alive=True)
    assert lease is not None
    # The key is deleted behind the holder's back: the server would grant a new read lease.
    server.admin().delete("rw:gone")
    with pytest.raises(fencedlock.LeaseLost):
        lock.downgrade(lease)
    assert not lease.is_valid() and lease.lost.is_set()
    status = lock.status()
    assert status is not None and status.holders == (), f"the new read lease was given back: {status}"
    assert status.fence > lease.fence
    with pytest.raises(fencedlock.LeaseLost):
        lock.downgrade(lease)
    # Past its validity: refused locally.
    brief = ReadWriteLock(locker, "rw:brief", ttl=0.2)
    short = brief.write()
    assert short is not None
    time.sleep(0.25)
    with pytest.raises(fencedlock.LeaseLost):
        brief.downgrade(short)
    taken = brief.try_write()
    assert taken is not None and taken.fence > short.fence, "nothing was re-granted to the ended lease"


def test_a_read_write_lock_needs_a_locker_and_good_terms(server: Server) -> None:
    locker = Locker(server.client())
    with pytest.raises(fencedlock.InvalidArgument):
        ReadWriteLock(fencedlock.Redlock([server.client()]), "k")  # type: ignore[arg-type]
    for bad in (dict(label=b""), dict(ttl=0), dict(wait=-1)):
        with pytest.raises(fencedlock.InvalidArgument):
            ReadWriteLock(locker, "k", **bad)
    with pytest.raises(fencedlock.InvalidArgument):
        ReadWriteLock(locker, "bad\nkey")
    with pytest.raises(fencedlock.NotAcquired):
        with ReadWriteLock(locker, "k").writing():
            with ReadWriteLock(locker, "k").reading(wait=0.1):
                raise AssertionError("never runs unlocked")
    status = locker.status("k")
    assert isinstance(status, LockStatus) and not status.held, "released on exit"


@pytest.mark.engines("module")
def test_asyncio_readers_writer_and_downgrade(server: Server) -> None:
    from fencedlock.asyncio import Locker as AsyncLocker, ReadWriteLock as AsyncReadWriteLock

    async def run() -> None:
        locker = AsyncLocker(redis.asyncio.Redis(port=server.port, socket_timeout=10), ttl=10)
        lock = AsyncReadWriteLock(locker, "rw:async")
        first, second = await lock.try_read(), await lock.try_read()
        assert first is not None and second is not None and second.fence > first.fence
        assert await lock.try_write() is None
        writer = asyncio.ensure_future(lock.write(wait=10))
        await asyncio.sleep(0.3)
        assert not writer.done()
        await first.release()
        await second.release()
        written = await asyncio.wait_for(writer, 5)
        assert written is not None and written.fence > second.fence
        reader = asyncio.ensure_future(lock.read(wait=10))
        await asyncio.sleep(0.3)
        assert not reader.done()
        await lock.downgrade(written)
        read = await asyncio.wait_for(reader, 5)
        assert read is not None and read.fence > written.fence
        status = await lock.status()
        assert status is not None and status.is_shared
        assert [h.fence for h in status.holders] == [written.fence, read.fence]
        with pytest.raises(fencedlock.UpgradeRefused):
            await locker.acquire("rw:async", token=read.token)
        with pytest.raises(fencedlock.UpgradeRefused):
            await locker.acquire("rw:async", token=read.token, wait=1)
        await asyncio.sleep(0.6)  # a release in the background would have run by now
        assert [h.fence for h in (await lock.status() or status).holders] == [written.fence, read.fence], "still held"
        await server_delete(server, "rw:async")
        with pytest.raises(fencedlock.LeaseLost):
            await lock.downgrade(written)
        assert written.lost.is_set()
        async with lock.writing() as lease:
            assert (await lock.status()) is not None and lease.fence > read.fence

    asyncio.run(run())


async def server_delete(server: Server, key: str) -> None:
    server.admin().delete(key)


@pytest.mark.engines("module")
def test_the_package_pages_read_write_example_runs(server: Server) -> None:
    """``python/README.md``'s block under "Read-write locks", run against a real server with
    the page's ``locker`` and stand-ins for the application's reads and writes."""
    page = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = page[page.index("## Read-write locks"):page.index("## Several keys at once")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the section's example changed: update this test"
    reads: List[int] = []
    writes: List[int] = []
    names: Dict[str, Any] = {
        "locker": Locker(server.client(), ttl=30),
        "read_prices": lambda fence: reads.append(fence),
        "write_prices": lambda fence: writes.append(fence),
    }
    exec(blocks[0], names)
    assert len(reads) == 2 and len(writes) == 1
    assert writes[0] > reads[0] and reads[1] == writes[0], "the downgraded lease reads with the write fence"
    status = names["status"]
    assert isinstance(status, SemaphoreStatus) and status.holders == () and status.fence == writes[0], "all released"


@pytest.mark.engines("module", "functions")
def test_the_readers_waiting_for_a_writer_enter_together_when_it_leaves(server: Server) -> None:
    """On the module the queue grants them together; on the Functions engine the release wakes
    one reader, and each reader granted after a wake-up passes it on (its attempt names the
    wake-up list), so none waits out its nap (timed to the writer's 10 s lease)."""
    locker = Locker(server.client(), ttl=10)
    lock = ReadWriteLock(locker, "rw:cascade")
    written = lock.write()
    assert written is not None
    readers = [Background(lambda: lock.read(wait=8)) for _ in range(3)]
    time.sleep(0.5)
    assert not any(r.done() for r in readers)
    started = time.monotonic()
    assert written.release() is True
    leases = [r.lease(limit=10) for r in readers]
    took = time.monotonic() - started
    assert took < 2, f"the readers entered {took:.1f} s after the writer left"
    assert sorted(lease.fence for lease in leases)[0] > written.fence
    status = lock.status()
    assert status is not None and status.is_shared and len(status.holders) == 3


@pytest.mark.engines("functions")
def test_asyncio_readers_waiting_for_a_writer_enter_together_when_it_leaves(server: Server) -> None:
    from fencedlock.asyncio import Locker as AsyncLocker, ReadWriteLock as AsyncReadWriteLock

    async def run() -> None:
        locker = AsyncLocker(redis.asyncio.Redis(port=server.port, socket_timeout=10), ttl=10)
        lock = AsyncReadWriteLock(locker, "rw:async-cascade")
        written = await lock.write()
        assert written is not None
        readers = [asyncio.ensure_future(lock.read(wait=8)) for _ in range(3)]
        await asyncio.sleep(0.5)
        assert not any(r.done() for r in readers)
        started = time.monotonic()
        await written.release()
        leases = await asyncio.wait_for(asyncio.gather(*readers), 10)
        took = time.monotonic() - started
        assert took < 2, f"the readers entered {took:.1f} s after the writer left"
        assert all(lease is not None and lease.fence > written.fence for lease in leases)

    asyncio.run(run())
