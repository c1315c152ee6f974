"""Stale refusals, counted per resource and logged: the lesson's "stale-write rejections from
the fence — each is a stale owner you caught". No metrics library: a counter the
application reads (or is told of, to feed its own metrics), and a ``logging`` record."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

log = logging.getLogger("fencedlock.resource")

METRIC = "fencedlock_fence_refusals_total"
"""The name the Rust crate reports the counter under (``fencedlock-guard``'s
``STALE_REFUSALS_TOTAL``): export :data:`stale_refusals` under it to share one time series."""
RESOURCE_LABEL = "resource"
"""The counter's label: the table's resource."""


@dataclass(frozen=True)
class Refusal:
    """One claim or guarded write refused for a stale fence."""

    resource: str
    step: str
    """``"claim"`` or ``"write"``."""
    fence: int
    """The refused holder's fence."""
    last_fence: Optional[int]
    """The row's fence, read right after the refusal."""


Listener = Callable[[Refusal], object]


class StaleRefusals:
    """Claims and guarded writes refused for a stale fence in this process, by resource.

    >>> from fencedlock.resource import stale_refusals
    >>> stale_refusals.count("invoice_jobs")          # refusals on that table so far
    >>> stale_refusals.snapshot()                     # {"invoice_jobs": 3, ...}
    >>> remove = stale_refusals.add_listener(lambda r: counter.labels(r.resource).inc())

    A non-zero rate is the mechanism working: each is a paused or partitioned holder caught.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Dict[str, int] = {}
        self._listeners: List[Listener] = []

    def count(self, resource: str) -> int:
        """Refusals on ``resource`` so far."""
        with self._lock:
            return self._counts.get(resource, 0)

    def total(self) -> int:
        """Refusals on every resource so far."""
        with self._lock:
            return sum(self._counts.values())

    def snapshot(self) -> Dict[str, int]:
        """A copy of the counts, by resource."""
        with self._lock:
            return dict(self._counts)

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Calls ``listener`` with each refusal from now on (on the refusing thread; an
        exception it raises is logged, never raised into the write); returns its remover."""
        with self._lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    def record(self, refusal: Refusal) -> None:
        """Counts ``refusal``, logs it (``WARNING``, logger ``fencedlock.resource``) and tells
        the listeners."""
        with self._lock:
            self._counts[refusal.resource] = self._counts.get(refusal.resource, 0) + 1
            listeners = list(self._listeners)
        log.warning(
            "stale fence %d refused (%s on %s): the row carries fence %s; a newer holder claimed or wrote it",
            refusal.fence,
            refusal.step,
            refusal.resource,
            refusal.last_fence,
            extra={"resource": refusal.resource, "step": refusal.step, "fence": refusal.fence,
                   "last_fence": refusal.last_fence},
        )
        for listener in listeners:
            try:
                listener(refusal)
            except Exception:
                log.exception("a stale-refusal listener failed")


stale_refusals = StaleRefusals()
"""This process's counter of stale refusals, by resource."""
