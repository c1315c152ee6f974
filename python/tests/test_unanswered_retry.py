"""An attempt the server did not answer in time, then a retry that is granted: the lease the
caller gets must stay held. The unanswered attempt's possible late grant is released in the
background (at once and again one timeout later); that release must never reach the lease
the retry returns (two holders of one lock). Sync and asyncio; and a caller's own token
(re-entering its lease) is never released behind its back.

On the Functions library (and the script) a waiting acquisition sends plain attempts, each
bounded by the locker's timeout, so a server stopped for a moment makes one go unanswered
and the next (within the wait) be granted. On the module a waiting attempt is one
``ACQUIRE … BLOCK`` whose bound is the whole wait plus the timeout: a server stopped for
less is answered late rather than retried, so these tests run on the library engines."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from typing import Iterator, Optional

import pytest
import redis.asyncio

import fencedlock
from fencedlock import Locker, _contract
from fencedlock.asyncio import Locker as AsyncLocker
from relay import Relay, wait_until
from servers import Server

TIMEOUT = 1.0
"""The locker's per-request timeout. The background release's second pass comes one
TIMEOUT after its first, which is well past the retry (a backoff step of at most 0.4 s
after the server resumed): a lease the second pass could end is returned before it."""

RESUME_AFTER = 1.3
"""When the stopped server is resumed: after the first attempt timed out, before the retry."""

WAIT = 8.0


def held_by(locker: Locker, key: str, fence: int) -> bool:
    status = locker.status(key)
    return isinstance(status, fencedlock.LockStatus) and status.held and status.fence == fence


def stopped_for_a_moment(server: Server) -> threading.Timer:
    """Stops the server now; resumes it RESUME_AFTER seconds later (the caller joins the
    timer and resumes it again in any case)."""
    server.pause()
    resumer = threading.Timer(RESUME_AFTER, server.resume)
    resumer.start()
    return resumer


def settled(resumer: threading.Timer, server: Server) -> None:
    resumer.join(10)
    server.resume()


def kept_past_the_give_back(server: Server, locker: Locker, lease: fencedlock.Lease, lost: str) -> None:
    """Past both passes of the background give-back of the unanswered attempt's token, ``lease``
    is still held on the server (else ``lost``): it renews, another owner is refused, and it
    releases."""
    time.sleep(2.5 * TIMEOUT)
    assert held_by(locker, "k", lease.fence), lost
    lease.renew()
    other = Locker(server.client(), ttl=30, timeout=TIMEOUT)
    assert other.acquire("k") is None, "another owner took the lock while the lease is held"
    assert lease.release() is True


@pytest.mark.engines("functions", "script")
def test_a_lease_granted_on_a_retry_after_an_unanswered_attempt_stays_held(server: Server) -> None:
    locker = Locker(server.client(), ttl=30, timeout=TIMEOUT)
    warm = locker.acquire("k")  # the engine detected and kept
    assert warm is not None and warm.release()
    resumer = stopped_for_a_moment(server)
    try:
        started = time.monotonic()
        lease = locker.acquire("k", wait=WAIT)
        took = time.monotonic() - started
    finally:
        settled(resumer, server)
    assert lease is not None, "granted once the server resumed"
    assert took > TIMEOUT, "the first attempt went unanswered: the retry is what was granted"
    kept_past_the_give_back(server, locker, lease, "the lease the caller holds was ended on the server")


@pytest.mark.engines("functions", "script")
def test_a_callers_token_is_never_released_behind_its_back(server: Server) -> None:
    """Re-entering one's own lease (``token=``) through a stopped server: the retry re-enters
    it (same fence) and the lease the caller already held is never released meanwhile."""
    locker = Locker(server.client(), ttl=30, timeout=TIMEOUT)
    holder = locker.acquire("k")
    assert holder is not None
    resumer = stopped_for_a_moment(server)
    try:
        again = locker.acquire("k", token=holder.token, wait=WAIT)
    finally:
        settled(resumer, server)
    assert again is not None and again.fence == holder.fence, "re-entered, never released and granted anew"
    kept_past_the_give_back(server, locker, holder, "the caller's lease was ended on the server")


def aclient(server: Server) -> redis.asyncio.Redis:
    return redis.asyncio.Redis(port=server.port, socket_timeout=10)


async def aheld_by(locker: AsyncLocker, key: str, fence: int) -> bool:
    status = await locker.status(key)
    return isinstance(status, fencedlock.LockStatus) and status.held and status.fence == fence


async def akept_past_the_give_back(server: Server, locker: AsyncLocker, lease: fencedlock.asyncio.Lease,
                                   lost: str) -> None:
    """:func:`kept_past_the_give_back` through the asyncio client."""
    await asyncio.sleep(2.5 * TIMEOUT)
    assert await aheld_by(locker, "k", lease.fence), lost
    await lease.renew()
    other = AsyncLocker(aclient(server), ttl=30, timeout=TIMEOUT)
    assert await other.acquire("k") is None, "another owner took the lock while the lease is held"
    assert await lease.release() is True


@pytest.mark.engines("functions", "script")
def test_asyncio_a_lease_granted_on_a_retry_after_an_unanswered_attempt_stays_held(server: Server) -> None:
    async def run() -> None:
        locker = AsyncLocker(aclient(server), ttl=30, timeout=TIMEOUT)
        warm = await locker.acquire("k")
        assert warm is not None and await warm.release()
        resumer = stopped_for_a_moment(server)
        lease: Optional[fencedlock.asyncio.Lease] = None
        try:
            started = time.monotonic()
            lease = await locker.acquire("k", wait=WAIT)
            took = time.monotonic() - started
        finally:
            settled(resumer, server)
        assert lease is not None, "granted once the server resumed"
        assert took > TIMEOUT, "the first attempt went unanswered: the retry is what was granted"
        await akept_past_the_give_back(server, locker, lease, "the lease the caller holds was ended on the server")

    asyncio.run(run())


@pytest.mark.engines("functions", "script")
def test_asyncio_a_callers_token_is_never_released_behind_its_back(server: Server) -> None:
    async def run() -> None:
        locker = AsyncLocker(aclient(server), ttl=30, timeout=TIMEOUT)
        holder = await locker.acquire("k")
        assert holder is not None
        resumer = stopped_for_a_moment(server)
        try:
            again = await locker.acquire("k", token=holder.token, wait=WAIT)
        finally:
            settled(resumer, server)
        assert again is not None and again.fence == holder.fence, "re-entered, never released and granted anew"
        await akept_past_the_give_back(server, locker, holder, "the caller's lease was ended on the server")

    asyncio.run(run())


class Interrupted(BaseException):
    """What the test's signal handler raises in the waiting thread (as Ctrl-C would)."""


