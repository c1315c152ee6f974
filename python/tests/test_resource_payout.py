"""The payout example (``examples/payout.py``) against a real PostgreSQL and real leases from a
real Redis with the module: the provider pays once across a lost answer, a lost lease and the
next holder's retry, and across crashes before and after the call, settled by the
reconciliation."""

from __future__ import annotations

import time
from typing import Any, Iterator, Tuple

import pytest

from fencedlock import Lease, Locker
from payout import (SCHEMA, Attempt, Outcome, Reconciled, SimulatedProvider, attempt, create_payout, lock_key, main,
                    reconcile, record_intent, record_submitted)
from resource_support import Refusals, connect, query
from servers import Server, Servers

TTL = 0.2


@pytest.fixture
def redis_server() -> Iterator[Server]:
    servers = Servers("redis70")
    try:
        yield servers.start("module")
    finally:
        servers.stop_all()


@pytest.fixture
def conn(pg: str) -> Iterator[Any]:
    with connect(pg) as conn:
        conn.execute(SCHEMA)
        yield conn


def row(conn: Any, payout_id: str) -> Tuple[str, Any, int]:
    (found,) = query(conn, "SELECT state, provider_ref, last_fence FROM payouts WHERE payout_id = ?", payout_id)
    return found[0], found[1], found[2]


def lease(locker: Locker, payout_id: str) -> Lease:
    granted = locker.acquire(lock_key(payout_id))
    assert granted is not None
    return granted


def test_a_lost_answer_a_lost_lease_and_the_next_holders_retry_pay_once(
    conn: Any, redis_server: Server, refusals: Refusals
) -> None:
    create_payout(conn, "po_1", 1_000)
    locker = Locker(redis_server.client(), ttl=TTL)
    provider = SimulatedProvider()

    # A pays, its answer is lost, its lease runs out.
    a = lease(locker, "po_1")
    provider.lose_replies = 1
    assert attempt(conn, provider, "po_1", a.fence) == Attempt(Outcome.UNKNOWN)
    assert row(conn, "po_1") == ("SUBMITTING", None, a.fence)
    time.sleep(TTL * 2)
    assert not a.is_valid()

    # B retries with the same key: the provider answers with A's payment.
    b = lease(locker, "po_1")
    assert b.fence > a.fence
    assert attempt(conn, provider, "po_1", b.fence) == Attempt(Outcome.SUBMITTED, "tr_1")
    assert row(conn, "po_1") == ("SUBMITTED", "tr_1", b.fence)

    # A's late answer, and A trying again from the top: both refused.
    assert record_submitted(conn, "po_1", a.fence, "tr_1") == Attempt(Outcome.STALE)
    assert attempt(conn, provider, "po_1", a.fence) == Attempt(Outcome.STALE)
    # B (or anyone newer) running again finds it done, without calling out.
    assert attempt(conn, provider, "po_1", b.fence) == Attempt(Outcome.ALREADY_SUBMITTED, "tr_1")

    assert provider.transfers == [("tr_1", 1_000)], "paid once"
    assert refusals.counts("payouts") == (2, 2)
    # The provider is not what kept it to one: a retry with a fresh key would have paid again.
    provider.pay("payout-po_1-attempt-2", 1_000)
    assert len(provider.transfers) == 2


def test_the_reconciliation_settles_rows_stuck_in_submitting_by_key_and_each_payout_is_paid_once(
    conn: Any, redis_server: Server, refusals: Refusals
) -> None:
    for i, payout_id in enumerate(["po_2", "po_3", "po_4"]):
        create_payout(conn, payout_id, 1_000 * (i + 1))
    locker = Locker(redis_server.client(), ttl=TTL)
    provider = SimulatedProvider()

    # po_2: paid, then the worker died before recording the answer (its lease runs out).
    crashed_after = lease(locker, "po_2")
    provider.lose_replies = 1
    assert attempt(conn, provider, "po_2", crashed_after.fence) == Attempt(Outcome.UNKNOWN)
    # po_3: the intent committed, then the worker died before calling.
    crashed_before = lease(locker, "po_3")
    assert record_intent(conn, "po_3", crashed_before.fence).ready
    # po_4: a worker is on it right now (holds its lease): the job leaves it alone.
    stalled = lease(locker, "po_4")
    assert record_intent(conn, "po_4", stalled.fence).ready
    time.sleep(TTL * 2)
    busy = lease(locker, "po_4")  # a fresh holder, current

    assert reconcile(locker, conn, provider) == [
        ("po_2", Reconciled.SUBMITTED, "tr_1"),
        ("po_3", Reconciled.RESET, None),
        ("po_4", Reconciled.SKIPPED, None),
    ]
    assert row(conn, "po_2")[0] == "SUBMITTED"
    assert row(conn, "po_3")[0] == "PENDING"
    # The crashed worker's late answer cannot undo the reconciliation's record.
    assert record_submitted(conn, "po_2", crashed_after.fence, "tr_1") == Attempt(Outcome.STALE)

    # po_3's retry pays, with the same key; po_4's holder finishes.
    retry = lease(locker, "po_3")
    assert attempt(conn, provider, "po_3", retry.fence) == Attempt(Outcome.SUBMITTED, "tr_2")
    assert attempt(conn, provider, "po_4", busy.fence) == Attempt(Outcome.SUBMITTED, "tr_3")
    assert reconcile(locker, conn, provider) == [], "nothing stuck"

    assert provider.transfers == [("tr_1", 1_000), ("tr_2", 2_000), ("tr_3", 3_000)]
    assert refusals.counts("payouts") == (1, 1)


def test_the_example_runs_as_its_docs_say(pg: str, redis_server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    main(pg, f"redis://127.0.0.1:{redis_server.port}")
    out = capsys.readouterr().out
    assert "Attempt(outcome=<Outcome.UNKNOWN" in out and "Attempt(outcome=<Outcome.SUBMITTED: 'submitted'>, reference='tr_1')" in out
    assert "answer arriving late: Attempt(outcome=<Outcome.STALE" in out
    assert "transfers made by the provider: [('tr_1', 12900)]" in out
