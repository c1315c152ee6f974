"""Redis locks with fencing tokens that never repeat, over the redis-py client you have.

Every lease carries a **fence**, larger for every later grant on the same key, even across
``DEL``, restarts and failovers. Send it with each write and have the resource refuse fences
lower than the highest it has seen (``UPDATE … SET last_fence = :fence WHERE … AND last_fence
<= :fence``): a holder paused past its lease then cannot overwrite its successor's work.

Synchronous API here; the same over ``redis.asyncio`` in :mod:`fencedlock.asyncio`. The
resource's half, claiming rows and guarding writes with the fence on your own ``sqlite3`` or
psycopg connection, is :mod:`fencedlock.resource`.
"""

from ._wire import Engine, LockStatus, PermitStatus, SemaphoreStatus
from .errors import (
    BadRecord,
    BadReply,
    Cause,
    FencedLockError,
    InvalidArgument,
    LeaseLost,
    NoEngine,
    NotAcquired,
    PermitsMismatch,
    QuorumNotReached,
    ReplyError,
    RowNotFound,
    ServerError,
    Stale,
    Unavailable,
    UpgradeRefused,
    WrongType,
)
from ._election import Leader
from .election import Election, Leadership
from .lease import Lease
from .locker import Locker
from .multi import Leases
from .periodic import Busy, Due, LastRun, NotDue, Periodic, Ran
from .read_write import ReadWriteLock
from .redlock import Redlock

__all__ = [
    "BadRecord",
    "BadReply",
    "Busy",
    "Cause",
    "Due",
    "Election",
    "Engine",
    "FencedLockError",
    "InvalidArgument",
    "LastRun",
    "Leader",
    "Leadership",
    "Lease",
    "LeaseLost",
    "Leases",
    "Locker",
    "LockStatus",
    "NoEngine",
    "NotAcquired",
    "NotDue",
    "Periodic",
    "PermitStatus",
    "PermitsMismatch",
    "QuorumNotReached",
    "Ran",
    "ReadWriteLock",
    "Redlock",
    "ReplyError",
    "RowNotFound",
    "SemaphoreStatus",
    "ServerError",
    "Stale",
    "Unavailable",
    "UpgradeRefused",
    "WrongType",
]
