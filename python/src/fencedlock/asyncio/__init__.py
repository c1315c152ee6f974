"""The asyncio API over ``redis.asyncio`` clients: the same leases, fences, waiting,
keep-alive (a task; ``lease.lost`` an ``asyncio.Event``), semaphores, elections and fenced
Redlock as :mod:`fencedlock`, whose errors and status types it shares."""

from .._election import Leader
from .._wire import Engine, LockStatus, PermitStatus, SemaphoreStatus
from .election import Election, Leadership
from .lease import Lease
from .locker import Locker
from .redlock import Redlock

__all__ = [
    "Election",
    "Engine",
    "Leader",
    "Leadership",
    "Lease",
    "Locker",
    "LockStatus",
    "PermitStatus",
    "Redlock",
    "SemaphoreStatus",
]
