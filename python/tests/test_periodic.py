"""Periodic jobs (``run_at_most_every``, ``schedule``, ``Due.record``, ``last_run``), as the
Rust client's ``tests/client/periodic.rs``: due once per period on the server's clock, a
stale holder's record refused, failed runs not counted, records fencedlock did not write
refused without running the job, ``Busy`` while another holder has the key, and no periodic
job over several Redlock masters. Then the record's decoding without a server."""

from __future__ import annotations

import asyncio
import time
from typing import List, NoReturn

import pytest
import redis.asyncio

import fencedlock
import fencedlock.asyncio
from fencedlock import (BadRecord, Busy, Due, InvalidArgument, LeaseLost, Locker, NotDue, Ran, Redlock, WrongType,
                        _contract, _keys, _periodic)
from servers import Server, Servers

HOUR = 3600


def never(lease: object) -> NoReturn:
    raise AssertionError("the job ran when it must not")


def record_fields(server: Server, key: str) -> "set[bytes]":
    return {f if isinstance(f, bytes) else f.encode() for f in server.admin().hkeys(_keys.record_key(key.encode()))}


def test_a_recorded_run_makes_the_job_not_due_for_a_period(server: Server) -> None:
    locker = Locker(server.client(), ttl=5)
    assert locker.last_run("report") is None
    first = locker.acquire("report", label="host-a")
    assert first is not None
    due = locker.schedule(first, HOUR)
    assert isinstance(due, Due) and due.previous is None
    assert due.record() is True
    assert first.release()

    second = locker.acquire("report")
    assert second is not None
    found = locker.schedule(second, HOUR)
    assert isinstance(found, NotDue), found
    assert (found.last.fence, found.last.label, found.last.exit_code) == (first.fence, b"host-a", 0)
    assert found.last.started == due.started and 0 <= found.last.age < 5, found
    assert HOUR - 5 < found.due_in <= HOUR, found
    last = locker.last_run("report")
    assert last is not None and (last.started, last.fence, last.label) == (due.started, first.fence, b"host-a")
    # A shorter period measured from the same run is over already.
    time.sleep(0.06)
    assert isinstance(locker.schedule(second, 0.05), Due)
    assert second.release()
    # The record outlives its period by the retention, then goes.
    pttl = server.admin().pttl(_keys.record_key(b"report"))
    assert (HOUR * 1000 + _contract.RECORD_RETENTION_MS) - 60_000 < pttl <= HOUR * 1000 + _contract.RECORD_RETENTION_MS


@pytest.mark.engines("module", "functions")
def test_the_period_is_measured_on_the_servers_clock(server: Server) -> None:
    """A run the server stamped 2 s ago, period 3 s: due in at most 1 s by the server's clock,
    and due once that passed. The record's start is the server's time, not the host's."""
    locker = Locker(server.client(), ttl=5)
    lease = locker.acquire("clocked")
    assert lease is not None
    seconds, micros = server.admin().time()
    now_ms = seconds * 1000 + micros // 1000
    server.admin().hset(_keys.record_key(b"clocked"), mapping={"started_ms": now_ms - 2000, "fence": 1, "label": "elsewhere"})
    found = locker.schedule(lease, 3)
    assert isinstance(found, NotDue), found
    assert 0 < found.due_in <= 1.0 and found.last.age >= 2.0, found
    assert (found.last.fence, found.last.label, found.last.started) == (1, b"elsewhere", (now_ms - 2000) / 1000)
    time.sleep(found.due_in + 0.05)
    due = locker.schedule(lease, 3)
    assert isinstance(due, Due) and due.previous is not None and due.previous.fence == 1, due
    assert due.record(exit_code=3) is True
    assert lease.release()
    seconds, micros = server.admin().time()
    last = locker.last_run("clocked")
    assert last is not None and (last.fence, last.label, last.exit_code) == (lease.fence, None, 3), last
    assert due.started <= seconds + micros / 1e6, "stamped by the server when found due"
    assert record_fields(server, "clocked") == {b"started_ms", b"fence", b"exit"}, "a run without a label drops the last one's"


