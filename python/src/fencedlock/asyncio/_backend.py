"""What the asyncio package does differently from the sync one, and nothing else: the rest of
each module is written once, here in ``fencedlock/asyncio``, and the sync package's is
generated from it (``python/scripts/unasync.py``), which imports ``fencedlock._backend``
instead of this module under the same name. Each name here has its sync twin there.

On asyncio the work beside a caller (a keep-alive, a give-back, a vote in flight) is a task on
the caller's loop; waits are ``asyncio`` primitives, which cancellation interrupts."""

from __future__ import annotations

import asyncio
import inspect
from typing import Awaitable, Callable, Coroutine, Iterable, Set, Tuple, TypeVar

T = TypeVar("T")
A = TypeVar("A")

Event = asyncio.Event
"""What a lease's ``lost`` is: awaited (``await lease.lost.wait()``) on asyncio."""

Lock = asyncio.Lock
"""Held across awaits (a detection's requests), so an ``asyncio.Lock``."""

Future = asyncio.Future
"""A request in flight (:class:`Pool`)."""

_running: Set[asyncio.Task[None]] = set()
"""Tasks started by :func:`spawn`: the loop keeps only weak references to tasks, so a task
nobody holds could be collected before it ran to its end."""


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def spawn(work: Callable[[], Coroutine[None, None, None]], name: str) -> None:
    """Runs ``work()`` beside the caller, unwatched (a give-back): a task, kept until done."""
    task = asyncio.get_running_loop().create_task(work(), name=name)
    _running.add(task)
    task.add_done_callback(_running.discard)


async def wait_event(event: Event, timeout: float) -> bool:
    """Whether ``event`` was set within ``timeout`` seconds."""
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except asyncio.TimeoutError:
        return False
    return True


async def after_failure(given_back: Event, timeout: float) -> None:
    """Not waiting for the first pass of a give-back after a failed wait: on asyncio the
    failure may be a cancellation, which must end the call at once (and a second one would cut
    the wait short anyway)."""


async def settle(result: object) -> None:
    """A user's callback's result, awaited if it is awaitable (an ``async def`` ``on_lost``)."""
    if inspect.isawaitable(result):
        await result


class Keeper:
    """A lease's keep-alive: ``run(keeper)`` in a task, which :meth:`stop` cancels (cancelling
    a renewal in flight too) and waits out."""

    def __init__(self, run: Callable[[Keeper], Coroutine[None, None, None]], name: str) -> None:
        self._task = asyncio.get_running_loop().create_task(run(self), name=name)

    @property
    def stopping(self) -> bool:
        """Never seen as true on asyncio: a stopped task is cancelled where it awaits."""
        return False

    async def pause(self, seconds: float) -> bool:
        """Sleeps; ``True`` if stopped meanwhile (never: cancellation raises instead)."""
        await asyncio.sleep(seconds)
        return False

    async def stop(self) -> None:
        """Cancels the task and waits for it to end, unless called from the task itself."""
        if self._task is asyncio.current_task():
            return
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass


async def race(lost: Event, work: Awaitable[T]) -> asyncio.Future[T]:
    """Runs ``work`` until it ends or ``lost`` is set, when it is cancelled (the Rust client's
    ``while_held``); the caller checks the loss first, then takes the work's result."""
    running = asyncio.ensure_future(work)
    watching = asyncio.ensure_future(lost.wait())
    try:
        await asyncio.wait({running, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watching.cancel()
        if not running.done():
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
    return running


class Pool:
    """Requests to several servers at once (a Redlock's votes): each a task on the loop."""

    def __init__(self, name: str) -> None:
        self.name = name

    def submit(self, call: Callable[[A], Awaitable[T]], arg: A) -> asyncio.Future[T]:
        return asyncio.ensure_future(call(arg))

    async def first_done(self, pending: Iterable[asyncio.Future[T]], timeout: float) -> Tuple[Set[asyncio.Future[T]], Set[asyncio.Future[T]]]:
        """The requests done when the first of them is, or after ``timeout`` seconds."""
        return await asyncio.wait(set(pending), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)

    def close(self) -> None:
        """Nothing to stop: the tasks still in flight run to their end on the loop."""
