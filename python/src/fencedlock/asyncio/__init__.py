"""The asyncio API over ``redis.asyncio`` clients: the same leases, fences, waiting,
keep-alive (a task; ``lease.lost`` an ``asyncio.Event``), semaphores, read-write locks,
elections, several keys at once, periodic jobs and fenced Redlock as :mod:`fencedlock`, whose
errors and status types it shares."""

from .._election import Leader
from .._wire import Engine, LockStatus, PermitStatus, SemaphoreStatus
from .election import Election, Leadership
from .lease import Lease
from .locker import Locker
from .multi import Leases
from .periodic import Busy, Due, LastRun, NotDue, Periodic, Ran
from .read_write import ReadWriteLock
from .redlock import Redlock

__all__ = [
    "Busy",
    "Due",
    "Election",
    "Engine",
    "Leader",
    "Leadership",
    "LastRun",
    "Lease",
    "Leases",
    "Locker",
    "LockStatus",
    "NotDue",
    "Periodic",
    "PermitStatus",
    "Ran",
    "ReadWriteLock",
    "Redlock",
    "SemaphoreStatus",
]