@pytest.mark.engines("module", "functions")
def test_a_stale_holder_cannot_overwrite_a_newer_run(server: Server) -> None:
    locker = Locker(server.client())
    stale = locker.acquire("sweep", ttl=0.3)
    assert stale is not None
    stale_due = locker.schedule(stale, HOUR)
    assert isinstance(stale_due, Due)
    time.sleep(0.4)
    newer = locker.acquire("sweep", ttl=5)
    assert newer is not None, "granted after the expiry"
    newer_due = locker.schedule(newer, HOUR)
    assert isinstance(newer_due, Due), "still due: the stale run was never recorded"
    assert newer_due.record() is True
    assert stale_due.record() is False, "a stale record was written"
    last = locker.last_run("sweep")
    assert last is not None and last.fence == newer.fence > stale.fence
    assert newer.release()


def test_run_at_most_every_runs_records_and_skips(server: Server) -> None:
    locker = Locker(server.client(), ttl=5)

    def failing(lease: fencedlock.Lease) -> int:
        raise RuntimeError("the job failed")

    with pytest.raises(RuntimeError):
        locker.run_at_most_every("sync", HOUR, failing)
    assert locker.last_run("sync") is None, "a failed run is not counted"
    ran = locker.run_at_most_every("sync", HOUR, lambda lease: lease.fence, label="host-a")
    assert isinstance(ran, Ran), ran
    again = locker.run_at_most_every("sync", HOUR, never)
    assert isinstance(again, NotDue) and (again.last.fence, again.last.label) == (ran.value, b"host-a"), again

    # Each call released its lease: another is granted at once.
    holder = locker.acquire("sync")
    assert holder is not None
    assert isinstance(locker.run_at_most_every("sync", HOUR, never), Busy)
    assert isinstance(locker.run_at_most_every("sync", 0.001, never), Busy)
    assert holder.release()
    with pytest.raises(InvalidArgument):
        locker.run_at_most_every("sync", 0, never)
    with pytest.raises(InvalidArgument):
        locker.run_at_most_every("bad\nkey", HOUR, never)


@pytest.mark.engines("module")
def test_the_job_runs_under_a_kept_alive_lease_and_a_loss_is_not_counted(server: Server) -> None:
    locker = Locker(server.client(), ttl=1.5, timeout=0.5)
    other = Locker(server.client(), ttl=5)

    def long_job(lease: fencedlock.Lease) -> int:
        time.sleep(2.0)  # past the ttl: the keep-alive carries the lease
        assert other.acquire("long") is None, "held while the job runs"
        lease.ensure_valid()
        return lease.fence

    ran = locker.run_at_most_every("long", HOUR, long_job)
    assert isinstance(ran, Ran)
    last = locker.last_run("long")
    assert last is not None and last.fence == ran.value

    def loses_its_lease(lease: fencedlock.Lease) -> None:
        server.admin().delete("lost")
        assert lease.lost.wait(3.0), "the keep-alive noticed the loss"

    with pytest.raises(LeaseLost):
        locker.run_at_most_every("lost", HOUR, loses_its_lease)
    assert locker.last_run("lost") is None, "a run that lost its lease is not counted"


def test_a_record_fencedlock_did_not_write_is_refused_and_the_job_not_run(server: Server) -> None:
    admin = server.admin()
    name = _keys.record_key(b"odd")
    admin.hset(name, mapping={"started_ms": "yesterday", "fence": 1})
    locker = Locker(server.client(), ttl=5)
    with pytest.raises(BadRecord) as refused:
        locker.run_at_most_every("odd", HOUR, never)
    assert refused.value.key == "odd"
    with pytest.raises(BadRecord):
        locker.last_run("odd")
    lease = locker.acquire("odd")
    assert lease is not None, "the refused run released its lease"
    with pytest.raises(BadRecord):
        locker.schedule(lease, HOUR)
    admin.delete(name)
    admin.set(name, "a string")
    with pytest.raises(WrongType):
        locker.schedule(lease, HOUR)
    with pytest.raises(InvalidArgument):
        locker.schedule(lease, 0)
    with pytest.raises(InvalidArgument):
        Locker(server.client()).schedule(lease, HOUR)  # not this locker's lease
    assert lease.release()


