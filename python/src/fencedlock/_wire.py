"""Requests and replies as values, without I/O: the words each engine sends for each
command, and the ``STATUS`` reply decoded with every rule of its shape."""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple, Union

from . import _contract, _data, _keys
from .errors import BadReply, InvalidArgument

Args = Tuple[Union[str, bytes, int], ...]


class Engine(enum.Enum):
    """What serves the lease commands on a server."""

    MODULE = "module"
    """The ``fencedlock`` module: every guarantee, waiting in the server's FIFO queue."""
    FUNCTIONS = "functions"
    """The ``fencedlock`` Functions library (``FCALL``): leases on the server's wall clock,
    waiting woken by releases through the key's wake-up list."""
    SCRIPT = "script"
    """The library's source as a script (``EVALSHA``), where ``FUNCTION`` is denied."""


def library_source() -> str:
    """The Functions library: ``protocol/src/functions.lua``, the package's own copy once
    installed (see :mod:`fencedlock._data`)."""
    return _data.LIBRARY_FILE.read_text("utf-8")


LIBRARY = library_source()
# The source without its `#!lua name=…` line, which EVAL refuses; called by SHA1.
SCRIPT = LIBRARY.split("\n", 1)[1]
SCRIPT_SHA = hashlib.sha1(SCRIPT.encode("utf-8")).hexdigest()


def library_code(libraries: Any) -> Optional[bytes]:
    """The ``library_code`` of the ``fencedlock`` library in a ``FUNCTION LIST … WITHCODE``
    reply (RESP2: flat field/value lists; RESP3: maps; bytes or, with ``decode_responses``,
    str), ``None`` when the reply lists no such library."""
    if not isinstance(libraries, list):
        return None
    for library in libraries:
        if isinstance(library, list):
            pairs = list(zip(library[::2], library[1::2]))
        elif isinstance(library, dict):
            pairs = list(library.items())
        else:
            continue
        fields = {_text(name): value for name, value in pairs}
        if _text(fields.get(b"library_name")) == _contract.LIBRARY_NAME.encode():
            return _text(fields.get(b"library_code"))
    return None


def _text(value: Any) -> Optional[bytes]:
    if isinstance(value, str):
        return value.encode("utf-8")
    return value if isinstance(value, bytes) else None


def library_differs(libraries: Any) -> bool:
    """Whether a ``FUNCTION LIST … WITHCODE`` reply shows a ``fencedlock`` library whose code
    is not this package's (a library changed without a version raise, or tampered with)."""
    return library_code(libraries) != LIBRARY.encode("utf-8")


def command(engine: Engine, name: str, key: bytes, rest: Sequence[Union[str, bytes, int]], waiting: bool = False) -> Args:
    """The words of ``name`` on ``key`` with arguments ``rest`` as ``engine`` takes them: the
    library's form names the key's floor key where the function takes it, and the wake-up
    list on a release and on a waiter's ``ACQUIRE``."""
    if engine is Engine.MODULE:
        return (name, key, *rest)
    function = _contract.FUNCTIONS[name]
    keys: List[bytes] = [key]
    if waiting or name in _contract.TAKES_WAKE:
        keys += [_keys.floor_key(key), _keys.wake_key(key)]
    elif name in _contract.TAKES_FLOOR:
        keys.append(_keys.floor_key(key))
    return _library_call(engine, function, keys, rest)


def _library_call(
    engine: Engine, function: str, keys: Sequence[bytes], rest: Sequence[Union[str, bytes, int]]
) -> Args:
    """``FCALL function numkeys keys… rest…``, or the script's ``EVALSHA``, which takes the
    function's name as its first argument."""
    if engine is Engine.SCRIPT:
        return ("EVALSHA", SCRIPT_SHA, len(keys), *keys, function, *rest)
    return ("FCALL", function, len(keys), *keys, *rest)


