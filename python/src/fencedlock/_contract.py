"""The wire contract, restated from the protocol crate (``protocol/src``), its one definition.

Every name and number here is checked against that source by ``tests/test_contract.py``, which
fails when the two differ: change the crate first, then this file.
"""

from __future__ import annotations

import enum
from typing import Optional

# Command names (protocol/src/command.rs).
ACQUIRE = "FENCEDLOCK.ACQUIRE"
RENEW = "FENCEDLOCK.RENEW"
RELEASE = "FENCEDLOCK.RELEASE"
RAISE = "FENCEDLOCK.RAISE"
STATUS = "FENCEDLOCK.STATUS"

# ACQUIRE's option words.
BLOCK = "BLOCK"
LABEL = "LABEL"
PERMITS = "PERMITS"

# Limits (protocol/src/limits.rs).
MAX_TOKEN_LEN = 512
MAX_LABEL_LEN = 256
MAX_PERMITS = 1024
DEFAULT_MAX_TTL_MS = 24 * 60 * 60 * 1000
MAX_MAX_TTL_MS = 1 << 42
MAX_BLOCK_MS = MAX_MAX_TTL_MS
MAX_FENCE = (1 << 63) - 1
EPOCH_GAP = 1 << 32

# Redis Cluster hash slots (protocol/src/cluster.rs).
SLOTS = 16384

# The Functions library (protocol/src/functions.rs).
LIBRARY_NAME = "fencedlock"
LIBRARY_VERSION = 5
VERSION_FUNCTION = "fencedlock_version"
FLOOR_KEY_PREFIX = "fencedlock:fn-floor:{"
WAKE_KEY_PREFIX = "fencedlock:fn-wake:{"
WAKE_TTL_MS = 10_000
MAX_SAFE_FENCE = (1 << 53) - 1

# The function serving each command (protocol/src/functions.rs, `function`).
FUNCTIONS = {
    ACQUIRE: "fencedlock_acquire",
    RENEW: "fencedlock_renew",
    RELEASE: "fencedlock_release",
    RAISE: "fencedlock_raise",
    STATUS: "fencedlock_status",
}
# Commands that take the floor key as their second key (`takes_floor`), and the one that
# always takes the wake-up list as its third (`takes_wake`).
TAKES_FLOOR = frozenset({ACQUIRE, RENEW, RELEASE, RAISE})
TAKES_WAKE = frozenset({RELEASE})


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
    SYNTAX = ("ERR", "syntax error")
    PERMITS_MISMATCH = ("ERR", "permits mismatch")
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
        ReplyError.SYNTAX,
    }
)