@pytest.mark.engines("module")
def test_periodic_jobs_need_one_servers_clock(servers: Servers, engine: str) -> None:
    nodes = [servers.start(engine) for _ in range(3)]
    redlock = Redlock([n.client(socket_timeout=1) for n in nodes], ttl=5, timeout=0.2)
    with pytest.raises(InvalidArgument):
        redlock.last_run("k")
    with pytest.raises(InvalidArgument):
        redlock.run_at_most_every("k", HOUR, never)
    lease = redlock.acquire("k")
    assert lease is not None
    with pytest.raises(InvalidArgument):
        redlock.schedule(lease, HOUR)
    assert lease.release()
    for node in nodes:
        assert not node.admin().keys("fencedlock:last-run:*"), "nothing was recorded"
    # One master has one clock.
    solo = Redlock([nodes[0].client()], ttl=5)
    assert isinstance(solo.run_at_most_every("k", HOUR, lambda lease: lease.fence), Ran)
    assert isinstance(solo.run_at_most_every("k", HOUR, never), NotDue)


def test_asyncio_runs_records_skips_and_is_busy(server: Server) -> None:
    async def run() -> None:
        locker = fencedlock.asyncio.Locker(redis.asyncio.Redis(port=server.port, socket_timeout=10), ttl=5)

        async def failing(lease: fencedlock.asyncio.Lease) -> int:
            raise RuntimeError("the job failed")

        async def fence(lease: fencedlock.asyncio.Lease) -> int:
            return lease.fence

        async def never_async(lease: fencedlock.asyncio.Lease) -> NoReturn:
            never(lease)

        with pytest.raises(RuntimeError):
            await locker.run_at_most_every("sync", HOUR, failing)
        assert await locker.last_run("sync") is None
        ran = await locker.run_at_most_every("sync", HOUR, fence, label="host-a")
        assert isinstance(ran, Ran)
        again = await locker.run_at_most_every("sync", HOUR, never_async)
        assert isinstance(again, NotDue) and (again.last.fence, again.last.label) == (ran.value, b"host-a")
        holder = await locker.acquire("sync")
        assert holder is not None
        assert isinstance(await locker.run_at_most_every("sync", 0.001, never_async), Busy)
        due = await locker.schedule(holder, 0.001)
        assert isinstance(due, fencedlock.asyncio.Due) and due.previous is not None and due.previous.fence == ran.value
        assert await due.record(1) is True
        assert await holder.release()
        last = await locker.last_run("sync")
        assert last is not None and (last.fence, last.exit_code) == (holder.fence, 1)

    asyncio.run(run())


@pytest.mark.engines("module")
def test_asyncio_work_is_cancelled_at_the_loss_and_not_counted(server: Server) -> None:
    async def run() -> None:
        locker = fencedlock.asyncio.Locker(redis.asyncio.Redis(port=server.port, socket_timeout=10), ttl=1.5, timeout=0.5)
        cancelled: List[bool] = []

        async def loses_its_lease(lease: fencedlock.asyncio.Lease) -> None:
            server.admin().delete("lost")
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

        started = time.monotonic()
        with pytest.raises(LeaseLost):
            await locker.run_at_most_every("lost", HOUR, loses_its_lease)
        assert cancelled == [True] and time.monotonic() - started < 20, "cancelled at the loss, not after the sleep"
        assert await locker.last_run("lost") is None

    asyncio.run(run())


# -- without a server ----------------------------------------------------------------------


def b(text: str) -> bytes:
    return text.encode()


