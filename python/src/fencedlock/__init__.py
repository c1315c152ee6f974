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
    BadReply,
    Cause,
    FencedLockError,
    InvalidArgument,
    LeaseLost,
    NoEngine,
    NotAcquired,
    PermitsMismatch,
    ReplyError,
    RowNotFound,
    ServerError,
    Stale,
    Unavailable,
    WrongType,
)
from ._election import Leader
from .election import Election, Leadership
from .lease import Lease
from .locker import Locker
from .redlock import Redlock

__all__ = [
    "BadReply",
    "Cause",
    "Election",
    "Engine",
    "FencedLockError",
    "InvalidArgument",
    "Leader",
    "Leadership",
    "Lease",
    "LeaseLost",
    "Locker",
    "LockStatus",
    "NoEngine",
    "NotAcquired",
    "PermitStatus",
    "PermitsMismatch",
    "Redlock",
    "ReplyError",
    "RowNotFound",
    "SemaphoreStatus",
    "ServerError",
    "Stale",
    "Unavailable",
    "WrongType",
]
