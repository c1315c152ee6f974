"""Two worker processes (``resource_worker.py``) race claims and writes on a few hundred rows of
a real PostgreSQL, with real leases from the package's Locker on a real Redis with the module,
under READ COMMITTED and under REPEATABLE READ, while this process freezes one of them now and
then with SIGSTOP (and each sometimes sleeps past its lease between its lease and its claim,
or between its claim and its write).

Both go through the rows in the same order, so they contend on every row: the one behind waits
for the lease, and takes it over whenever the other is frozen or asleep past its ttl; the
frozen one wakes up with a stale fence and goes on as if it held the lease. Afterwards, from
the rows and from an event log written in the same transactions (under the row lock, so its
order per row is the commit order): no row's fences ever went down, every row ends with the
write of its newest fence, each row's total counts exactly its applied writes (no stale or
lost update), and every refusal a worker met was counted and logged in its process."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from fencedlock.resource import add_fence_column
from postgres import Postgres
from resource_support import connect, query
from resource_worker import RESULT_TAG, TABLE
from servers import Servers

ROWS = 200
DEADLINE = 90.0
"""Bound on one race: the workers must be done by then."""
TESTS = Path(__file__).resolve().parent


def freeze_now_and_then(workers: List[subprocess.Popen[str]], rng: random.Random) -> int:
    """SIGSTOPs a random running worker for 30-150 ms every 30-200 ms until both exit."""
    deadline = time.monotonic() + DEADLINE
    freezes = 0
    while True:
        running = [w for w in workers if w.poll() is None]
        if not running:
            return freezes
        assert time.monotonic() < deadline, f"the workers did not finish within {DEADLINE} s"
        time.sleep(rng.uniform(0.03, 0.2))
        victim = rng.choice(running)
        try:
            victim.send_signal(signal.SIGSTOP)
            time.sleep(rng.uniform(0.03, 0.15))
        finally:
            victim.send_signal(signal.SIGCONT)
        freezes += 1


@pytest.mark.parametrize("isolation", ["READ_COMMITTED", "REPEATABLE_READ"])
def test_two_worker_processes_frozen_and_sleeping_past_their_leases_never_land_a_stale_write(
    postgres_server: Postgres, pg: str, isolation: str
) -> None:
    with connect(pg) as conn:
        conn.execute(f"""CREATE TABLE race_rows (id integer PRIMARY KEY, total integer NOT NULL DEFAULT 0,
                                                 written_by bigint);
                         INSERT INTO race_rows (id) SELECT generate_series(1, {ROWS});
                         CREATE TABLE events (seq bigserial PRIMARY KEY, row_id integer NOT NULL,
                                              fence bigint NOT NULL, kind text NOT NULL, worker text NOT NULL,
                                              total integer NOT NULL)""".encode())
        add_fence_column(conn, TABLE)

    servers = Servers("redis70")
    workers: List[subprocess.Popen[str]] = []
    try:
        redis_server = servers.start("module")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent / "src"), str(TESTS)])}
        for i, name in enumerate(["w1", "w2"]):
            args = [name, pg, str(redis_server.port), isolation, str(ROWS), str(1000 + i)]
            workers.append(subprocess.Popen([sys.executable, str(TESTS / "resource_worker.py"), *args], env=env,
                                            stdout=subprocess.PIPE, text=True))
        freezes = freeze_now_and_then(workers, random.Random(7))
        tallies = [result_of(worker) for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGCONT)
                worker.kill()
                worker.wait()
        servers.stop_all()
    print(f"{isolation}: {freezes} freezes; workers: {tallies}")

    # Every refusal was counted and logged, once, under the table's resource label.
    for tally in tallies:
        assert tally["counted"] == tally["logged"] == tally["stale_claims"] + tally["stale_writes"], tally
    refused = sum(t["stale_claims"] + t["stale_writes"] for t in tallies)
    assert refused > 0, "the pauses produced no stale holder: the race tested nothing"
    assert freezes > 0
    with connect(pg) as conn:
        check_rows(conn, sum(t["writes"] for t in tallies))


def result_of(worker: subprocess.Popen[str]) -> Dict[str, Any]:
    out, _ = worker.communicate(timeout=DEADLINE)
    assert worker.returncode == 0, f"a worker failed ({worker.returncode}): {out}"
    lines = [line for line in out.splitlines() if line.startswith(RESULT_TAG)]
    assert lines, f"no RESULT line from a worker: {out}"
    result: Dict[str, Any] = json.loads(lines[-1][len(RESULT_TAG):])
    return result


def check_rows(conn: Any, writes: int) -> None:
    """The rows and the event log agree, and no stale write landed."""
    assert query(conn, "SELECT count(*) FROM events WHERE kind = 'write'") == [(writes,)], "each write logged once"
    # Per row, in commit order: a fence below one already seen is a stale claim or write.
    went_down = query(conn, """SELECT count(*) FROM (SELECT fence < max(fence) OVER (PARTITION BY row_id ORDER BY seq
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS down FROM events) e WHERE down""")
    assert went_down == [(0,)], "events with a fence below an earlier one on the same row"
    rows = query(conn, """SELECT r.id, r.total, r.written_by, r.last_fence,
                                 (SELECT count(*) FROM events e WHERE e.row_id = r.id AND e.kind = 'write'),
                                 (SELECT max(fence) FROM events e WHERE e.row_id = r.id)
                            FROM race_rows r ORDER BY r.id""")
    assert len(rows) == ROWS
    for row_id, total, written_by, last_fence, row_writes, max_fence in rows:
        assert row_writes > 0, f"row {row_id} was never written"
        assert total == row_writes, f"row {row_id}: its total counts exactly its applied writes"
        assert last_fence == max_fence, f"row {row_id}: last_fence is the newest fence that touched it"
        assert written_by == last_fence, f"row {row_id} ends with a write from a fence below its last_fence"