def test_a_reply_is_decoded_and_what_is_not_a_record_is_refused() -> None:
    """The cases of the protocol's own test of ``ReadReply::parse``, and Rust's integer
    syntax (no spaces, underscores or non-ASCII digits, which Python's ``int`` would take)."""
    none = _periodic.parse([b("1700000000"), b("250000"), None, None, None, None])
    assert none == _periodic.Reading(1_700_000_000_250, None)
    full = _periodic.parse([b("1700000000"), b("0"), b("1699999999000"), b("1839547780606977"), b("host-a"), b("3")])
    assert full.last == _periodic.Record(1_699_999_999_000, 1_839_547_780_606_977, b"host-a", 3)
    assert full.last_run() == fencedlock.LastRun(1_699_999_999.0, 1.0, 1_839_547_780_606_977, b"host-a", 3)
    as_str = _periodic.parse(["1700000000", "0", "1", "2", "who", None])  # decode_responses=True
    assert as_str.last == _periodic.Record(1, 2, b"who", 0)
    assert _periodic.parse([b("1"), b("0"), b("+5"), b("1"), None, b("-2")]).last == _periodic.Record(5, 1, None, -2)
    for malformed in (
        [b("1700000000"), b("0"), b("x"), b("1"), None, None],
        [b("1700000000"), b("0"), b("1"), None, None, None],
        [b("1700000000"), b("0"), b("1"), b("1"), None, b("-x")],
        [None, b("0"), None, None, None, None],
        [b("1700000000"), b("0")],
        [b("1700000000"), b("0"), b(" 1"), b("1"), None, None],
        [b("1700000000"), b("0"), b("1_000"), b("1"), None, None],
        [b("1700000000"), b("0"), "\u0661", b("1"), None, None],
        [b("1700000000"), b("0"), b("-1"), b("1"), None, None],
        [b("1700000000"), b("0"), b("1"), b(str(1 << 64)), None, None],
        [b("1700000000"), b("0"), b("1"), b("1"), None, b(str(1 << 63))],
        [b("1700000000"), b("0"), 5, b("1"), None, None],
        "not a list",
    ):
        with pytest.raises(_periodic.Malformed):
            _periodic.parse(malformed)


def test_due_at_exactly_one_period_and_never_early_on_a_clock_that_stepped_back() -> None:
    def due_in(now: int, started: int, every: int) -> int:
        return _periodic.Reading(now, _periodic.Record(started, 5, None, 0)).due_in_ms(every)

    assert _periodic.Reading(10_000, None).due_in_ms(60_000) == 0
    assert due_in(70_000, 10_000, 60_000) == 0
    assert due_in(69_999, 10_000, 60_000) == 1
    assert due_in(5_000, 10_000, 60_000) == 60_000, "a start stamped in the future counts as just now"
    for now, started, every in [(0, 0, 1), (1 << 49, 3, 1 << 39), (12345, 12345, 7), (999, 1000, 1)]:
        wait = due_in(now, started, every)
        assert (wait == 0) == (now >= started and now - started >= every)
        assert 0 <= wait <= every


def test_periods_and_exit_codes_are_checked_before_anything_is_sent() -> None:
    assert _periodic.period_ms(3600) == 3_600_000 and _periodic.period_ms(0.001) == 1
    assert _periodic.period_ms(0.3) == 300
    for bad in (0, 0.0004, -1, float("nan"), "1", True):
        with pytest.raises(InvalidArgument):
            _periodic.period_ms(bad)
    for bad_code in (True, 1.0, 1 << 63, "0"):
        with pytest.raises(InvalidArgument):
            _periodic.check_exit_code(bad_code)
    args = _periodic.write_args(b"k", 1700, 9, None, -1, 1000)
    assert args == ("EVAL", _contract.WRITE_RECORD, 1, _keys.record_key(b"k"), 1700, 9, b"", -1,
                    1000 + _contract.RECORD_RETENTION_MS)
