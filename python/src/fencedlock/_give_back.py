"""Giving back a token that may have been granted without our hearing of it (an ACQUIRE that
got no answer, or was interrupted). A RELEASE by our own token cannot end another owner's
lease, so it is always safe to send; and a server that answers late may still grant after
the first pass, so the background pass runs again one timeout later. The asyncio twin is
:mod:`fencedlock.asyncio._give_back`."""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence

from .errors import FencedLockError, Unavailable

Release = Callable[[bytes, bytes], bool]
"""A locker's ``release(key, token)``."""


class GiveBack:
    """The give-backs of one locker: ``release`` is its RELEASE, ``timeout`` its server's
    per-request timeout."""

    def __init__(self, release: Release, timeout: float) -> None:
        self._release = release
        self._timeout = timeout

    def release_later(self, token: bytes, *keys: bytes) -> threading.Event:
        """Releases ``keys`` in the background, at once and again one timeout later: an
        ACQUIRE that got no answer may still be granted when its server wakes up. The event
        is set when the first pass is done."""
        first = threading.Event()

        def release() -> None:
            self.release_each(token, keys)
            first.set()
            time.sleep(self._timeout)
            self.release_each(token, keys)

        threading.Thread(target=release, name="fencedlock-release", daemon=True).start()
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
        at once and one timeout later, as :meth:`release_later` does (and as the asyncio twin
        gives back an unanswered wait or a failed anchor renewal), waiting up to one timeout
        for the first pass. A server that answers has the keys back before the call goes on;
        one that does not (stopped, unreachable) cannot hold the caller up longer than that.
        The background thread ends after its second pass; it holds no connection between the
        two."""
        self.release_later(token, *keys).wait(self._timeout)
