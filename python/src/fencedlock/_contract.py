"""The wire contract, from the protocol crate's data (``protocol/contract.json``, read once at
import by :mod:`fencedlock._data`): names, limits, key prefixes, the library's name, version
and functions, the periodic scripts, and the error replies by kind. Nothing here is restated
by hand; ``tests/test_contract_data.py`` runs the package on the file's vectors."""

from __future__ import annotations

import enum
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

from ._data import CONTRACT, integer, text

_COMMANDS: Dict[str, str] = {text(c["name"]).split(".", 1)[1]: text(c["name"]) for c in CONTRACT["commands"]}
_WORDS: Dict[str, Any] = CONTRACT["words"]
_LIMITS: Dict[str, Any] = CONTRACT["limits"]
_KEYS: Dict[str, Any] = CONTRACT["keys"]
_LIBRARY: Dict[str, Any] = CONTRACT["library"]
_PERIODIC: Dict[str, Any] = CONTRACT["periodic"]

# Command names.
ACQUIRE: str = _COMMANDS["ACQUIRE"]
ACQUIREALL: str = _COMMANDS["ACQUIREALL"]
"""Several keys for one token, all or nothing, never waiting: on modules of this version or
later, and on the Functions library from version 7 (``fencedlock_acquireall``, for keys of
one slot, their floor key last)."""
RENEW: str = _COMMANDS["RENEW"]
RELEASE: str = _COMMANDS["RELEASE"]
RAISE: str = _COMMANDS["RAISE"]
STATUS: str = _COMMANDS["STATUS"]

# ACQUIRE's option words.
BLOCK: str = text(_WORDS["block"])
LABEL: str = text(_WORDS["label"])
PERMITS: str = text(_WORDS["permits"])
SHARED: str = text(_WORDS["shared"])
"""A flag (no value): a read lease of a read-write lock."""
SHARED_PERMITS: int = integer(_WORDS["shared_permits"])
"""The permit count ``STATUS`` shows for a key held by read leases (``ACQUIRE … SHARED``)."""

# Limits.
MAX_TOKEN_LEN: int = integer(_LIMITS["max_token_len"])
MAX_LABEL_LEN: int = integer(_LIMITS["max_label_len"])
MAX_PERMITS: int = integer(_LIMITS["max_permits"])
MAX_ACQUIRE_KEYS: int = integer(_LIMITS["max_acquire_keys"])
"""The most keys one ``ACQUIREALL`` takes."""
DEFAULT_MAX_TTL_MS: int = integer(_LIMITS["default_max_ttl_ms"])
MAX_MAX_TTL_MS: int = integer(_LIMITS["max_max_ttl_ms"])
MAX_BLOCK_MS: int = integer(_LIMITS["max_block_ms"])
MAX_FENCE: int = integer(_LIMITS["max_fence"])
EPOCH_GAP: int = integer(_LIMITS["epoch_gap"])

# Redis Cluster hash slots.
SLOTS: int = integer(_LIMITS["slots"])

# The Functions library.
LIBRARY_NAME: str = text(_LIBRARY["name"])
LIBRARY_VERSION: int = integer(_LIBRARY["version"])
VERSION_FUNCTION: str = text(_LIBRARY["version_function"])
FLOOR_KEY_PREFIX: str = text(_KEYS["library_floor"]["prefix"])
WAKE_KEY_PREFIX: str = text(_KEYS["wake"]["prefix"])
WAKE_TTL_MS: int = integer(_KEYS["wake"]["ttl_ms"])
MAX_SAFE_FENCE: int = integer(_LIBRARY["max_safe_fence"])

# The function serving each command this package sends (not CAD).
FUNCTIONS: Dict[str, str] = {
    name: text(_LIBRARY["functions"][name]) for name in (ACQUIRE, ACQUIREALL, RENEW, RELEASE, RAISE, STATUS)
}
# Commands that take the floor key as their second key (`takes_floor`), and the one that
# always takes the wake-up list as its third (`takes_wake`). ACQUIREALL takes its keys' slot's
# floor key last, after every lock key (`call_keys_all`): see `_wire.acquire_all`.
TAKES_FLOOR: FrozenSet[str] = frozenset(text(name) for name in _LIBRARY["takes_floor"])
TAKES_WAKE: FrozenSet[str] = frozenset(text(name) for name in _LIBRARY["takes_wake"])

# Periodic jobs' run records: the record's key prefix (the key is
# `fencedlock:last-run:{TAG}:key`, TAG the key's slot's floor tag), its hash fields, how long
# it outlives its period, and the two scripts sent with EVAL (1 key: the record).
RECORD_KEY_PREFIX: str = text(_PERIODIC["record_key_prefix"])
STARTED_MS: str = text(_PERIODIC["fields"]["started_ms"])
FENCE: str = text(_PERIODIC["fields"]["fence"])
RECORD_LABEL: str = text(_PERIODIC["fields"]["label"])
EXIT: str = text(_PERIODIC["fields"]["exit"])
RECORD_RETENTION_MS: int = integer(_PERIODIC["retention_ms"])
READ_RECORD: str = text(_PERIODIC["read"]["text"])
WRITE_RECORD: str = text(_PERIODIC["write"]["text"])

_KINDS: Dict[str, Dict[str, Any]] = {text(k["name"]): k for k in CONTRACT["errors"]["kinds"]}


def _kind(name: str) -> Tuple[str, str]:
    """The ``(code, prefix)`` of the error kind the protocol crate names ``name``."""
    kind = _KINDS[name]
    return text(kind["code"]), text(kind["prefix"])


class ReplyError(enum.Enum):
    """The module's (and the library's) error replies by kind: ``(code, prefix)``, the code
    the reply starts with and the fixed start of the text after it."""

    BAD_TTL = _kind("BadTtl")
    TTL_TOO_LARGE = _kind("TtlTooLarge")
    BAD_TOKEN = _kind("BadToken")
    BAD_FENCE = _kind("BadFence")
    BAD_TIMEOUT = _kind("BadTimeout")
    BAD_LABEL = _kind("BadLabel")
    BAD_PERMITS = _kind("BadPermits")
    BAD_KEYS = _kind("BadKeys")
    SYNTAX = _kind("Syntax")
    PERMITS_MISMATCH = _kind("PermitsMismatch")
    UPGRADE_REFUSED = _kind("UpgradeRefused")
    FENCES_EXHAUSTED = _kind("FencesExhausted")
    RESTART_GRACE = _kind("RestartGrace")
    WAIT_INTERRUPTED = _kind("WaitInterrupted")
    WRONG_TYPE = _kind("WrongType")
    INTERNAL_COMMAND = _kind("InternalCommand")
    BAD_RECORD = _kind("BadRecord")
    INTERNAL = _kind("Internal")

    @property
    def code(self) -> str:
        code: str = self.value[0]
        return code

    @property
    def prefix(self) -> str:
        prefix: str = self.value[1]
        return prefix

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


def _bad_requests() -> FrozenSet[ReplyError]:
    by_value = {kind.value: kind for kind in ReplyError}
    named: List[ReplyError] = [by_value[_kind(name)] for name, k in _KINDS.items() if k["bad_request"]]
    return frozenset(named)


_BAD_REQUESTS = _bad_requests()
