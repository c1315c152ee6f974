"""Leases on one server, on every engine: grants and refusals, fences, semaphores, labels,
status, and bad inputs that are refused with typed errors and write nothing."""

from __future__ import annotations

import time

import pytest
import redis

import fencedlock
from fencedlock import Engine, InvalidArgument, LockStatus, Locker, SemaphoreStatus
from servers import Server


def keys(server: Server) -> "set[bytes]":
    return {k if isinstance(k, bytes) else k.encode() for k in server.admin().keys("*")}


@pytest.mark.all_flavors
def test_grants_refusals_and_fences_rising_across_release_and_del(server: Server, engine: str) -> None:
    locker = Locker(server.client(), ttl=5)
    first = locker.acquire("invoice:inv_72")
    assert first is not None and locker.engine is Engine(engine)
    assert locker.acquire("invoice:inv_72") is None, "held by another token"
    assert first.release() is True
    second = locker.acquire("invoice:inv_72")
    assert second is not None and second.fence > first.fence
    server.admin().delete("invoice:inv_72")
    third = locker.acquire("invoice:inv_72")
    assert third is not None and third.fence > second.fence, "a DEL never lets a fence repeat"
    assert second.release() is False, "its key was deleted under it"
    assert third.release() is True


def test_the_holders_token_re_enters_with_the_same_fence(server: Server) -> None:
    locker = Locker(server.client(), ttl=5)
    lease = locker.acquire("k")
    assert lease is not None
    again = locker.acquire("k", token=lease.token)
    assert again is not None and again.fence == lease.fence
    assert again.release()


def test_validity_is_ttl_minus_drift_from_before_the_request(server: Server) -> None:
    locker = Locker(server.client())
    before = time.monotonic()
    lease = locker.acquire("k", ttl=2)
    assert lease is not None
    assert before + 2 - 0.022 <= lease.valid_until <= time.monotonic() + 2 - 0.022
    assert 1.9 < lease.remaining <= 1.978
    lease.ensure_valid()
    lease.release()


def test_an_expired_lease_is_lost_locally_and_taken_over_with_a_higher_fence(server: Server) -> None:
    locker = Locker(server.client())
    lease = locker.acquire("k", ttl=0.2)
    assert lease is not None
    time.sleep(0.25)
    with pytest.raises(fencedlock.LeaseLost):
        lease.ensure_valid()
    with pytest.raises(fencedlock.LeaseLost):
        lease.renew()
    successor = locker.acquire("k", ttl=1)
    assert successor is not None and successor.fence > lease.fence
    assert lease.release() is False and lease.lost.is_set()
    assert successor.release() is True


def test_renew_extends_and_a_taken_over_lease_cannot_renew(server: Server) -> None:
    locker = Locker(server.client())
    lease = locker.acquire("k", ttl=0.5)
    assert lease is not None
    time.sleep(0.3)
    lease.renew()
    assert lease.remaining > 0.4
    server.admin().delete("k")
    assert locker.acquire("k", ttl=5) is not None
    with pytest.raises(fencedlock.LeaseLost):
        lease.renew()
    assert lease.lost.is_set()


@pytest.mark.all_flavors
def test_semaphores_admit_n_holders_with_their_own_fences(server: Server) -> None:
    locker = Locker(server.client(), ttl=5)
    permits = [locker.acquire("exports", permits=3, label=f"w{i}") for i in range(3)]
    assert all(p is not None for p in permits)
    fences = [p.fence for p in permits if p is not None]
    assert fences == sorted(set(fences))
    assert locker.acquire("exports", permits=3) is None
    with pytest.raises(fencedlock.PermitsMismatch):
        locker.acquire("exports", permits=2)
    status = locker.status("exports")
    assert isinstance(status, SemaphoreStatus)
    assert (status.permits, [h.fence for h in status.holders]) == (3, fences)
    assert [h.label for h in status.holders] == [b"w0", b"w1", b"w2"]
    assert permits[1] is not None and permits[1].release()
    fourth = locker.acquire("exports", permits=3)
    assert fourth is not None and fourth.fence > max(fences)


def test_status_shows_the_label_and_never_the_token(server: Server) -> None:
    locker = Locker(server.client(), ttl=5)
    assert locker.status("k") is None
    lease = locker.acquire("k", label="host-a")
    assert lease is not None
    status = locker.status("k")
    assert isinstance(status, LockStatus)
    assert (status.fence, status.held, status.label) == (lease.fence, True, b"host-a")
    assert status.remaining is not None and 4 < status.remaining <= 5
    assert lease.token not in repr(status).encode() and lease.token.hex() not in repr(lease)
    lease.release()
    assert locker.status("k") == LockStatus(lease.fence, False, None, None)


