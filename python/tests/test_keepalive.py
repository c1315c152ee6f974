"""Keep-alive: renewals at ttl/3 keep a lease past its ttl; the first failed renewal (the
key deleted, the server stopped, the key taken over) sets ``lease.lost`` and calls the
callback, before the lease's validity would have let another holder in."""

from __future__ import annotations

import threading
import time
from typing import List

import fencedlock
from fencedlock import Locker
from servers import Server


def kept(server: Server, ttl: float = 0.6) -> "tuple[Locker, fencedlock.Lease, List[fencedlock.Lease], threading.Event]":
    locker = Locker(server.client(), ttl=ttl, timeout=0.2)
    called: List[fencedlock.Lease] = []
    done = threading.Event()

    def on_lost(lease: fencedlock.Lease) -> None:
        called.append(lease)
        done.set()

    lease = locker.acquire("job", keep_alive=True, on_lost=on_lost)
    assert lease is not None
    return locker, lease, called, done


def test_a_kept_lease_outlives_its_ttl(server: Server) -> None:
    locker, lease, called, _ = kept(server)
    time.sleep(1.5)
    lease.ensure_valid()
    assert not lease.lost.is_set() and called == []
    assert locker.acquire("job") is None
    assert lease.release() is True


def test_loss_on_del_is_noticed_at_the_next_renewal(server: Server) -> None:
    locker, lease, called, done = kept(server)
    server.admin().delete("job")
    assert done.wait(1.0), "noticed within one renew interval"
    assert lease.lost.is_set() and called == [lease]
    try:
        lease.ensure_valid()
        raise AssertionError("a lost lease must not pass ensure_valid")
    except fencedlock.LeaseLost:
        pass


def test_loss_on_a_stopped_server_is_noticed_before_the_validity_ends(server: Server) -> None:
    locker, lease, called, done = kept(server)
    deadline = lease.valid_until
    server.pause()
    try:
        assert done.wait(2.0)
        assert time.monotonic() < deadline + 0.25
        assert lease.lost.is_set()
    finally:
        server.resume()


def test_loss_on_a_takeover_is_noticed(server: Server) -> None:
    locker, lease, called, done = kept(server)
    # The key is deleted and at once taken by another owner: the next renewal meets a
    # lease of another token and is refused.
    server.admin().delete("job")
    thief = locker.acquire("job", ttl=5)
    assert thief is not None and thief.fence > lease.fence
    assert done.wait(1.0) and called == [lease]
    status = locker.status("job")
    assert isinstance(status, fencedlock.LockStatus) and status.held and status.fence == thief.fence
    assert lease.release() is False and thief.release() is True


def test_the_with_form_keeps_alive_and_releases(server: Server) -> None:
    locker = Locker(server.client(), ttl=0.6)
    with locker.lease("job") as lease:
        time.sleep(1.0)
        lease.ensure_valid()
    assert locker.acquire("job") is not None
