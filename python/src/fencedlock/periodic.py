# Generated from fencedlock/asyncio/periodic.py by python/scripts/unasync.py: do not edit.
"""Jobs that run at most once per period across hosts, measured on the server's clock.

A lock makes runs one at a time; the run record beside the key makes them one per period.
The holder reads the record under its lease (:meth:`Locker.schedule
<fencedlock.Locker.schedule>`), runs the job only when it is :class:`Due`, and records the
run (:meth:`Due.record`) before it releases, so the next holder, whenever its cron fires and
whatever its clock says, finds the run on record. :meth:`Locker.run_at_most_every
<fencedlock.Locker.run_at_most_every>` does all of it around a callable. The record and the
rule are the protocol's (``protocol/src/periodic.rs``); the design is in ``docs/rust.md``,
"Periodic jobs".
"""

from __future__ import annotations

import logging
from typing import Callable, Optional, TypeVar, Union

from . import _keys, _periodic, _wire
from ._periodic import Busy, LastRun, NotDue, Periodic, Ran
from .errors import BadRecord, FencedLockError
from . import _backend
from ._server import Server
from .lease import Lease

__all__ = ["Busy", "Due", "LastRun", "NotDue", "Periodic", "Ran"]

log = logging.getLogger("fencedlock")

T = TypeVar("T")


class Due:
    """The right to run a due job once and to record the run: records under the fence of the
    lease that found the job due, stamped with the server's time at that moment."""

    def __init__(
        self, server: Server, lease: Lease, raw_key: bytes, started_ms: int, every_ms: int, previous: Optional[LastRun]
    ) -> None:
        self._server = server
        self._key = lease.key
        self._raw_key = raw_key
        self._fence = lease.fence
        self._label = lease._label
        self._started_ms = started_ms
        self._every_ms = every_ms
        self._previous = previous

    @property
    def previous(self) -> Optional[LastRun]:
        """The run before this one, if the job has one on record."""
        return self._previous

    @property
    def started(self) -> float:
        """This run's start as it will be recorded: the server's time when it was found due,
        in seconds since the Unix epoch."""
        return self._started_ms / 1000

    def record(self, exit_code: int = 0) -> bool:
        """Counts the run (with the job's ``exit_code``): the next holder does not run the
        job until a period after this run started. Call it before releasing the lease.
        ``False`` when a newer holder's run is on record already: this lease was lost
        meanwhile (its run may have overlapped the newer one, which fencing the job's writes
        guards against)."""
        exit_code = _periodic.check_exit_code(exit_code)
        args = _periodic.write_args(self._raw_key, self._started_ms, self._fence, self._label, exit_code, self._every_ms)
        return _wire.flag_of(self._server.call(args))

    def __repr__(self) -> str:
        return f"Due(key={self._key!r}, fence={self._fence}, previous={self._previous!r})"


def read(server: Server, key: str, raw_key: bytes) -> _periodic.Reading:
    """The server's time and ``key``'s record, in one script."""
    try:
        return _periodic.parse(server.call(_periodic.read_args(raw_key)))
    except _periodic.Malformed:
        raise BadRecord(server.name, key) from None


def schedule(server: Server, lease: Lease, every_ms: int) -> Union[Due, NotDue]:
    raw_key = _keys.check_key(lease.key)
    reading = read(server, lease.key, raw_key)
    previous = reading.last_run()
    due_in_ms = reading.due_in_ms(every_ms)
    if due_in_ms > 0 and previous is not None:
        return NotDue(previous, due_in_ms / 1000)
    return Due(server, lease, raw_key, reading.now_ms, every_ms, previous)


def run(
    server: Server, acquire: Callable[[], Optional[Lease]], every_ms: int, work: Callable[[Lease], T]
) -> Periodic[T]:
    """``run_at_most_every`` once the server and the period are known good."""
    lease = acquire()
    if lease is None:
        return Busy()
    try:
        found = schedule(server, lease, every_ms)
    except BaseException:
        # Nothing ran; the release is a courtesy to the next holder.
        _release(lease)
        raise
    if isinstance(found, NotDue):
        lease.release()
        return found
    lease.keep_alive()
    try:
        value = while_held(lease, work)
        found.record(0)
    finally:
        _release(lease)
    return Ran(value)


def while_held(lease: Lease, work: Callable[[Lease], T]) -> T:
    """``work(lease)``, whose lease's loss is raised (:class:`LeaseLost`) rather than its
    result, so that a run during which the lease was lost is not counted. On asyncio the work
    is cancelled at the loss, as the Rust client's ``while_held`` drops it; a thread cannot be
    stopped, so the sync package raises the loss when the work returns."""
    running = _backend.race(lease.lost, work(lease))
    # The loss first, as Rust's biased select: work that finished as the lease was lost is
    # not counted either.
    lease.ensure_valid()
    return running.result()


def _release(lease: Lease) -> None:
    try:
        lease.release()
    except FencedLockError as err:
        log.warning("fencedlock: release of %r after a periodic run failed; the lease expires after its ttl: %s", lease.key, err)
