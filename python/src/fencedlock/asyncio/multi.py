"""Several keys at once, all or none: :meth:`Locker.acquire_all
<fencedlock.Locker.acquire_all>` hands back a lease on every key, each with its own fence, or
no lease at all. The rules are the Rust client's (``docs/rust.md``, "Several keys at once"):

- **In one command where the server can**: a :class:`~fencedlock.Locker` takes a set of up
  to 64 keys in one command for one token, every key or none at once, where its server's
  module has ``FENCEDLOCK.ACQUIREALL`` (asked once with ``COMMAND INFO``; on a Redis Cluster
  node, keys of one slot), or where its leases are the Functions library's (version 7 on,
  ``fencedlock_acquireall`` by ``FCALL`` or the script's ``EVALSHA``; keys of one slot on
  any server, as ``{acct-7}:ledger`` and ``{acct-7}:mail``: one floor key, the slot's,
  covers every fence of the set). The command never waits: the call retries whole attempts
  with backoff, the same token each time, holding nothing in between (no deadlock). A
  refusal names the key held now.
- **Key by key elsewhere** (:class:`~fencedlock.Redlock`, a module without the command, keys
  of several slots on the library or a cluster node, more than 64 keys): keys taken in
  their byte order whatever order they were named in (no deadlock), everything taken
  released before a refusal returns (no partial hold), leases that aged while later keys
  were awaited renewed before the call returns (every lease valid); :func:`take_all` below.
"""

from __future__ import annotations

import logging
import time
from types import TracebackType
from typing import Awaitable, Callable, Dict, Iterable, Iterator, List, Optional, Type, Union

from .. import _keys
from ..errors import FencedLockError
from .lease import Lease, LostCallback

__all__ = ["Leases"]

log = logging.getLogger("fencedlock")


class Leases:
    """A lease on each of several keys, taken together; iterates in the order the keys were
    named. As a context manager, every lease is released on exit."""

    def __init__(self, leases: List[Lease]) -> None:
        self._leases = leases

    def __iter__(self) -> Iterator[Lease]:
        return iter(self._leases)

    def __len__(self) -> int:
        return len(self._leases)

    @property
    def keys(self) -> List[str]:
        return [lease.key for lease in self._leases]

    def get(self, key: str) -> Optional[Lease]:
        """The lease on ``key``; ``None`` for a key not in the set."""
        return next((lease for lease in self._leases if lease.key == key), None)

    def ensure_valid(self) -> None:
        """Raises :class:`~fencedlock.LeaseLost` as soon as any of the leases is lost."""
        for lease in self._leases:
            lease.ensure_valid()

    def keep_alive(self, on_lost: Optional[LostCallback] = None) -> Leases:
        """Keeps every lease alive (see :meth:`Lease.keep_alive`); ``on_lost`` is called
        with the lease that was lost."""
        for lease in self._leases:
            lease.keep_alive(on_lost)
        return self

    async def release(self) -> bool:
        """Releases every lease; ``True`` if each was still held. Every release is sent even
        if one fails; the first error is raised after."""
        held, failure = True, None
        for lease in self._leases:
            try:
                held = await lease.release() and held
            except FencedLockError as err:
                failure = failure or err
        if failure is not None:
            raise failure
        return held

    async def __aenter__(self) -> Leases:
        return self

    async def __aexit__(
        self, kind: Optional[Type[BaseException]], value: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        for lease in self._leases:
            await lease.__aexit__(kind, value, tb)

    def __repr__(self) -> str:
        return f"Leases({self._leases!r})"


async def take_all(
    acquire: Callable[[str, float], Awaitable[Optional[Lease]]], keys: Iterable[str], wait: float, window: float
) -> Union[Leases, str]:
    """The leases on ``keys`` (``acquire(key, wait_left)`` takes one), or the key that was
    refused with nothing held (a call that raises, or is cancelled, releases what it took).
    ``wait`` is for the whole call; ``window`` is how long a fresh lease can be relied on."""
    named, order = _keys.taking_order(keys)
    until = time.monotonic() + wait
    taken: Dict[str, Lease] = {}
    try:
        for key in order:
            lease = await acquire(key, max(until - time.monotonic(), 0.0))
            if lease is None:
                await _give_back(taken.values())
                return key
            taken[key] = lease
        # Leases taken early aged while later keys were awaited: each that used more than a
        # quarter of its validity is renewed, so all are good for most of a ttl on return.
        for lease in taken.values():
            if lease.remaining < window - window / 4:
                await lease.renew()
    except BaseException:
        await _give_back(taken.values())
        raise
    return Leases([taken[key] for key in named])


async def _give_back(leases: Iterable[Lease]) -> None:
    for lease in leases:
        try:
            await lease.release()
        except FencedLockError as err:
            log.debug("fencedlock: release of %r after a failed acquire_all; it expires after its ttl: %s", lease.key, err)