@pytest.mark.parametrize(
    "call",
    [
        lambda l: l.acquire(""),
        lambda l: l.acquire("   "),
        lambda l: l.acquire("a\nb"),
        lambda l: l.acquire("a\x00b"),
        lambda l: l.acquire("a\x7fb"),
        lambda l: l.acquire(b"bytes"),
        lambda l: l.acquire("k", ttl=0),
        lambda l: l.acquire("k", ttl=-1),
        lambda l: l.acquire("k", ttl=0.0005),
        lambda l: l.acquire("k", ttl=1.0005),
        lambda l: l.acquire("k", ttl=float("nan")),
        lambda l: l.acquire("k", ttl="10"),
        lambda l: l.acquire("k", ttl=True),
        lambda l: l.acquire("k", wait=-1),
        lambda l: l.acquire("k", permits=0),
        lambda l: l.acquire("k", permits=1025),
        lambda l: l.acquire("k", label=""),
        lambda l: l.acquire("k", label="x" * 257),
        lambda l: l.acquire("k", token=b""),
        lambda l: l.acquire("k", token=b"t" * 513),
        lambda l: l.status(""),
    ],
)
@pytest.mark.engines("functions")
def test_bad_inputs_are_refused_before_any_request(server: Server, call) -> None:  # type: ignore[no-untyped-def]
    locker = Locker(server.client())
    admin = server.admin()
    before = admin.info("stats")["total_commands_processed"]
    with pytest.raises(InvalidArgument):
        call(locker)
    after = admin.info("stats")["total_commands_processed"]
    assert after == before + 1, "only the INFO of this test reached the server"
    assert keys(server) == set()


def test_a_ttl_above_the_servers_maximum_is_the_servers_typed_refusal(server: Server) -> None:
    locker = Locker(server.client())
    with pytest.raises(InvalidArgument) as refused:
        locker.acquire("k", ttl=86_400 + 1)
    assert refused.value.reply_error is fencedlock.ReplyError.TTL_TOO_LARGE
    assert not [k for k in keys(server) if not k.startswith(b"fencedlock:fn-floor:")]


@pytest.mark.all_flavors
def test_a_key_of_another_type_is_wrongtype_and_unchanged(server: Server) -> None:
    admin = server.admin()
    admin.set("plain", "v")
    admin.hset("hash", mapping={"fence": "1", "holders": "x"})
    locker = Locker(server.client())
    for key in ("plain", "hash"):
        with pytest.raises(fencedlock.WrongType):
            locker.acquire(key)
        with pytest.raises(fencedlock.WrongType):
            locker.status(key)
    assert admin.get("plain") == b"v"
    assert admin.hgetall("hash") == {b"fence": b"1", b"holders": b"x"}


def test_errors_never_carry_the_token(server: Server) -> None:
    server.admin().set("plain", "v")
    locker = Locker(server.client())
    token = b"s3cret-t0ken"
    with pytest.raises(fencedlock.WrongType) as refused:
        locker.acquire("plain", token=token)
    assert "s3cret" not in str(refused.value)


def test_decode_responses_clients_work_too(server: Server) -> None:
    locker = Locker(server.client(decode_responses=True), ttl=5)
    lease = locker.acquire("k", label="host-a")
    assert lease is not None
    status = locker.status("k")
    assert isinstance(status, LockStatus) and status.label == b"host-a"
    assert lease.release()


def test_a_stopped_server_is_unavailable_within_the_timeout(server: Server) -> None:
    locker = Locker(server.client(), timeout=0.2)
    locker.detect_engine()
    server.pause()
    try:
        started = time.monotonic()
        with pytest.raises(fencedlock.Unavailable) as unavailable:
            locker.acquire("k", ttl=0.5)
        assert time.monotonic() - started < 1.5
        assert unavailable.value.cause is fencedlock.Cause.TIMED_OUT and unavailable.value.is_retryable
    finally:
        server.resume()
    # The ACQUIRE the server read before it stopped may be granted when it resumes; that
    # lease is given back (or runs out), and the same locker works again.
    lease = locker.acquire("k", wait=2)
    assert lease is not None and lease.release()


def test_a_server_that_went_away_is_unavailable_and_a_restart_is_followed(server: Server) -> None:
    locker = Locker(server.client(socket_connect_timeout=0.5), timeout=0.5)
    first = locker.acquire("k", ttl=1)
    assert first is not None
    server.kill()
    with pytest.raises(fencedlock.Unavailable) as unavailable:
        locker.acquire("k")
    assert unavailable.value.cause is fencedlock.Cause.UNREACHABLE
    server.start()
    if server.kind != "module":
        locker = Locker(server.client(), timeout=0.5)  # an empty restarted server has no library
    assert locker.acquire("k") is not None


def test_a_redis_client_is_required() -> None:
    with pytest.raises(InvalidArgument):
        Locker(object())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        Locker(redis.Redis(), engine="nope")