def acquire(
    engine: Engine,
    key: bytes,
    token: bytes,
    ttl_ms: int,
    *,
    label: Optional[bytes] = None,
    permits: int = 1,
    shared: bool = False,
    block_ms: Optional[int] = None,
    waiting: bool = False,
) -> Args:
    """``ACQUIRE key token ttl_ms [LABEL l] [PERMITS n | SHARED] [BLOCK ms]`` as the
    protocol's ``Acquire::words`` builds it: ``PERMITS`` only above 1, ``SHARED`` (a read
    lease, never with ``PERMITS``) a word alone, ``BLOCK`` last."""
    if shared and permits != 1:
        raise InvalidArgument("a read lease (SHARED) takes no permit count")
    rest: List[Union[str, bytes, int]] = [token, ttl_ms]
    if label is not None:
        rest += [_contract.LABEL, label]
    if permits > 1:
        rest += [_contract.PERMITS, permits]
    if shared:
        rest.append(_contract.SHARED)
    if block_ms is not None:
        rest += [_contract.BLOCK, block_ms]
    return command(engine, _contract.ACQUIRE, key, rest, waiting)


def acquire_all(
    keys: Sequence[bytes], token: bytes, ttl_ms: int, *, label: Optional[bytes] = None, engine: Engine = Engine.MODULE
) -> Args:
    """``ACQUIREALL numkeys key [key ...] token ttl_ms [LABEL l]`` as the protocol's
    ``AcquireAll::words`` builds it: the keys after their count, then ``ACQUIRE``'s words
    after its key (never ``BLOCK``: the command does not wait). On the library
    (``fencedlock_acquireall``, by ``FCALL`` or the script's ``EVALSHA``) the keys are followed
    by the floor key of their slot, as ``functions::call_keys_all`` names them: the caller
    keeps them in one slot (the library refuses a key of another as a wrong floor)."""
    rest: List[Union[str, bytes, int]] = [token, ttl_ms]
    if label is not None:
        rest += [_contract.LABEL, label]
    if engine is Engine.MODULE:
        return (_contract.ACQUIREALL, len(keys), *keys, *rest)
    named: List[bytes] = [*keys, _keys.floor_key(keys[0])] if keys else []
    return _library_call(engine, _contract.FUNCTIONS[_contract.ACQUIREALL], named, rest)


def fence_of(reply: Any) -> Optional[int]:
    """An ``ACQUIRE``/``RAISE`` reply: the fence, or ``None`` for nil."""
    if reply is None:
        return None
    if isinstance(reply, int) and not isinstance(reply, bool) and 1 <= reply <= _contract.MAX_FENCE:
        return reply
    raise BadReply(f"a fence or nil was expected, not {type(reply).__name__}")


def fences_of(reply: Any, count: int) -> Optional[List[int]]:
    """An ``ACQUIREALL`` reply for ``count`` keys: a fence per key in the order sent, or
    ``None`` for nil (the set refused)."""
    if reply is None:
        return None
    if not isinstance(reply, list) or len(reply) != count:
        raise BadReply(f"{count} fences or nil were expected, not {reply!r}")
    fences: List[int] = []
    for value in reply:
        fence = fence_of(value)
        if fence is None:
            raise BadReply("ACQUIREALL replied nil in place of a fence")
        fences.append(fence)
    return fences


def flag_of(reply: Any) -> bool:
    """A ``RENEW``/``RELEASE`` reply: 1 or 0."""
    if reply in (0, 1) and isinstance(reply, int):
        return reply == 1
    raise BadReply(f"1 or 0 was expected, not {reply!r}")


@dataclass(frozen=True)
class LockStatus:
    """What ``STATUS`` says about a lock key; never the token."""

    fence: int
    """The key's last fence; the next grant's is higher."""
    held: bool
    remaining: Optional[float]
    """Seconds left on the lease by the server's clock, while held."""
    label: Optional[bytes]
    """The holder's public label, if it has one."""


@dataclass(frozen=True)
class PermitStatus:
    """One unexpired holder of a semaphore key."""

    fence: int
    remaining: float
    label: Optional[bytes]


@dataclass(frozen=True)
class SemaphoreStatus:
    """What ``STATUS`` says about a semaphore key: its permits and unexpired holders, oldest
    grant first; never a token. A key held by read leases (a :class:`ReadWriteLock`'s
    readers) shows ``permits`` 0 (:attr:`is_shared`)."""

    fence: int
    permits: int
    """How many holders the key admits at once; 0 for read leases (up to ``MAX_PERMITS``)."""
    holders: Tuple[PermitStatus, ...]

    @property
    def is_shared(self) -> bool:
        """Whether read leases hold the key (``ACQUIRE … SHARED``)."""
        return self.permits == _contract.SHARED_PERMITS

    @property
    def capacity(self) -> int:
        """How many holders the key admits at once: its permits, or ``MAX_PERMITS`` readers."""
        return _contract.MAX_PERMITS if self.is_shared else self.permits

    @property
    def free(self) -> int:
        """Permits nobody holds now (for read leases: further readers the key admits)."""
        return max(self.capacity - len(self.holders), 0)


