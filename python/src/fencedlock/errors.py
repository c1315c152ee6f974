"""The one exception hierarchy, and the one classification of server and connection errors
(the Rust client's ``Cause``): retries, :attr:`FencedLockError.is_unavailable` and the
exception class raised are all derived from it, so they never disagree about an error.

``FencedLockError``
  - :class:`InvalidArgument` (also a ``ValueError``): a bad key, ttl, label, permit count or
    token, refused before any request, or the server's refusal of one; nothing was written.
  - :class:`NotAcquired`: another owner holds the lock (``with locker.lease(...)`` whose wait
    ran out).
  - :class:`LeaseLost`: the lease is gone or its validity ran out; protected work must stop.
  - :class:`Unavailable`: the lock service could not answer (unreachable, timed out, loading,
    out of memory, restart grace), with :class:`QuorumNotReached` (no Redlock majority because
    masters did not answer, and none refused: its ``votes`` say how each master answered).
  - :class:`NoEngine`: neither the module nor the Functions library can serve the server.
  - :class:`ServerError`: the server refused for another reason (``NOPERM``, ...), with
    :class:`WrongType` (the key holds something else), :class:`PermitsMismatch` and
    :class:`UpgradeRefused` (a reader asked for the write lease).
  - :class:`BadReply`: a reply broke the contract's shape.
  - :class:`BadRecord`: a periodic job's run record was not written by fencedlock; the job
    is not run.
  - :class:`Stale` (from :mod:`fencedlock.resource`): the row carries a newer fence than the
    caller's; the holder is stale and must abandon its attempt.
  - :class:`RowNotFound` (from :mod:`fencedlock.resource`): no row has the id.
"""

from __future__ import annotations

import enum
import ssl
from pathlib import Path
from typing import Optional, Sequence, Tuple, Union

import redis.exceptions as rexc
from redis.sentinel import MasterNotFoundError

from ._contract import ReplyError

__all__ = [
    "BadRecord",
    "BadReply",
    "Cause",
    "FencedLockError",
    "InvalidArgument",
    "LeaseLost",
    "NoEngine",
    "NotAcquired",
    "PermitsMismatch",
    "QuorumNotReached",
    "ReplyError",
    "RowNotFound",
    "ServerError",
    "Stale",
    "Unavailable",
    "UpgradeRefused",
    "WrongType",
]


class Cause(enum.Enum):
    """Why a server did not do what was asked (the Rust client's ``Cause`` kinds)."""

    TIMED_OUT = "timed out"
    UNREACHABLE = "unreachable"
    NOT_READY = "not ready"
    NO_PRIMARY = "no primary"
    READ_ONLY = "read-only replica"
    MISROUTED = "misrouted"
    OUT_OF_MEMORY = "out of memory"
    BUSY = "busy"
    NO_REPLICAS = "no replicas"
    NO_MODULE = "no module"
    NO_PERMISSION = "no permission"
    CREDENTIALS = "credentials"
    TLS = "tls"
    NO_ENGINE = "no engine"
    OTHER = "other"

    @property
    def is_retryable(self) -> bool:
        """A later attempt may not meet it: timeouts, lost connections, a server not ready,
        a failover under way. Not ``MISROUTED``: a client of one server asks the same node
        again, which answers ``MOVED`` again."""
        return self in _RETRYABLE

    @property
    def is_outage(self) -> bool:
        """The service cannot serve requests now; never a misconfiguration, so that failing
        open can never turn a missing module or permission into unlocked work."""
        if self is Cause.MISROUTED:
            return False
        return self.is_retryable or self in (Cause.OUT_OF_MEMORY, Cause.BUSY, Cause.NO_REPLICAS)


_RETRYABLE = frozenset({Cause.TIMED_OUT, Cause.UNREACHABLE, Cause.NOT_READY, Cause.NO_PRIMARY, Cause.READ_ONLY})


class FencedLockError(Exception):
    """Base of every error this package raises. ``cause`` and ``reply_error`` say what the
    server or the connection did, when one was involved."""

    def __init__(
        self, message: str, *, cause: Optional[Cause] = None, reply_error: Optional[ReplyError] = None
    ) -> None:
        super().__init__(message)
        self.cause = cause
        self.reply_error = reply_error

    @property
    def is_retryable(self) -> bool:
        """Whether another attempt might succeed."""
        return self.cause is not None and self.cause.is_retryable

    @property
    def is_unavailable(self) -> bool:
        """Whether the lock service could not answer (as opposed to "held", or a mistake)."""
        return isinstance(self, Unavailable)


