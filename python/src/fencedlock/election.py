# Generated from fencedlock/asyncio/election.py by python/scripts/unasync.py: do not edit.
"""Leader election on one key, after etcd's Election API: candidates campaign, one leads
under a kept-alive lease whose fence is its **epoch**, and anyone can see who leads.

A deposed leader that was frozen (a pause, SIGSTOP) still believes it leads until it next
looks: downstream resources must check the epoch on every write
(``UPDATE … SET last_epoch = :epoch WHERE … AND last_epoch <= :epoch``).
"""

from __future__ import annotations

from types import TracebackType
from typing import Iterator, Optional, Type, Union

from . import _terms
from ._election import MIN_CAMPAIGN_WINDOW, MIN_POLL_INTERVAL, Leader, leader_of, next_poll
from .errors import NotAcquired
from . import _backend
from .lease import Lease, LostCallback
from .locker import Locker

__all__ = ["Election", "Leader", "Leadership"]


class Leadership:
    """Being the leader: a kept-alive lease. :attr:`lost` is set when leadership is lost
    (before another candidate can be elected: the validity ends on our clock first)."""

    def __init__(self, lease: Lease, label: bytes) -> None:
        self.lease = lease
        self.label = label

    @property
    def epoch(self) -> int:
        return self.lease.fence

    @property
    def lost(self) -> _backend.Event:
        return self.lease.lost

    @property
    def remaining(self) -> float:
        return self.lease.remaining

    def ensure_valid(self) -> None:
        self.lease.ensure_valid()

    def resign(self) -> bool:
        """Steps down: the server hands the lease to the next candidate at once. ``True`` if
        we still led."""
        return self.lease.release()

    def __enter__(self) -> Leadership:
        return self

    def __exit__(self, kind: Optional[Type[BaseException]], value: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self.lease.__exit__(kind, value, tb)


class Election:
    """An election on ``key`` among the candidates that campaign through ``locker``."""

    def __init__(self, locker: Locker, key: str, *, ttl: Optional[_terms.Seconds] = None) -> None:
        self.locker = locker
        self.key = key
        self._ttl = ttl

    def campaign(
        self,
        label: Union[str, bytes],
        *,
        window: _terms.Seconds = 10,
        on_lost: Optional[LostCallback] = None,
        stop: Optional[_backend.Event] = None,
    ) -> Leadership:
        """Waits until elected (in the server's queue, one request per ``window`` seconds,
        at least one second), then leads under a kept-alive lease labelled ``label``
        (public: never a secret). ``stop``, looked at between windows, ends the campaign with
        :class:`NotAcquired`; on asyncio, cancelling the call ends it at once."""
        raw_label = _terms.check_label(label)
        assert raw_label is not None
        wait = max(_terms.seconds(window, "window"), MIN_CAMPAIGN_WINDOW)
        while stop is None or not stop.is_set():
            # Each window with the locker's own token, never one kept across windows: the
            # locker gives back a window's grant made without its hearing of it (a request
            # unanswered, interrupted or cancelled), and a token it gave back must not be used
            # again, lest a release still in flight end a later window's leadership.
            lease = self.locker.acquire(self.key, self._ttl, wait=wait, label=raw_label, keep_alive=True, on_lost=on_lost)
            if lease is not None:
                return Leadership(lease, raw_label)
        raise NotAcquired(self.key)

    def leader(self) -> Optional[Leader]:
        """Who leads now, from ``STATUS``; ``None`` while nobody does."""
        return leader_of(self.locker.status(self.key))

    def observe(self, every: _terms.Seconds = 1.0) -> Iterator[Optional[Leader]]:
        """The current leadership, then each change of leader or epoch (never a renewal),
        polling ``STATUS`` every ``every`` seconds while iterated (and at a leader's
        expiry, if sooner)."""
        interval = max(_terms.seconds(every, "every"), MIN_POLL_INTERVAL)
        last: Optional[object] = ()
        while True:
            leader = self.leader()
            identity = None if leader is None else leader.identity()
            if identity != last:
                last = identity
                yield leader
            _backend.sleep(next_poll(leader, interval))
