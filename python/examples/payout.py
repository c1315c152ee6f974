"""The lesson's payout pattern: a side effect no fence can stop, made safe anyway.

A payment provider does not check fences. A holder that called it and then lost its lease (a
pause, a timeout before the answer came back) has paid, whatever the database says, and the
next holder's retry would pay again. Three things make that safe, and the fence guards each:

1. **Intent first.** Before calling the provider, the holder claims the row and moves it to
   ``SUBMITTING`` with its fence, and commits. A later holder that finds ``SUBMITTING`` knows
   an attempt may already have reached the provider.
2. **A stable idempotency key.** ``provider_key`` is derived once, when the payout is created,
   and sent on every attempt, so the provider answers a repeat with the original payment.
3. **Reconciliation.** A job takes each row stuck in ``SUBMITTING``, asks the provider by key
   what happened, and records it (``SUBMITTED``), or, if the provider never saw the key, puts
   the row back to ``PENDING`` for the next attempt (with the same key).

The state transitions are guarded writes: a holder whose lease was taken over cannot record
its late answer over the newer holder's, and cannot move a finished payout back.

Run it against a PostgreSQL database and a Redis server with the module (the table
``payouts`` is created, or emptied)::

    python examples/payout.py "host=127.0.0.1 user=postgres dbname=postgres" redis://127.0.0.1:6379

``tests/test_resource_payout.py`` runs these functions across a lease loss and a retry, and a
crash before and after the provider call, and checks that the provider paid once.
"""

from __future__ import annotations

import enum
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Protocol, Tuple

import psycopg
import redis

from fencedlock import Locker
from fencedlock.resource import Stale, Table, Update, claim, write

SCHEMA = b"""CREATE TABLE IF NOT EXISTS payouts (
    payout_id    text   PRIMARY KEY,
    amount_cents bigint NOT NULL,
    state        text   NOT NULL DEFAULT 'PENDING'
                        CHECK (state IN ('PENDING', 'SUBMITTING', 'SUBMITTED', 'FAILED')),
    provider_key text   NOT NULL UNIQUE,
    provider_ref text,
    last_fence   bigint NOT NULL DEFAULT 0
)"""
"""The lesson's table, with the schema step's column."""

PAYOUTS = Table("payouts", id_column="payout_id")

Connection = psycopg.Connection[Any]
"""An autocommit connection: each step below opens the transaction it needs."""


def lock_key(payout_id: str) -> str:
    """The lock key of one payout."""
    return f"payout:{payout_id}"


def create_payout(conn: Connection, payout_id: str, amount_cents: int) -> None:
    """Creates a payout, deriving its idempotency key once, here, from its id."""
    conn.execute(b"INSERT INTO payouts (payout_id, amount_cents, provider_key) VALUES (%s, %s, %s)",
                 (payout_id, amount_cents, f"payout-{payout_id}"))


class ProviderError(Exception):
    """A call to the provider that gave no answer: it may or may not have paid."""


class Provider(Protocol):
    """A payment provider: it knows nothing of fences, and honours idempotency keys."""

    def pay(self, key: str, amount_cents: int) -> str:
        """Pays once per ``key``: a repeat returns the first payment's reference."""

    def lookup(self, key: str) -> Optional[str]:
        """The payment made under ``key``, if any."""


@dataclass
class SimulatedProvider:
    """An in-memory provider that can lose its answers (the payment is made, the reply never
    arrives): what a timeout looks like from the caller's side."""

    payments: Dict[str, str] = field(default_factory=dict)
    """References by idempotency key."""
    transfers: List[Tuple[str, int]] = field(default_factory=list)
    """Money moved, one entry per payment actually made: (reference, amount)."""
    lose_replies: int = 0
    """The next calls pay (or repeat) but their answers are lost."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def pay(self, key: str, amount_cents: int) -> str:
        with self._lock:
            reference = self.payments.get(key)
            if reference is None:
                reference = f"tr_{len(self.transfers) + 1}"
                self.payments[key] = reference
                self.transfers.append((reference, amount_cents))
            if self.lose_replies > 0:
                self.lose_replies -= 1
                raise ProviderError("timed out waiting for the answer")
            return reference

    def lookup(self, key: str) -> Optional[str]:
        with self._lock:
            return self.payments.get(key)


class Outcome(enum.Enum):
    SUBMITTED = "submitted"
    """The payout is recorded as submitted, with the provider's reference."""
    ALREADY_SUBMITTED = "already submitted"
    """An earlier attempt submitted it: nothing done."""
    UNKNOWN = "unknown"
    """The provider's answer was lost: the row stays SUBMITTING for a retry or the
    reconciliation."""
    STALE = "stale"
    """A newer holder has the payout: this attempt stopped (the refusal is counted)."""


@dataclass(frozen=True)
class Attempt:
    """How one attempt ended."""

    outcome: Outcome
    reference: Optional[str] = None


@dataclass(frozen=True)
class Intent:
    """What the intent step found: ``ready`` (the row is SUBMITTING with this holder's fence,
    committed: call the provider with ``key`` for ``amount_cents``), or ``settled``."""

    ready: bool
    key: str = ""
    amount_cents: int = 0
    settled: Optional[Attempt] = None