def _interrupt(signum: int, frame: object) -> None:
    raise Interrupted()


@pytest.fixture
def interruptible() -> Iterator[None]:
    """SIGUSR1 raises :class:`Interrupted` in the main thread, where the test runs."""
    assert threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGUSR1, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.engines("module", "functions")
def test_an_interrupted_wait_is_given_back_again_one_timeout_later(server: Server, engine: str, interruptible: None) -> None:
    """A waiting ``ACQUIRE`` interrupted before its answer (Ctrl-C), its request held back by a
    slow link: the release sent at once runs first, the held request after it and is granted.
    The sync locker, like the asyncio one (and the Rust and Node clients), sends the release
    again one timeout later, which gives that late grant back; released once only, the key
    would stay held by a token nobody has until its ttl."""
    key = "interrupted-wait"
    relay = Relay(server.port)
    try:
        locker = Locker(redis.Redis(port=relay.port, socket_timeout=10), ttl=30, timeout=TIMEOUT)
        warm = locker.acquire("warm")  # the engine detected, the library loaded
        assert warm is not None and warm.release()
        name = _contract.ACQUIRE if engine == "module" else _contract.FUNCTIONS[_contract.ACQUIRE]
        relay.hold((name.encode(), key.encode()))
        main = threading.main_thread().ident
        assert main is not None

        def interrupt() -> None:
            if relay.held.wait(10):
                signal.pthread_kill(main, signal.SIGUSR1)

        interrupter = threading.Thread(target=interrupt, daemon=True)
        interrupter.start()
        with pytest.raises(Interrupted):
            locker.acquire(key, wait=WAIT)
        interrupter.join(10)
        assert relay.held.is_set()
        # The release sent at once has run (on a connection of its own): now the held request.
        relay.deliver()
        assert relay.answered.wait(10), "the held ACQUIRE was run"
        direct = Locker(server.client())
        late = direct.status(key)
        assert isinstance(late, fencedlock.LockStatus) and late.held, "the late grant holds the key"
        # Past the second pass (one TIMEOUT after the first).
        assert wait_until(lambda: not _held(direct, key), 3 * TIMEOUT), (
            "the late grant of the interrupted wait's token still holds the key: given back only once"
        )
        assert direct.acquire(key) is not None
    finally:
        relay.close()


def _held(locker: Locker, key: str) -> bool:
    status = locker.status(key)
    return isinstance(status, fencedlock.LockStatus) and status.held
