"""What the sync and asyncio elections share: who leads, read from a status, and the
campaign window."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from ._wire import LockStatus, Status

MIN_CAMPAIGN_WINDOW = 1.0
"""Seconds one campaign request waits in the server's queue at least before it is sent
again; a campaign waits indefinitely, so a short wait must not turn into polling."""

MIN_POLL_INTERVAL = 0.01
"""Shortest pause between two STATUS polls of an observer."""


@dataclass(frozen=True)
class Leader:
    """Who leads, as the server tells anyone; never the token."""

    label: Optional[bytes]
    """The label the leader campaigned with (``None``: a plain lock holds the key)."""
    epoch: int
    """The leader's lease fence: higher than every earlier leader's."""
    remaining: float
    """Seconds left on its lease by the server's clock."""

    def identity(self) -> Tuple[int, Optional[bytes]]:
        return (self.epoch, self.label)


def leader_of(status: Optional[Status]) -> Optional[Leader]:
    if isinstance(status, LockStatus) and status.held:
        return Leader(status.label, status.fence, status.remaining or 0.0)
    return None


def next_poll(leader: Optional[Leader], every: float) -> float:
    """The pause before the next poll: the interval, or just after the leader's lease would
    run out if sooner (a leader that died is seen gone at its expiry)."""
    if leader is None:
        return every
    return max(min(every, leader.remaining + 0.001), MIN_POLL_INTERVAL)
