# Generated from fencedlock/asyncio/_give_back.py by python/scripts/unasync.py: do not edit.
"""Giving back a token that may have been granted without our hearing of it (an ACQUIRE that
got no answer, or was interrupted or cancelled). A RELEASE by our own token cannot end another
owner's lease, so it is always safe to send; and a server that answers late may still grant
after the first pass, so the background pass runs again one timeout later."""

from __future__ import annotations

from typing import Callable, Sequence

from .errors import FencedLockError, Unavailable
from . import _backend

Release = Callable[[bytes, bytes], bool]
"""A locker's ``release(key, token)``."""


class GiveBack:
    """The give-backs of one locker: ``release`` is its RELEASE, ``timeout`` its server's
    per-request timeout."""

    def __init__(self, release: Release, timeout: float) -> None:
        self._release = release
        self._timeout = timeout

    def release_later(self, token: bytes, *keys: bytes) -> _backend.Event:
        """Releases ``keys`` in the background (a task, or a daemon thread), at once and again
        one timeout later: an ACQUIRE that got no answer may still be granted when its server
        wakes up. The event is set when the first pass is done."""
        first = _backend.Event()

        def release() -> None:
            self.release_each(token, keys)
            first.set()
            _backend.sleep(self._timeout)
            self.release_each(token, keys)

        _backend.spawn(release, name="fencedlock-release")
        return first

    def release_each(self, token: bytes, keys: Sequence[bytes]) -> None:
        """Releases each key, quietly; a server that does not answer is left for the next
        pass (rather than one connection attempt per key)."""
        for key in keys:
            try:
                self._release(key, token)
            except Unavailable:
                return
            except FencedLockError:
                continue

    def release_quietly(self, key: bytes, token: bytes) -> None:
        try:
            self._release(key, token)
        except FencedLockError:
            pass

    def release_set(self, keys: Sequence[bytes], token: bytes) -> None:
        """Releases every key (one, or a set) that may have been granted to ``token`` unheard:
        at once and one timeout later, as :meth:`release_later` does, waiting up to one timeout
        for the first pass. A server that answers has the keys back before the call goes on;
        one that does not (stopped, unreachable) cannot hold the caller up longer than that.
        The background pass ends after its second pass; it holds no connection between the
        two."""
        _backend.wait_event(self.release_later(token, *keys), self._timeout)

    def release_unheard(self, token: bytes, *keys: bytes) -> None:
        """Gives back a failed wait's possible grant, at once and one timeout later; the sync
        package waits up to one timeout for the first pass, the asyncio one does not (see
        ``_backend.after_failure``)."""
        _backend.after_failure(self.release_later(token, *keys), self._timeout)
