"""What the sync package does differently from the asyncio one, and nothing else: the sync
modules generated from ``fencedlock/asyncio`` (``python/scripts/unasync.py``) import this
module where the asyncio ones import ``fencedlock.asyncio._backend``; each name here has its
asyncio twin there.

Synchronously, the work beside a caller (a keep-alive, a give-back, a vote in flight) is a
daemon thread, so it never keeps the process alive; a thread cannot be cancelled, so a
keep-alive is stopped by an event it waits on, and work under a lease runs to its end."""

from __future__ import annotations

import concurrent.futures as futures
import sys
import threading
import time
from typing import Callable, Generic, Iterable, Set, Tuple, TypeVar

T = TypeVar("T")
A = TypeVar("A")

Event = threading.Event
"""What a lease's ``lost`` is: waited on (``lease.lost.wait()``) from any thread."""

Lock = threading.Lock
"""Between threads that detect a server's engine at once."""

Future = futures.Future
"""A request in flight (:class:`Pool`)."""

sleep = time.sleep


def spawn(work: Callable[[], None], name: str) -> None:
    """Runs ``work()`` beside the caller, unwatched (a give-back): a daemon thread."""
    threading.Thread(target=work, name=name, daemon=True).start()


def wait_event(event: Event, timeout: float) -> bool:
    """Whether ``event`` was set within ``timeout`` seconds."""
    return event.wait(timeout)


def after_failure(given_back: Event, timeout: float) -> None:
    """Up to ``timeout`` for the first pass of a give-back after a failed wait, so that the key
    is free (where its server answers) by the time the call raises; a thread has no
    cancellation to keep prompt, and an interruption (Ctrl-C) has already ended the wait."""
    given_back.wait(timeout)


def settle(result: object) -> None:
    """A user's callback's result: nothing to wait for in the sync package."""


class Keeper:
    """A lease's keep-alive: ``run(keeper)`` in a daemon thread. A thread cannot be
    interrupted: :meth:`stop` sets an event its :meth:`pause` wakes on, and the thread checks
    :attr:`stopping` after a renewal that was in flight."""

    def __init__(self, run: Callable[[Keeper], None], name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=run, args=(self,), name=name, daemon=True)
        self._thread.start()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def pause(self, seconds: float) -> bool:
        """Sleeps; ``True`` as soon as stopped."""
        return self._stop.wait(seconds)

    def stop(self) -> None:
        """Stops the thread and waits for it to end, unless called from the thread itself."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


class Finished(Generic[T]):
    """Work that ran to its end: :func:`race`'s result."""

    def __init__(self, value: T) -> None:
        self._value = value

    def result(self) -> T:
        return self._value


def race(lost: Event, value: T) -> Finished[T]:
    """The work's result: it already ran to its end (a thread cannot be stopped at the loss,
    which the caller checks now, before taking the result)."""
    return Finished(value)


class Pool:
    """Requests to several servers at once (a Redlock's votes): a thread per request in
    flight, idle ones reused (the executor starts a thread only when none is idle), never a
    request queued. A round ends at its majority while a request to a stopped master runs to
    its timeout; with a bounded pool a few of those would leave later rounds' requests to the
    live masters, releases included, queued and unsent."""

    def __init__(self, name: str) -> None:
        self._executor = futures.ThreadPoolExecutor(max_workers=sys.maxsize, thread_name_prefix=name)

    def submit(self, call: Callable[[A], T], arg: A) -> futures.Future[T]:
        return self._executor.submit(call, arg)

    def first_done(self, pending: Iterable[futures.Future[T]], timeout: float) -> Tuple[Set[futures.Future[T]], Set[futures.Future[T]]]:
        """The requests done when the first of them is, or after ``timeout`` seconds."""
        done, not_done = futures.wait(set(pending), timeout=timeout, return_when=futures.FIRST_COMPLETED)
        return done, not_done

    def close(self) -> None:
        """Stops the threads (requests still out finish first)."""
        self._executor.shutdown(wait=False)
