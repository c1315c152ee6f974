"""What fencedlock.resource restates from the Rust crate ``fencedlock-guard`` is checked
against ``guard/contract.json``, which that crate renders with its own functions (and keeps
current by its test ``contract_json_is_current``): the statements it builds for PostgreSQL and
SQLite from the sample inputs written beside each one, built here by the Python guard from the
same inputs; the default column names, the identifier rules, resource labels, the refusal
counter's name, label and steps, and the texts of the errors mirrored here. A change on either
side fails here until the other follows; nothing here reads Rust source."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

from fencedlock import resource
from fencedlock.resource import Dialect, Table, Update, _outcome, _sql
from fencedlock.resource._names import quote_list

CONTRACT: Dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "guard" / "contract.json").read_text(encoding="utf-8"))
DIALECTS = {"postgres": Dialect.POSTGRES, "sqlite": Dialect.SQLITE}
# The sample values the statements bind as fence and row id (the file numbers them only).
FENCE, ROW_ID = 1, 2


def table(fields: Dict[str, str]) -> Table:
    """The file's sample table, with the Python defaults for the fields it leaves out."""
    return Table(**fields)


def update(ops: List[Dict[str, Any]]) -> Update:
    built = Update()
    for op in ops:
        kind = op["op"]
        if kind == "set":
            built = built.set(op["column"], op["value"])
        elif kind == "set_sql":
            built = built.set_sql(op["column"], op["sql"])
        elif kind == "when":
            built = built.when(op["column"], op["value"])
        elif kind == "when_in":
            built = built.when_in(op["column"], op["values"])
        elif kind == "when_sql":
            built = built.when_sql(op["sql"])
        else:
            raise AssertionError(f"unknown update step {kind!r}")
    return built


def python_sql(case: Dict[str, Any]) -> str:
    """The Python guard's statement for one sample of the file."""
    kind, dialect = case["statement"], DIALECTS[case["dialect"]]
    if kind == "claim":
        t = table(case["table"])
        sql = resource.claim_sql(t, case["returning"], dialect)
        assert _sql.claim(t, dialect, FENCE, ROW_ID, case["returning"]).sql == sql
        return sql
    if kind == "write":
        t, u = table(case["table"]), update(case["update"])
        written = _sql.write(t, dialect, FENCE, ROW_ID, u, case["returning"])
        assert written.params == [FENCE, ROW_ID, *case["values"]], case["name"]
        assert resource.write_sql(t, u, case["returning"], dialect) == written.sql
        return written.sql
    if kind == "add_fence_column":
        return resource.add_fence_column_sql(table(case["table"]), dialect)
    if kind == "add_fence_column_if_absent":
        assert dialect is Dialect.POSTGRES
        return _sql.add_fence_column_if_absent(table(case["table"]))
    if kind == "fence_of":
        return _sql.fence_of(table(case["table"]), dialect, ROW_ID).sql
    if kind == "unknown_column":
        t = table(case["table"])
        found = _sql.unknown_column(t, case["names"])
        assert found.params == [t.name, t.schema, *case["names"]]
        return found.sql
    if kind == "fence_column_present":
        # Inline in the schema step (``add_fence_column``): found in the module's text.
        present: str = case["sql"]
        assert present in Path(resource.__file__).read_text(encoding="utf-8")
        return present
    raise AssertionError(f"unknown statement {kind!r}")


def statements(kind: str) -> List[Dict[str, Any]]:
    found = [case for case in CONTRACT["statements"] if case["statement"] == kind]
    assert found, kind
    return found


@pytest.mark.parametrize("kind", ["claim", "write", "add_fence_column", "add_fence_column_if_absent", "fence_of",
                                  "unknown_column", "fence_column_present"])
def test_the_statements_are_the_rust_crates(kind: str) -> None:
    for case in statements(kind):
        assert python_sql(case) == case["sql"], case["name"]


def test_every_statement_of_the_file_is_checked() -> None:
    kinds = {case["statement"] for case in CONTRACT["statements"]}
    assert kinds == {"claim", "write", "add_fence_column", "add_fence_column_if_absent", "fence_of",
                     "unknown_column", "fence_column_present"}
    assert len(CONTRACT["statements"]) >= 9
    assert all(case["dialect"] in DIALECTS for case in CONTRACT["statements"])
    # An IN of no values matches no row, on both sides.
    empty_in = [case for case in statements("write") if any(op.get("values") == [] for op in case["update"])]
    assert empty_in and all(case["sql"].endswith('AND "last_fence" <= ?1 AND FALSE') for case in empty_in)


