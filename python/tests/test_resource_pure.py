"""fencedlock.resource's parts without a database: names, fences, updates, the refusal
counter and its listeners, and the retry classification."""

from __future__ import annotations

import logging
import sqlite3
from typing import List

import pytest

import fencedlock
from fencedlock.resource import (Dialect, InvalidFence, InvalidIdentifier, Refusal, StaleRefusals, Table, Update,
                                 claim_sql, is_retryable, write_sql)
from fencedlock.resource._outcome import checked_fence


def test_tables_refuse_bad_names_at_once_and_label_their_refusals() -> None:
    for bad in ("", "a\0", "é" * 32, 7):
        with pytest.raises(InvalidIdentifier):
            Table(bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidIdentifier):
            Table("t", schema=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidIdentifier):
            Table("t", id_column=bad, fence_column="f")  # type: ignore[arg-type]
    assert Table("é" * 31).quoted_name == '"' + "é" * 31 + '"'
    assert Table("t").resource == "t"
    assert Table("t", schema="s").resource == "s.t"
    assert Table("t", schema="s", resource_label="jobs").resource == "jobs"
    assert issubclass(InvalidIdentifier, fencedlock.InvalidArgument)


def test_fences_are_ints_from_1_to_max_fence() -> None:
    assert checked_fence(1) == 1 and checked_fence(2**63 - 1) == 2**63 - 1
    for bad in (0, -5, 2**63, True, 1.0, "1", None):
        with pytest.raises(InvalidFence):
            checked_fence(bad)


def test_an_update_binds_every_value_and_numbers_it_after_the_fence_and_the_id() -> None:
    table = Table("t")
    update = Update(set={"a": 1}, when={"b": 2}).set_sql("c", '"c" + 1').when_in("d", [3, 4]).when_sql('"e" > 0')
    assert write_sql(table, update, dialect=Dialect.SQLITE) == (
        'UPDATE "t" SET "a" = ?3, "c" = ("c" + 1), "last_fence" = ?1 WHERE "id" = ?2 AND "last_fence" <= ?1 '
        'AND "b" = ?4 AND "d" IN (?5, ?6) AND ("e" > 0)')
    assert update.has_precondition and not Update(set={"a": 1}).has_precondition
    assert "secret" not in repr(Update(set={"a": "secret"}))
    assert claim_sql(table, "state") == claim_sql(table, ["state"])
    with pytest.raises(InvalidIdentifier):
        write_sql(table, Update().when_in("", []))


def test_refusals_are_counted_by_resource_logged_and_told_to_listeners(caplog: pytest.LogCaptureFixture) -> None:
    counter = StaleRefusals()
    heard: List[Refusal] = []
    remove = counter.add_listener(heard.append)

    def broken(_: Refusal) -> None:
        raise RuntimeError("exporter down")

    counter.add_listener(broken)
    with caplog.at_level(logging.WARNING, logger="fencedlock.resource"):
        counter.record(Refusal("jobs", "claim", 7, 8))
        counter.record(Refusal("jobs", "write", 7, 9))
        counter.record(Refusal("payouts", "write", 1, 2))
    assert counter.count("jobs") == 2 and counter.total() == 3 and counter.count("other") == 0
    assert counter.snapshot() == {"jobs": 2, "payouts": 1}
    assert heard == [Refusal("jobs", "claim", 7, 8), Refusal("jobs", "write", 7, 9), Refusal("payouts", "write", 1, 2)]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [(getattr(r, "resource"), getattr(r, "step"), getattr(r, "fence"), getattr(r, "last_fence"))
            for r in warnings] == [("jobs", "claim", 7, 8), ("jobs", "write", 7, 9), ("payouts", "write", 1, 2)]
    assert sum("listener failed" in r.getMessage() for r in caplog.records) == 3, "a failing listener is logged"
    remove()
    counter.record(Refusal("jobs", "claim", 1, 2))
    assert len(heard) == 3


def test_retryable_errors() -> None:
    class Serialization(Exception):
        sqlstate = "40001"

    class Unique(Exception):
        sqlstate = "23505"

    assert is_retryable(Serialization()) and not is_retryable(Unique())
    busy = sqlite3.OperationalError("database is locked")
    assert is_retryable(busy)
    assert not is_retryable(sqlite3.OperationalError("no such table: t"))
    assert not is_retryable(ValueError("x"))
