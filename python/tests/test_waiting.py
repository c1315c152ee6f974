"""Waiting for a busy lock: granted in arrival order (the module's FIFO queue; on the
Functions engine woken by releases in arrival order), timeouts that return None or raise,
and a ``with`` body that never runs unlocked."""

from __future__ import annotations

import threading
import time
from typing import List

import pytest

import fencedlock
from fencedlock import Locker
from servers import Server


def test_waiters_are_granted_in_arrival_order_with_rising_fences(server: Server) -> None:
    locker = Locker(server.client(), ttl=10)
    holder = locker.acquire("hot")
    assert holder is not None
    order: List[int] = []
    fences: List[int] = []
    lock = threading.Lock()

    def waiter(i: int) -> None:
        lease = locker.acquire("hot", wait=20)
        assert lease is not None
        with lock:
            order.append(i)
            fences.append(lease.fence)
        time.sleep(0.02)
        lease.release()

    threads = []
    for i in range(5):
        t = threading.Thread(target=waiter, args=(i,))
        t.start()
        threads.append(t)
        time.sleep(0.15)  # each waiter queued before the next arrives
    holder.release()
    for t in threads:
        t.join(30)
    assert order == list(range(5)), "arrival order"
    assert fences == sorted(fences) and fences[0] > holder.fence and len(set(fences)) == 5


def test_a_waiter_is_granted_at_the_holders_expiry(server: Server) -> None:
    locker = Locker(server.client())
    holder = locker.acquire("k", ttl=0.6)
    assert holder is not None
    started = time.monotonic()
    lease = locker.acquire("k", ttl=5, wait=5)
    waited = time.monotonic() - started
    assert lease is not None and lease.fence > holder.fence
    assert 0.4 < waited < 1.5, waited
    assert lease.remaining > 4, "the validity is measured again after a long wait"


def test_a_wait_that_runs_out_returns_none_and_holds_nothing(server: Server) -> None:
    locker = Locker(server.client())
    holder = locker.acquire("k", ttl=10)
    assert holder is not None
    started = time.monotonic()
    assert locker.acquire("k", wait=0.3) is None
    assert 0.25 < time.monotonic() - started < 1.5
    status = locker.status("k")
    assert isinstance(status, fencedlock.LockStatus) and status.fence == holder.fence
    assert holder.release()


def test_the_with_form_raises_and_never_runs_its_body_unlocked(server: Server) -> None:
    locker = Locker(server.client())
    holder = locker.acquire("k", ttl=10)
    assert holder is not None
    ran: "list[object]" = []
    with pytest.raises(fencedlock.NotAcquired):
        with locker.lease("k", wait=0.2):
            ran.append(True)
    assert ran == []
    holder.release()
    with locker.lease("k", ttl=5) as lease:
        ran.append(lease.fence)
        assert lease.is_valid()
    assert ran == [lease.fence]
    assert locker.acquire("k") is not None, "released on exit"


def test_semaphore_waiters_get_permits_as_they_free(server: Server) -> None:
    locker = Locker(server.client(), ttl=10)
    held = [locker.acquire("sem", permits=2) for _ in range(2)]
    assert all(held)
    got: List[int] = []

    def waiter() -> None:
        lease = locker.acquire("sem", permits=2, wait=10)
        assert lease is not None
        got.append(lease.fence)

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.2)
    assert got == []
    assert held[0] is not None and held[0].release()
    t.join(10)
    assert len(got) == 1


def test_a_waiting_acquire_does_not_stall_other_requests(server: Server) -> None:
    """The waiter blocks a connection of its own: renewals and other leases go on."""
    locker = Locker(server.client(), ttl=10)
    holder = locker.acquire("busy")
    assert holder is not None
    t = threading.Thread(target=locker.acquire, args=("busy",), kwargs={"wait": 2})
    t.start()
    time.sleep(0.1)
    started = time.monotonic()
    holder.renew()
    other = locker.acquire("other")
    assert other is not None and time.monotonic() - started < 0.5
    holder.release()
    t.join(5)