class InvalidArgument(FencedLockError, ValueError):
    """A bad argument; nothing was sent, or the server refused it and changed nothing."""


class NotAcquired(FencedLockError):
    """Another owner holds the lock (and any wait ran out)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"lock {key!r} is held by another owner")
        self.key = key


class LeaseLost(FencedLockError):
    """The lease is gone (validity ran out, the server no longer holds our token, or a
    renewal failed); work protected by it must stop."""

    def __init__(self, key: str, why: str, *, cause: Optional[Cause] = None) -> None:
        super().__init__(f"lease on {key!r} lost: {why}", cause=cause)
        self.key = key


class Unavailable(FencedLockError):
    """The lock service could not answer."""


VoteShown = Union[int, str, FencedLockError]
"""How one master answered a round: the fence it granted, ``"refused"``, ``"not awaited"``
(the round was decided without it), or the error it failed with (a timeout included)."""


class QuorumNotReached(Unavailable):
    """Redlock: no majority, because masters did not answer (timed out, unreachable, not
    ready) and none refused; whether the key is held elsewhere is unknown (the Rust client's
    ``QuorumNotReached`` for which ``is_unavailable()`` holds). A round in which any master
    refused is "held": ``acquire`` returns ``None``."""

    def __init__(self, message: str, votes: Sequence[Tuple[str, VoteShown]], *, cause: Optional[Cause] = None) -> None:
        super().__init__(message, cause=cause)
        self.votes = tuple(votes)
        """``(server, vote)`` for every master, in the order given."""


class NoEngine(FencedLockError):
    """No module, and the Functions library can be neither loaded nor run as a script.
    :attr:`library` is the library file this package carries, for an administrator to load
    (``redis-cli -x FUNCTION LOAD REPLACE < PATH``)."""

    def __init__(self, message: str, *, library: Path, cause: Optional[Cause] = None) -> None:
        super().__init__(message, cause=cause)
        self.library = library


class ServerError(FencedLockError):
    """The server refused for another reason than the request's arguments."""


class WrongType(ServerError):
    """The key holds another kind of value than a lock."""


class PermitsMismatch(ServerError):
    """The key is held with another permit count than the request's (or held by read leases,
    or a semaphore's, when the request is the other)."""


class UpgradeRefused(ServerError):
    """A read lease's holder asked for the write lease of the same key with its own token:
    refused, since two readers upgrading at once would each wait for the other. Release the
    read lease, then acquire the write lease (a new, higher fence)."""


class BadReply(FencedLockError):
    """A reply does not have the shape the contract gives it."""


class BadRecord(FencedLockError):
    """A periodic job's run record (``fencedlock:last-run:{tag}:key``) is not one fencedlock
    wrote: whether the job is due cannot be told, so it is not run (the Rust client's
    ``Error::BadRecord``)."""

    def __init__(self, server: str, key: str) -> None:
        super().__init__(f"{server}: the run record of {key!r} is malformed (not written by fencedlock?)")
        self.server = server
        self.key = key


class Stale(FencedLockError):
    """The resource refused a claim or a guarded write: the row carries a newer fence than
    the caller's, so a newer holder has claimed or written it. Nothing was written to the row
    (the transaction may still commit other work); abandon the attempt. Counted in
    :data:`fencedlock.resource.stale_refusals`."""

    def __init__(self, resource: str, fence: int, last_fence: Optional[int]) -> None:
        newer = (
            f"the row carries fence {last_fence} (a newer holder claimed or wrote it)"
            if last_fence is not None
            else "a newer holder claimed or wrote the row"
        )
        super().__init__(f"stale fence {fence} on {resource}: {newer}")
        self.resource = resource
        self.fence = fence
        self.last_fence = last_fence
        """The row's fence as read right after the refusal, where it could be read."""


class RowNotFound(FencedLockError):
    """No row has the id: nothing to claim or write (insert it first, with the fence column
    0 or the creator's fence). Not a stale fence."""

    def __init__(self, resource: str) -> None:
        super().__init__(f"no row with that id in {resource}")
        self.resource = resource


