"""fencedlock.asyncio.resource over psycopg.AsyncConnection on a real PostgreSQL: a stale
holder refused after a newer claim, one holder's writes, a write waiting on a newer claim's row
lock (two tasks), a REPEATABLE READ retry, and what it refuses to run on."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any, Awaitable, Callable

import psycopg
import pytest
from psycopg.rows import dict_row

from fencedlock.asyncio.resource import (InvalidFence, RowNotFound, Stale, Update, add_fence_column, claim, is_retryable,
                                         write, write_returning)
from fencedlock.resource import NullFence, Table
from resource_support import JOB, JOBS_DDL, LOOSE_DDL, Refusals, jobs, send

Body = Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]]


def run_with_jobs(pg: str, body: Body) -> None:
    """``body`` on an autocommit async connection to the lesson's table with one PENDING job."""

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(pg, autocommit=True) as conn:
            await conn.execute(JOBS_DDL.encode())
            await conn.execute(b"INSERT INTO invoice_jobs (job_id) VALUES (%s)", (JOB,))
            await add_fence_column(conn, jobs())
            await add_fence_column(conn, jobs())
            await body(conn)

    asyncio.run(run())


async def job(conn: psycopg.AsyncConnection[Any]) -> Any:
    cursor = await conn.execute(b"SELECT status, sends, sent_by, last_fence FROM invoice_jobs")
    return await cursor.fetchone()


def test_a_stale_holder_is_refused_after_a_newer_holder_claimed_and_one_holder_writes_many_times(
    pg: str, refusals: Refusals
) -> None:
    async def body(conn: psycopg.AsyncConnection[Any]) -> None:
        async with conn.transaction():
            assert await claim(conn, jobs(), JOB, 8, ["status", "sends"]) == ("PENDING", 0)
        with pytest.raises(Stale) as raised:
            await write(conn, jobs(), JOB, 7, send(7))
        assert (raised.value.fence, raised.value.last_fence) == (7, 8)
        with pytest.raises(Stale):
            await claim(conn, jobs(), JOB, 7)
        for _ in range(2):
            assert await write(conn, jobs(), JOB, 8, send(8)) is True
        cursor = conn.cursor(row_factory=dict_row)
        assert await write_returning(cursor, jobs(), JOB, 8, send(8), ["sends"]) == {"sends": 3}
        assert await write(conn, jobs(), JOB, 8, Update(set={"status": "SENT"}, when={"status": "X"})) is False
        assert await job(conn) == ("PENDING", 3, 8, 8)
        with pytest.raises(RowNotFound):
            await write(conn, jobs(), 73, 8, send(8))
        with pytest.raises(InvalidFence):
            await claim(conn, jobs(), JOB, 0)

    run_with_jobs(pg, body)
    assert refusals.counts() == (2, 2)


def test_a_write_waiting_on_a_newer_claims_row_lock_is_refused_when_the_claim_commits(
    pg: str, refusals: Refusals
) -> None:
    async def body(conn: psycopg.AsyncConnection[Any]) -> None:
        await claim(conn, jobs(), JOB, 6)
        async with await psycopg.AsyncConnection.connect(pg, autocommit=True) as a, \
                await psycopg.AsyncConnection.connect(pg, autocommit=True) as b:
            async with b.transaction():
                await claim(b, jobs(), JOB, 8)
                stale_write = asyncio.ensure_future(write(a, jobs(), JOB, 7, send(7)))
                done, _ = await asyncio.wait([stale_write], timeout=0.3)
                assert not done, "A's UPDATE waits for B's row lock"
            with pytest.raises(Stale) as raised:
                await stale_write
            assert (raised.value.fence, raised.value.last_fence) == (7, 8)
        assert await job(conn) == ("PENDING", 0, None, 8)

    run_with_jobs(pg, body)
    assert refusals.counts() == (1, 1)


def test_under_repeatable_read_a_concurrent_claim_is_a_retry_and_the_retry_is_stale(pg: str, refusals: Refusals) -> None:
    async def body(conn: psycopg.AsyncConnection[Any]) -> None:
        async with await psycopg.AsyncConnection.connect(pg, autocommit=True) as b:
            await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
            with pytest.raises(psycopg.errors.SerializationFailure) as failed:
                async with conn.transaction():
                    await conn.execute(b"SELECT sends FROM invoice_jobs")
                    await claim(b, jobs(), JOB, 18)
                    await write(conn, jobs(), JOB, 17, send(17))
            assert is_retryable(failed.value)
            async with conn.transaction():
                with pytest.raises(Stale):
                    await claim(conn, jobs(), JOB, 17)

    run_with_jobs(pg, body)
    assert refusals.counts() == (1, 1)


def test_it_runs_only_on_asyncio_psycopg(pg: str) -> None:
    async def body(conn: psycopg.AsyncConnection[Any]) -> None:
        with psycopg.connect(pg) as sync:
            with pytest.raises(TypeError, match="AsyncConnection"):
                await claim(sync, jobs(), JOB, 5)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="sqlite3"):
            await claim(sqlite3.connect(":memory:"), jobs(), JOB, 5)  # type: ignore[arg-type]
        from fencedlock.resource import claim as sync_claim

        with pytest.raises(TypeError, match="fencedlock.asyncio.resource"):
            sync_claim(conn, jobs(), JOB, 5)  # type: ignore[arg-type]

    run_with_jobs(pg, body)


def test_a_null_fence_is_an_error_of_its_own_and_nothing_is_written(pg: str, refusals: Refusals) -> None:
    async def body(conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute(LOOSE_DDL.encode())
        await conn.execute(b"INSERT INTO loose_jobs (job_id) VALUES (%s)", (JOB,))
        loose = Table("loose_jobs", id_column="job_id")
        await add_fence_column(conn, loose)
        with pytest.raises(NullFence):
            await claim(conn, loose, JOB, 5)
        with pytest.raises(NullFence) as raised:
            await write(conn, loose, JOB, 5, Update(set={"status": "SENT"}, when={"status": "PENDING"}))
        assert (raised.value.table, raised.value.column) == ("loose_jobs", "last_fence")
        cursor = await conn.execute(b"SELECT status, last_fence FROM loose_jobs")
        assert await cursor.fetchall() == [("PENDING", None)]
        assert refusals.counts("loose_jobs") == (0, 0)

    run_with_jobs(pg, body)
