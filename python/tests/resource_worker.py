"""One worker of ``test_resource_race.py``, a process of its own (the test freezes it with
SIGSTOP): for every row in order, meet the other worker, take the row's lease from a real
Redis with the module, claim the row, write it, release. It never checks its lease before
claiming or writing: it acts as a paused holder does on waking, and only the resource's fence
check stands between its late writes and the rows. Prints one ``RESULT {json}`` line.

``resource_worker.py NAME CONNINFO REDIS_PORT ISOLATION ROWS SEED``
"""

from __future__ import annotations

import json
import logging
import random
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional, TypeVar

import psycopg
import redis

from fencedlock import FencedLockError, Lease, LeaseLost, Locker
from fencedlock.resource import Stale, Table, Update, claim, is_retryable, stale_refusals, write

TABLE = Table("race_rows")
TTL = 0.08
"""Short leases, so that a freeze or a sleep of a couple of them hands the row over."""
SLEEP_PAST_LEASE = 0.13
SLEEP_CHANCE = 0.03
"""How often (per row) a worker sleeps between its lease and its claim, and between its claim
and its write, past its lease."""
MAX_RETRIES = 20
"""Bound on one transaction's retries after serialization failures (REPEATABLE READ)."""
RESULT_TAG = "RESULT "

T = TypeVar("T")


@dataclass
class Tally:
    claims: int = 0
    writes: int = 0
    stale_claims: int = 0
    stale_writes: int = 0
    counted: int = 0
    """Refusals on the table in this process's counter."""
    logged: int = 0
    """Refusal records logged by ``fencedlock.resource``."""
    retries: int = 0
    sleeps: int = 0


class CountRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "resource", None) == TABLE.resource:
            self.count += 1


def log_event(conn: psycopg.Connection[Any], row: int, fence: int, kind: str, worker: str, total: int) -> None:
    """Appended in the transaction of the claim or write, under its row lock: the log's order
    per row is the order the row's transactions committed in."""
    conn.execute(b"INSERT INTO events (row_id, fence, kind, worker, total) VALUES (%s, %s, %s, %s, %s)",
                 (row, fence, kind, worker, total))


def in_transaction(conn: psycopg.Connection[Any], tally: Tally, body: Callable[[], T]) -> Optional[T]:
    """``body`` in a transaction, run again after a serialization failure; ``None`` when the
    fence was stale."""
    for _ in range(MAX_RETRIES):
        try:
            with conn.transaction():
                return body()
        except Stale:
            return None
        except psycopg.Error as err:
            if not is_retryable(err):
                raise
            tally.retries += 1
    raise RuntimeError(f"no transaction after {MAX_RETRIES} serialization failures")


class Barrier:
    """Both workers start each row together, so they contend for every row's lease."""

    def __init__(self, client: redis.Redis, me: str) -> None:
        self.client, self.me = client, me
        self.other = "w2" if me == "w1" else "w1"

    def meet(self, row: int) -> None:
        self.client.rpush(f"barrier:{row}:{self.other}", 1)
        if self.client.blpop([f"barrier:{row}:{self.me}"], timeout=30) is None:
            raise RuntimeError(f"row {row}: the other worker did not arrive within 30 s")


def acquire(locker: Locker, row: int) -> Lease:
    """The row's lease. A freeze during the request can use up the whole validity before the
    grant arrives: ask again."""
    for _ in range(MAX_RETRIES):
        try:
            lease = locker.acquire(f"race:{row}", wait=20)
        except LeaseLost:
            continue
        if lease is None:
            raise RuntimeError(f"row {row}: no lease within 20 s")
        return lease
    raise RuntimeError(f"row {row}: every lease was lost before it arrived")


def main(name: str, conninfo: str, redis_port: int, isolation: str, rows: int, seed: int) -> Tally:
    counted_records = CountRecords()
    logging.getLogger("fencedlock.resource").addHandler(counted_records)
    rng = random.Random(seed)
    tally = Tally()

    def maybe_sleep() -> None:
        if rng.random() < SLEEP_CHANCE:
            tally.sleeps += 1
            time.sleep(SLEEP_PAST_LEASE)

    client = redis.Redis(port=redis_port, socket_timeout=40)
    locker = Locker(client, ttl=TTL, timeout=2)
    barrier = Barrier(client, name)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.isolation_level = psycopg.IsolationLevel[isolation]
        for row in range(1, rows + 1):
            barrier.meet(row)
            lease = acquire(locker, row)
            fence = lease.fence
            maybe_sleep()

            def claimed() -> int:
                (total,) = claim(conn, TABLE, row, fence, ["total"])
                log_event(conn, row, fence, "claim", name, total)
                return int(total)

            inherited = in_transaction(conn, tally, claimed)
            if inherited is None:
                tally.stale_claims += 1
            else:
                tally.claims += 1
                maybe_sleep()

                def written() -> bool:
                    update = Update(set={"total": inherited + 1, "written_by": fence})
                    assert write(conn, TABLE, row, fence, update), "no precondition: applied or Stale"
                    log_event(conn, row, fence, "write", name, inherited + 1)
                    return True

                if in_transaction(conn, tally, written):
                    tally.writes += 1
                else:
                    tally.stale_writes += 1
            try:
                lease.release()  # gone already if the lease was taken over: that is the point
            except FencedLockError:
                pass
    tally.counted = stale_refusals.count(TABLE.resource)
    tally.logged = counted_records.count
    return tally


if __name__ == "__main__":
    worker, conninfo, port, isolation, rows, seed = sys.argv[1:]
    result = main(worker, conninfo, int(port), isolation, int(rows), int(seed))
    print(RESULT_TAG + json.dumps(asdict(result)), flush=True)