Status = Union[LockStatus, SemaphoreStatus]


def _int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise BadReply(f"STATUS replied {value!r} where an integer goes")


def _label(value: Any) -> Optional[bytes]:
    if value is None:
        return None
    raw = value.encode("utf-8") if isinstance(value, str) else value
    if not isinstance(raw, bytes) or not 1 <= len(raw) <= _contract.MAX_LABEL_LEN:
        raise BadReply("a label has 1 to MAX_LABEL_LEN bytes")
    return raw


def decode_status(reply: Any) -> Optional[Status]:
    """A ``STATUS`` reply, checking the rules of ``LockStatus::decode`` and
    ``SemaphoreStatus::decode``; :class:`BadReply` for a reply that breaks them."""
    if reply is None:
        return None
    if not isinstance(reply, list) or len(reply) not in (3, 4):
        raise BadReply(f"STATUS must reply 3 or 4 elements, not {reply!r}")
    fence, second, third = (_int(v) for v in reply[:3])
    if fence < 1:
        raise BadReply("the fence must be positive")
    fourth = reply[3] if len(reply) == 4 else None
    if isinstance(fourth, list):
        return _semaphore(fence, second, third, fourth)
    label = _label(fourth)
    if second == 1:
        if third < 0:
            raise BadReply("a held lease has a pttl")
        return LockStatus(fence, True, third / 1000, label)
    if second != 0:
        raise BadReply("held must be 0 or 1")
    if label is not None:
        raise BadReply("only a held lease has a label")
    if third != -1:
        raise BadReply("a free lock has pttl -1")
    return LockStatus(fence, False, None, None)


def _semaphore(fence: int, count: int, permits: int, entries: List[Any]) -> SemaphoreStatus:
    if not (1 <= permits <= _contract.MAX_PERMITS or permits == _contract.SHARED_PERMITS):
        raise BadReply("permits must be 1 to MAX_PERMITS, or 0 for read leases")
    capacity = _contract.MAX_PERMITS if permits == _contract.SHARED_PERMITS else permits
    if count != len(entries) or count > capacity:
        raise BadReply("the holder count must match the entries and fit the permits")
    holders = []
    previous = 0
    for entry in entries:
        if not isinstance(entry, list) or len(entry) != 3:
            raise BadReply("a holder is [fence, pttl_ms, label]")
        holder_fence, pttl = _int(entry[0]), _int(entry[1])
        if not previous < holder_fence <= fence:
            raise BadReply("holders' fences increase, up to the key's")
        if pttl < 0:
            raise BadReply("a holder has a pttl")
        holders.append(PermitStatus(holder_fence, pttl / 1000, _label(entry[2])))
        previous = holder_fence
    return SemaphoreStatus(fence, permits, tuple(holders))


def as_semaphore(status: Optional[Status]) -> Optional[SemaphoreStatus]:
    """A key's status as its holders: a mutex key (a write lease, or none) shows as one
    permit, as the Rust client's ``semaphore_status`` shows it."""
    if status is None or isinstance(status, SemaphoreStatus):
        return status
    holders: Tuple[PermitStatus, ...] = ()
    if status.held:
        holders = (PermitStatus(status.fence, status.remaining or 0.0, status.label),)
    return SemaphoreStatus(status.fence, 1, holders)


def held_for(status: Optional[Status]) -> float:
    """Seconds until a new holder fits by the leases' expiry alone: zero for a free key or a
    semaphore with a free permit, else the time left on the lease that ends first (for
    readers: the first a waiting writer is woken at, by its release or expiry)."""
    if status is None:
        return 0.0
    if isinstance(status, LockStatus):
        return status.remaining or 0.0
    if not status.is_shared and status.free > 0:
        return 0.0
    return min((h.remaining for h in status.holders), default=0.0)