_BY_CLASS = (
    # Subclasses of ConnectionError first: they are not outages of the plain kind.
    (rexc.AuthenticationError, Cause.CREDENTIALS),
    (rexc.NoPermissionError, Cause.NO_PERMISSION),
    (rexc.ReadOnlyError, Cause.READ_ONLY),
    (rexc.BusyLoadingError, Cause.NOT_READY),
    (rexc.TimeoutError, Cause.TIMED_OUT),
)
_BY_CODE = {
    "OOM": Cause.OUT_OF_MEMORY,
    "BUSY": Cause.BUSY,
    "NOREPLICAS": Cause.NO_REPLICAS,
    "LOADING": Cause.NOT_READY,
    "TRYAGAIN": Cause.NOT_READY,
    "CLUSTERDOWN": Cause.NOT_READY,
    "MASTERDOWN": Cause.NOT_READY,
    "READONLY": Cause.READ_ONLY,
    "MOVED": Cause.MISROUTED,
    "ASK": Cause.MISROUTED,
    "NOPERM": Cause.NO_PERMISSION,
    "NOAUTH": Cause.CREDENTIALS,
    "WRONGPASS": Cause.CREDENTIALS,
}
# redis-py strips the code of these from the message and gives them a class of their own.
_CODE_OF_CLASS = (
    (rexc.NoPermissionError, "NOPERM"),
    (rexc.ReadOnlyError, "READONLY"),
    (rexc.BusyLoadingError, "LOADING"),
    (rexc.NoScriptError, "NOSCRIPT"),
    (rexc.ExecAbortError, "EXECABORT"),
    (getattr(rexc, "OutOfMemoryError", ()), "OOM"),
    (getattr(rexc, "TryAgainError", ()), "TRYAGAIN"),
    (getattr(rexc, "ClusterDownError", ()), "CLUSTERDOWN"),
    (getattr(rexc, "MasterDownError", ()), "MASTERDOWN"),
    (getattr(rexc, "MovedError", ()), "MOVED"),
    (getattr(rexc, "AskError", ()), "ASK"),
)


def split_reply(exc: rexc.ResponseError) -> tuple[str, str]:
    """An error reply as ``(code, detail)``. redis-py drops the code of the replies it has a
    class for (``ERR`` included); other codes (``WRONGTYPE``, ``BUSY``, ...) stay in front."""
    text = str(exc.args[0]) if exc.args else ""
    for cls, code in _CODE_OF_CLASS:
        if cls and isinstance(exc, cls):
            return code, text
    word, _, rest = text.partition(" ")
    if len(word) >= 2 and word.isalpha() and word.isupper():
        return word, rest
    return "ERR", text


def cause_of(exc: BaseException) -> Cause:
    """The cause of a redis-py exception."""
    if isinstance(exc, rexc.ResponseError):
        code, detail = split_reply(exc)
        if code == "ERR" and detail.startswith(("unknown command", "unknown subcommand")):
            return Cause.NO_MODULE
        return _BY_CODE.get(code, Cause.OTHER)
    if isinstance(exc, MasterNotFoundError):
        return Cause.NO_PRIMARY
    for cls, cause in _BY_CLASS:
        if isinstance(exc, cls):
            return cause
    if isinstance(exc, (rexc.ConnectionError, OSError)):
        if isinstance(exc.__cause__, ssl.SSLError) or "certificate" in str(exc).lower():
            return Cause.TLS
        return Cause.UNREACHABLE
    return Cause.OTHER


_ARGS_PHRASE = "with args beginning with"


def redact(text: str, secret: Optional[bytes]) -> str:
    """``text`` without echoed arguments and without ``secret`` (a lease token) in any form."""
    at = text.find(_ARGS_PHRASE)
    if at >= 0:
        text = text[: at + len(_ARGS_PHRASE)] + ": <redacted>"
    if secret:
        for needle in (secret.hex(), secret.decode("latin-1"), repr(secret)[2:-1]):
            if needle:
                text = text.replace(needle, "<token>")
    return text


def translate(exc: BaseException, server: str, secret: Optional[bytes] = None) -> FencedLockError:
    """The package's error for a redis-py exception from ``server``; the token is never in
    its text."""
    cause = cause_of(exc)
    reply = None
    if isinstance(exc, rexc.ResponseError):
        code, detail = split_reply(exc)
        reply = ReplyError.classify(code, detail)
        text = f"{code} {detail}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    message = f"{server}: {redact(text, secret)}"
    cls: type[FencedLockError]
    if reply is not None and reply.is_bad_request:
        cls = InvalidArgument
    elif reply is ReplyError.WRONG_TYPE:
        cls = WrongType
    elif reply is ReplyError.PERMITS_MISMATCH:
        cls = PermitsMismatch
    elif reply is ReplyError.UPGRADE_REFUSED:
        cls = UpgradeRefused
    elif cause.is_outage and reply is not ReplyError.WAIT_INTERRUPTED:
        cls = Unavailable
    else:
        cls = ServerError
    return cls(message, cause=cause, reply_error=reply)
