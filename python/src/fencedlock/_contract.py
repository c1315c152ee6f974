"""The wire contract, restated from the protocol crate (``protocol/src``), its one definition.

Every name and number here is checked against that source by ``tests/test_contract.py``, which
fails when the two differ: change the crate first, then this file.
"""

from __future__ import annotations

import enum
from typing import Optional

# Command names (protocol/src/command.rs).
ACQUIRE = "FENCEDLOCK.ACQUIRE"
ACQUIREALL = "FENCEDLOCK.ACQUIREALL"
"""Several keys for one token, all or nothing, never waiting: on modules of this version or
later, and on the Functions library from version 7 (``fencedlock_acquireall``, for keys of
one slot, their floor key last)."""
RENEW = "FENCEDLOCK.RENEW"
RELEASE = "FENCEDLOCK.RELEASE"
RAISE = "FENCEDLOCK.RAISE"
STATUS = "FENCEDLOCK.STATUS"

# ACQUIRE's option words.
BLOCK = "BLOCK"
LABEL = "LABEL"
PERMITS = "PERMITS"
SHARED = "SHARED"
"""A flag (no value): a read lease of a read-write lock."""
SHARED_PERMITS = 0
"""The permit count ``STATUS`` shows for a key held by read leases (``ACQUIRE … SHARED``)."""

# Limits (protocol/src/limits.rs).
MAX_TOKEN_LEN = 512
MAX_LABEL_LEN = 256
MAX_PERMITS = 1024
MAX_ACQUIRE_KEYS = 64
"""The most keys one ``ACQUIREALL`` takes."""
DEFAULT_MAX_TTL_MS = 24 * 60 * 60 * 1000
MAX_MAX_TTL_MS = 1 << 42
MAX_BLOCK_MS = MAX_MAX_TTL_MS
MAX_FENCE = (1 << 63) - 1
EPOCH_GAP = 1 << 32

# Redis Cluster hash slots (protocol/src/cluster.rs).
SLOTS = 16384

# The Functions library (protocol/src/functions.rs).
LIBRARY_NAME = "fencedlock"
LIBRARY_VERSION = 7
VERSION_FUNCTION = "fencedlock_version"
FLOOR_KEY_PREFIX = "fencedlock:fn-floor:{"
WAKE_KEY_PREFIX = "fencedlock:fn-wake:{"
WAKE_TTL_MS = 10_000
MAX_SAFE_FENCE = (1 << 53) - 1

# The function serving each command (protocol/src/functions.rs, `function`).
FUNCTIONS = {
    ACQUIRE: "fencedlock_acquire",
    ACQUIREALL: "fencedlock_acquireall",
    RENEW: "fencedlock_renew",
    RELEASE: "fencedlock_release",
    RAISE: "fencedlock_raise",
    STATUS: "fencedlock_status",
}
# Commands that take the floor key as their second key (`takes_floor`), and the one that
# always takes the wake-up list as its third (`takes_wake`). ACQUIREALL takes its keys' slot's
# floor key last, after every lock key (`call_keys_all`): see `_wire.acquire_all`.
TAKES_FLOOR = frozenset({ACQUIRE, RENEW, RELEASE, RAISE})
TAKES_WAKE = frozenset({RELEASE})

# Periodic jobs' run records (protocol/src/periodic.rs): the record's key prefix (the key is
# `fencedlock:last-run:{TAG}:key`, TAG the key's slot's floor tag), its hash fields, how long
# it outlives its period, and the two scripts sent with EVAL (1 key: the record).
RECORD_KEY_PREFIX = "fencedlock:last-run:{"
STARTED_MS = "started_ms"
FENCE = "fence"
RECORD_LABEL = "label"
EXIT = "exit"
RECORD_RETENTION_MS = 86_400_000
READ_RECORD = """\
local now = redis.call('TIME')
local r = redis.call('HMGET', KEYS[1], 'started_ms', 'fence', 'label', 'exit')
return {now[1], now[2], r[1], r[2], r[3], r[4]}
"""
WRITE_RECORD = """\
local cur, fence = redis.call('HGET', KEYS[1], 'fence'), ARGV[2]
if cur and (#cur > #fence or (#cur == #fence and cur > fence)) then return 0 end
redis.call('HSET', KEYS[1], 'started_ms', ARGV[1], 'fence', fence, 'exit', ARGV[4])
if ARGV[3] == '' then redis.call('HDEL', KEYS[1], 'label') else redis.call('HSET', KEYS[1], 'label', ARGV[3]) end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""


class ReplyError(enum.Enum):
    """The module's (and the library's) error replies by kind: ``(code, prefix)``, the code
    the reply starts with and the fixed start of the text after it (protocol/src/error.rs)."""

    BAD_TTL = ("ERR", "ttl must be a positive integer")
    TTL_TOO_LARGE = ("ERR", "ttl exceeds")
    BAD_TOKEN = ("ERR", "token must be")
    BAD_FENCE = ("ERR", "fence must be")
    BAD_TIMEOUT = ("ERR", "timeout must be")
    BAD_LABEL = ("ERR", "label must be")
    BAD_PERMITS = ("ERR", "permits must be")
    BAD_KEYS = ("ERR", "numkeys must be")
    SYNTAX = ("ERR", "syntax error")
    PERMITS_MISMATCH = ("ERR", "permits mismatch")
    UPGRADE_REFUSED = ("ERR", "upgrade refused")
    FENCES_EXHAUSTED = ("ERR", "fence space exhausted")
    RESTART_GRACE = ("TRYAGAIN", "fencedlock restart grace")
    WAIT_INTERRUPTED = ("TRYAGAIN", "fencedlock wait interrupted")
    WRONG_TYPE = ("WRONGTYPE", "Operation against a key holding the wrong kind of value")
    INTERNAL_COMMAND = ("ERR", "FENCEDLOCK.APPLY is internal")
    BAD_RECORD = ("ERR", "malformed FENCEDLOCK.APPLY record")
    INTERNAL = ("ERR", "fencedlock internal error")

    @property
    def code(self) -> str:
        return self.value[0]

    @property
    def prefix(self) -> str:
        return self.value[1]

    @property
    def is_bad_request(self) -> bool:
        """The request itself was wrong: sending it again cannot succeed."""
        return self in _BAD_REQUESTS

    @staticmethod
    def classify(code: str, detail: str) -> Optional[ReplyError]:
        """The kind of an error reply from its code and the text after it; ``None`` for
        errors the module does not send. ``WRONGTYPE`` is known by its code alone."""
        for kind in ReplyError:
            if code == kind.code and (kind is ReplyError.WRONG_TYPE or detail.startswith(kind.prefix)):
                return kind
        return None


_BAD_REQUESTS = frozenset(
    {
        ReplyError.BAD_TTL,
        ReplyError.TTL_TOO_LARGE,
        ReplyError.BAD_TOKEN,
        ReplyError.BAD_FENCE,
        ReplyError.BAD_TIMEOUT,
        ReplyError.BAD_LABEL,
        ReplyError.BAD_PERMITS,
        ReplyError.BAD_KEYS,
        ReplyError.SYNTAX,
    }
)
