"""Leader election (sync): one leader, epochs rising with each new leader, the next
candidate elected at a resignation, loss signalled before a successor is elected."""

from __future__ import annotations

import threading
import time
from typing import List

import fencedlock
from fencedlock import Election, Locker
from servers import Server


def test_candidates_lead_in_turn_with_rising_epochs(server: Server) -> None:
    election = Election(Locker(server.client(), ttl=2), "scheduler")
    assert election.leader() is None
    a = election.campaign("host-a")
    leader = election.leader()
    assert leader is not None and (leader.label, leader.epoch) == (b"host-a", a.epoch)
    elected: List[fencedlock.Leadership] = []
    t = threading.Thread(target=lambda: elected.append(election.campaign("host-b")))
    t.start()
    time.sleep(0.2)
    assert elected == []
    assert a.resign() is True
    t.join(5)
    assert elected and elected[0].epoch > a.epoch
    seen = election.observe(every=0.05)
    now = next(seen)
    assert now is not None and now.label == b"host-b"
    elected[0].resign()
    assert next(seen) is None


def test_a_deposed_leader_learns_it_before_a_successor_is_elected(server: Server) -> None:
    election = Election(Locker(server.client(), ttl=0.6, timeout=0.2), "scheduler")
    leader = election.campaign("host-a")
    server.pause()
    try:
        assert leader.lost.wait(2.0)
    finally:
        server.resume()
    successor = election.campaign("host-b", window=2)
    assert successor.epoch > leader.epoch
    successor.resign()