def record_intent(conn: Connection, payout_id: str, fence: int) -> Intent:
    """Step 1, intent: claim the row (reading what this holder inherits) and move it to
    SUBMITTING with the holder's fence, committed before any call goes out."""
    try:
        with conn.transaction():
            state, key, amount_cents, reference = claim(
                conn, PAYOUTS, payout_id, fence, ["state", "provider_key", "amount_cents", "provider_ref"])
            if state == "SUBMITTED":
                return Intent(False, settled=Attempt(Outcome.ALREADY_SUBMITTED, reference))
            # PENDING, or SUBMITTING left by an earlier holder whose call may have reached the
            # provider: this attempt may repeat that call, which is what the stable key is for.
            intent = Update(set={"state": "SUBMITTING"}).when_in("state", ["PENDING", "SUBMITTING"])
            if not write(conn, PAYOUTS, payout_id, fence, intent):
                return Intent(False, settled=Attempt(Outcome.ALREADY_SUBMITTED))  # FAILED: a human's call
            return Intent(True, key, amount_cents)
    except Stale:
        return Intent(False, settled=Attempt(Outcome.STALE))


def attempt(conn: Connection, provider: Provider, payout_id: str, fence: int) -> Attempt:
    """One attempt at a payout by the holder of ``fence``: intent, the call with the payout's
    own key, and the answer recorded, each step guarded."""
    intent = record_intent(conn, payout_id, fence)
    if not intent.ready:
        assert intent.settled is not None
        return intent.settled
    try:
        reference = provider.pay(intent.key, intent.amount_cents)  # step 2: the same key every time
    except ProviderError:
        return Attempt(Outcome.UNKNOWN)
    return record_submitted(conn, payout_id, fence, reference)  # step 3


def record_submitted(conn: Connection, payout_id: str, fence: int, reference: str) -> Attempt:
    """Records the provider's reference over a SUBMITTING row, guarded by ``fence``."""
    submitted = Update(set={"state": "SUBMITTED", "provider_ref": reference}, when={"state": "SUBMITTING"})
    try:
        if write(conn, PAYOUTS, payout_id, fence, submitted):
            return Attempt(Outcome.SUBMITTED, reference)
        return Attempt(Outcome.ALREADY_SUBMITTED, reference)
    except Stale:
        return Attempt(Outcome.STALE)


class Reconciled(enum.Enum):
    SUBMITTED = "submitted"
    """The provider had paid: recorded as submitted."""
    RESET = "reset"
    """The provider never saw the key: back to PENDING, for a retry with the same key."""
    SKIPPED = "skipped"
    """Another holder had the row (its lease, or a newer fence): left alone."""


def reconcile(locker: Locker, conn: Connection, provider: Provider) -> List[Tuple[str, Reconciled, Optional[str]]]:
    """The reconciliation job: every row stuck in SUBMITTING, under its own lease, asked about
    by key."""
    stuck = [row[0] for row in conn.execute(b"SELECT payout_id FROM payouts WHERE state = 'SUBMITTING' ORDER BY 1")]
    done: List[Tuple[str, Reconciled, Optional[str]]] = []
    for payout_id in stuck:
        lease = locker.acquire(lock_key(payout_id))
        if lease is None:
            done.append((payout_id, Reconciled.SKIPPED, None))  # a worker is on it right now
            continue
        with lease:
            done.append((payout_id, *reconcile_one(conn, provider, payout_id, lease.fence)))
    return done


def reconcile_one(conn: Connection, provider: Provider, payout_id: str, fence: int) -> Tuple[Reconciled, Optional[str]]:
    try:
        with conn.transaction():
            state, key = claim(conn, PAYOUTS, payout_id, fence, ["state", "provider_key"])
            if state != "SUBMITTING":
                return Reconciled.SKIPPED, None
            reference = provider.lookup(key)
            if reference is None:
                write(conn, PAYOUTS, payout_id, fence, Update(set={"state": "PENDING"}, when={"state": "SUBMITTING"}))
                return Reconciled.RESET, None
            submitted = Update(set={"state": "SUBMITTED", "provider_ref": reference}, when={"state": "SUBMITTING"})
            write(conn, PAYOUTS, payout_id, fence, submitted)
            return Reconciled.SUBMITTED, reference
    except Stale:
        return Reconciled.SKIPPED, None


def main(conninfo: str, redis_url: str) -> None:
    """The story: a holder's answer is lost and its lease runs out; the next holder retries
    with the same key; the first holder's late answer is refused; the provider paid once."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(b"DELETE FROM payouts")
        create_payout(conn, "po_1", 12_900)
        locker = Locker(redis.Redis.from_url(redis_url), ttl=0.3)
        provider = SimulatedProvider()

        first = locker.acquire(lock_key("po_1"))
        assert first is not None
        provider.lose_replies = 1
        print(f"holder with fence {first.fence}: {attempt(conn, provider, 'po_1', first.fence)}"
              " (the provider paid, the answer was lost)")
        time.sleep(0.4)  # its lease runs out

        second = locker.acquire(lock_key("po_1"))
        assert second is not None
        print(f"holder with fence {second.fence}: {attempt(conn, provider, 'po_1', second.fence)}"
              " (same key: the provider returned the first payment)")
        late = record_submitted(conn, "po_1", first.fence, "tr_1")
        print(f"holder with fence {first.fence}, answer arriving late: {late}")
        print(f"transfers made by the provider: {provider.transfers}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: payout.py POSTGRES_CONNINFO REDIS_URL")
    main(sys.argv[1], sys.argv[2])
