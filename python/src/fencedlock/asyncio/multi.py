"""Several keys at once on asyncio: the twin of :mod:`fencedlock.multi`."""

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
    """See :class:`fencedlock.Leases`: ``release()`` is awaited, ``async with leases:``
    releases every lease on exit."""

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
        return next((lease for lease in self._leases if lease.key == key), None)

    def ensure_valid(self) -> None:
        for lease in self._leases:
            lease.ensure_valid()

    def keep_alive(self, on_lost: Optional[LostCallback] = None) -> Leases:
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
    """See ``fencedlock.multi.take_all``. Cancel-safe: a cancelled call releases what it
    took."""
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
        # Renew the leases that aged while later keys were awaited (see the sync twin).
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
