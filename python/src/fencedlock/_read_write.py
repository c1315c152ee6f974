"""What the sync and asyncio read-write locks share: their terms, checked once when the lock
is made, and the rule for which lease a downgrade may take."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from . import _keys, _terms
from .errors import InvalidArgument


@dataclass(frozen=True)
class Terms:
    """A lock's key and the terms of every lease it takes (``ttl`` ``None``: the locker's)."""

    key: str
    ttl: Optional[_terms.Seconds]
    wait: float
    label: Optional[bytes]

    @staticmethod
    def checked(
        key: str, ttl: Optional[_terms.Seconds], wait: _terms.Seconds, label: Union[str, bytes, None]
    ) -> Terms:
        """The terms, or :class:`~fencedlock.InvalidArgument` before anything is sent."""
        _keys.check_key(key)
        if ttl is not None:
            _terms.ttl_ms(ttl)
        return Terms(key, ttl, _terms.wait_seconds(wait), _terms.check_label(label))

    def wait_for(self, wait: Optional[_terms.Seconds]) -> _terms.Seconds:
        """A call's own wait, or the lock's."""
        return self.wait if wait is None else wait

    def check_downgrade(self, lease_key: str, granted_by: object, locker: object) -> None:
        """Only this lock's write lease is downgraded: of its key, from its locker (a lease of
        another server would re-ask there)."""
        if lease_key != self.key:
            raise InvalidArgument(f"downgrade: the lease is on {lease_key!r}, this lock's key is {self.key!r}")
        if granted_by is not locker:
            raise InvalidArgument("downgrade takes a lease this lock's locker granted")
