"""What the sync and asyncio lockers share to take a set of keys in one ``ACQUIREALL`` (the
module's command, or the Functions library's ``fencedlock_acquireall``): which sets a server
takes that way, and the rules of the attempts (see :mod:`fencedlock.multi`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from . import _contract, _keys, _wire
from .errors import Cause, FencedLockError, Unavailable

INFO_CLUSTER = ("INFO", "cluster")
"""Asked once of a server whose module knows ``ACQUIREALL``: whether it is a Redis Cluster
node."""


@dataclass(frozen=True)
class OneCommand:
    """Whether a server takes a set of keys in one ``ACQUIREALL``, and which sets.

    The module where it knows the command (``COMMAND INFO``; modules older than it do not), for
    keys of one slot on a Redis Cluster node (the server answers ``CROSSSLOT`` to others),
    which the keys' hash tags give. The Functions library, by ``FCALL`` or as the script, from
    version 7 (which this package loads where the server's is older), for keys of one slot on
    any server: one floor key, the slot's, covers every fence of the set."""

    known: bool
    one_slot: bool = True
    """Whether the keys must be of one slot."""

    def takes(self, keys: Sequence[bytes]) -> bool:
        """Whether ``keys`` go in one command here: 1 to ``MAX_ACQUIRE_KEYS`` keys, of one
        slot where that is needed."""
        if not self.known or not 1 <= len(keys) <= _contract.MAX_ACQUIRE_KEYS:
            return False
        return not self.one_slot or len({_keys.key_slot(key) for key in keys}) == 1


NOT_SERVED = OneCommand(known=False)
"""A server whose module lacks ``ACQUIREALL``, or that hides ``COMMAND``: never sent the
command, whose "unknown command" error would echo the token."""

LIBRARY = OneCommand(known=True, one_slot=True)
"""A server whose leases are the Functions library's (``FCALL`` or the script): keys of one
slot, outside a cluster too. Not asked: the library this package runs is version 7 or later."""


def known(entries: Any) -> bool:
    """Whether a ``COMMAND INFO name`` reply describes the command (a non-nil entry)."""
    return isinstance(entries, list) and any(entry is not None for entry in entries)


def clustered(info: Any) -> bool:
    """Whether an ``INFO cluster`` reply shows a cluster node; ``True`` where the server
    would not say (``None``: the keys must then be of one slot, which every server takes)."""
    if isinstance(info, str):
        info = info.encode("utf-8")
    if not isinstance(info, bytes):
        return True
    return b"cluster_enabled:0" not in info


NO_REPLY = frozenset({Cause.TIMED_OUT, Cause.UNREACHABLE})
"""The causes of a request that got no reply: the server may have done it."""


def may_have_granted(err: FencedLockError) -> bool:
    """Whether a failed ``ACQUIREALL`` may have been granted all the same: no reply came (a
    timeout, a lost connection), or one came too late. An error reply changed nothing."""
    return err.cause in NO_REPLY


def granted_too_late(server: str) -> Unavailable:
    """The error of a set granted after its validity ran out (a slow reply): as a timeout,
    retried while the wait lasts; the set is released when it is the last attempt's."""
    return Unavailable(f"{server}: {_contract.ACQUIREALL} granted too late to be of use", cause=Cause.TIMED_OUT)


def holds(status: Optional[_wire.Status]) -> bool:
    """Whether ``STATUS`` shows a key held (by anyone: a lease, a permit, a reader)."""
    shown = _wire.as_semaphore(status)
    return shown is not None and bool(shown.holders)


def every_key(keys: Sequence[str]) -> str:
    """The name of a refused set when none of its keys is held now (it was refused for a
    waiter queued on a key, or the holder left since): every key."""
    return " ".join(keys)