def test_the_write_sql_and_write_returning_statements_agree() -> None:
    jobs = Table("invoice_jobs", id_column="job_id")
    update = Update(set={"status": "SENT"}, when={"status": "PENDING"})
    plain = resource.write_sql(jobs, update)
    assert resource.write_sql(jobs, update, ["status"]) == plain + ' RETURNING "status"'
    assert plain == ('UPDATE "invoice_jobs" SET "status" = $3, "last_fence" = $1 WHERE "job_id" = $2 '
                     'AND "last_fence" <= $1 AND "status" = $4')


def test_the_names_and_the_identifier_rules_are_the_rust_crates() -> None:
    names, identifiers = CONTRACT["names"], CONTRACT["identifiers"]
    assert resource.DEFAULT_FENCE_COLUMN == names["default_fence_column"] == "last_fence"
    assert resource.DEFAULT_ID_COLUMN == names["default_id_column"]
    assert resource.MAX_IDENTIFIER_BYTES == identifiers["max_identifier_bytes"]
    refused = identifiers["refused"]
    assert len(refused) == 3
    assert [case["name"] for case in refused] == ["", "a\0b", "x" * (resource.MAX_IDENTIFIER_BYTES + 1)]
    for case in refused:
        with pytest.raises(resource.InvalidIdentifier) as caught:
            resource.quote(case["name"])
        assert caught.value.reason == case["reason"]
    # The examples of the crate's quoting, quoted alike.
    assert len(identifiers["quoted"]) >= 4
    for case in identifiers["quoted"]:
        assert resource.quote(case["name"]) == case["quoted"], case["name"]
    for case in identifiers["quoted_lists"]:
        assert quote_list(case["names"]) == case["quoted"], case["names"]
    assert resource.quote('x"; DROP TABLE t; --') == '"x""; DROP TABLE t; --"'
    assert Table("invoices", schema="billing").resource == "billing.invoices"
    assert {"table": {"name": "invoices", "schema": "billing"}, "resource": "billing.invoices"} in CONTRACT["resources"]
    for case in CONTRACT["resources"]:
        assert table(case["table"]).resource == case["resource"], case["table"]


def test_the_schema_steps_and_the_fence_read_run_as_in_the_rust_crate() -> None:
    (if_absent,) = statements("add_fence_column_if_absent")
    assert if_absent["table"] == {"name": "t"}
    assert _sql.add_fence_column_if_absent(Table("t")) == (
        'ALTER TABLE "t" ADD COLUMN IF NOT EXISTS "last_fence" bigint NOT NULL DEFAULT 0') == if_absent["sql"]
    (pragma,) = statements("fence_column_present")
    assert pragma["sql"] == 'SELECT 1 FROM pragma_table_info(?1, ?2) WHERE name = ?3'
    assert pragma["sql"] in Path(resource.__file__).read_text(encoding="utf-8")


ERRORS: Dict[str, Callable[..., BaseException]] = {
    "Stale": resource.Stale,
    "NotFound": resource.RowNotFound,
    "NullFence": resource.NullFence,
    "UnknownColumn": resource.UnknownColumn,
    "InvalidFence": resource.InvalidFence,
}


def test_the_refusal_counter_and_the_errors_are_named_as_the_rust_crates() -> None:
    metrics = CONTRACT["metrics"]
    assert resource.METRIC == metrics["stale_refusals_total"]
    assert resource.RESOURCE_LABEL == metrics["resource_label"]
    assert metrics["steps"] == ["claim", "write"]
    # The steps the Python guard counts refusals under, from its own refusal paths.
    seen: List[str] = []
    remove = resource.stale_refusals.add_listener(lambda refusal: seen.append(refusal.step))
    try:
        t = Table("t")
        assert isinstance(_outcome.claim_refused(t, 7, 8), resource.Stale)
        with pytest.raises(resource.Stale):
            _outcome.write_refused(t, 7, 8, True)
    finally:
        remove()
    assert seen == metrics["steps"]
    assert str(resource.Stale("t", 7, 8)) == "stale fence 7 on t: the row carries fence 8 (a newer holder claimed or wrote it)"
    kinds = [case["kind"] for case in CONTRACT["errors"]]
    assert set(kinds) == set(ERRORS) and kinds.count("Stale") == 2
    for case in CONTRACT["errors"]:
        fields: Dict[str, Optional[Any]] = case["fields"]
        assert str(ERRORS[case["kind"]](**fields)) == case["text"], case
