"""What fencedlock.resource restates from the Rust crate ``fencedlock-guard`` (``guard/src``)
is read back from its source: the statements it builds (the examples of ``sql.rs``'s tests,
rendered here from the same inputs), the default column names, the identifier rules, the
schema step's variants, and the refusal counter's name and label. A change on either side
fails here until the other follows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Set

import pytest

from fencedlock import resource
from fencedlock.resource import Dialect, Table, Update, _sql

GUARD = Path(__file__).resolve().parents[2] / "guard" / "src"


def source(name: str) -> str:
    return (GUARD / name).read_text()


def rust_str(text: str, name: str) -> str:
    found = re.search(rf'pub const {name}: &str = "([^"]*)";', text)
    assert found, f"{name} not found"
    return found.group(1)


def rust_literal(text: str) -> str:
    """The value of a Rust string literal: raw (``r#"…"#``) or with ``\\"`` escapes."""
    if text.startswith('r#"'):
        return text[3:-2]
    return text[1:-1].replace('\\"', '"').replace("\\\\", "\\")


def rust_test_statements() -> Set[str]:
    """Every statement spelled out in ``sql.rs``'s tests (raw strings)."""
    tests = source("sql.rs").split("mod tests", 1)[1]
    return {s for s in re.findall(r'r#"(.*?)"#', tests, re.S) if s.startswith(("UPDATE", "ALTER", "SELECT", "AND"))}


def python_statements() -> List[str]:
    """The same statements from the same inputs as ``sql.rs``'s tests."""
    jobs = Table("invoice_jobs", id_column="job_id")
    payouts = Table("payouts", id_column="payout_id")
    update = (
        Update()
        .set("state", "SUBMITTED")
        .set_sql("attempts", '"attempts" + 1')
        .set("provider_ref", "ref")
        .when("state", "SUBMITTING")
        .when_in("kind", ["a", "b"])
        .when_sql('"amount_cents" > 0')
    )
    written = _sql.write(payouts, Dialect.POSTGRES, 1, 2, update, ["state"])
    assert written.params == [1, 2, "SUBMITTED", "ref", "SUBMITTING", "a", "b"]
    empty_in = _sql.write(payouts, Dialect.SQLITE, 1, 2, Update().when_in("state", []), ())
    suffix = 'AND "last_fence" <= ?1 AND FALSE'
    assert empty_in.sql.endswith(suffix)
    return [
        resource.claim_sql(jobs, ["status"]),
        resource.claim_sql(Table("invoice_jobs", schema='b"x', id_column="job_id", fence_column="f"), (), Dialect.SQLITE),
        written.sql,
        resource.write_sql(payouts, Update(), dialect=Dialect.SQLITE),
        suffix,
        resource.add_fence_column_sql(Table("invoice_jobs")),
        resource.add_fence_column_sql(Table("invoice_jobs"), Dialect.SQLITE),
        _sql.fence_of(Table("invoice_jobs"), Dialect.POSTGRES, 72).sql,
        _sql.unknown_column(Table("invoice_jobs"), ["a", "b"]).sql,
    ]


def test_the_statements_are_the_rust_crates() -> None:
    rust = rust_test_statements()
    assert len(rust) >= 7, rust
    python = python_statements()
    assert set(python) == rust, f"only in Python: {set(python) - rust}; only in Rust: {rust - set(python)}"


def test_the_write_sql_and_write_returning_statements_agree() -> None:
    jobs = Table("invoice_jobs", id_column="job_id")
    update = Update(set={"status": "SENT"}, when={"status": "PENDING"})
    plain = resource.write_sql(jobs, update)
    assert resource.write_sql(jobs, update, ["status"]) == plain + ' RETURNING "status"'
    assert plain == ('UPDATE "invoice_jobs" SET "status" = $3, "last_fence" = $1 WHERE "job_id" = $2 '
                     'AND "last_fence" <= $1 AND "status" = $4')


def test_the_names_and_the_identifier_rules_are_the_rust_crates() -> None:
    table = source("table.rs")
    assert resource.DEFAULT_FENCE_COLUMN == rust_str(table, "DEFAULT_FENCE_COLUMN") == "last_fence"
    assert resource.DEFAULT_ID_COLUMN == rust_str(table, "DEFAULT_ID_COLUMN")
    ident = source("ident.rs")
    found = re.search(r"pub const MAX_IDENTIFIER_BYTES: usize = (\d+);", ident)
    assert found and resource.MAX_IDENTIFIER_BYTES == int(found.group(1))
    reasons = re.findall(r'return refuse\("([^"]+)"\);', ident)
    assert len(reasons) == 3
    for bad, reason in zip(["", "a\0b", "x" * (resource.MAX_IDENTIFIER_BYTES + 1)], reasons):
        with pytest.raises(resource.InvalidIdentifier) as refused:
            resource.quote(bad)
        assert refused.value.reason == reason
    # The examples of ident.rs's tests, quoted alike.
    literal = r'(r#".*?"#|"(?:[^"\\]|\\.)*")'
    examples = re.findall(rf"assert_eq!\(quote\({literal}\)\.unwrap\(\), {literal}\);", ident)
    assert len(examples) >= 4
    for name, quoted in examples:
        assert resource.quote(rust_literal(name)) == rust_literal(quoted), name
    assert resource.quote('x"; DROP TABLE t; --') == '"x""; DROP TABLE t; --"'
    assert Table("invoices", schema="billing").resource == "billing.invoices"
    assert 'let invoices = Table::new("invoices").schema("billing")' in table
    assert 'assert_eq!(invoices.resource(), "billing.invoices");' in table


def test_the_schema_steps_and_the_fence_read_run_as_in_the_rust_crate() -> None:
    assert '.replacen(" ADD COLUMN ", " ADD COLUMN IF NOT EXISTS ", 1)' in source("postgres.rs")
    assert _sql.add_fence_column_if_absent(Table("t")) == (
        'ALTER TABLE "t" ADD COLUMN IF NOT EXISTS "last_fence" bigint NOT NULL DEFAULT 0')
    pragma = 'SELECT 1 FROM pragma_table_info(?1, ?2) WHERE name = ?3'
    assert pragma in source("sqlite.rs")
    assert pragma in Path(resource.__file__).read_text()


def test_the_refusal_counter_is_named_as_the_rust_crates() -> None:
    metrics = source("metrics.rs")
    assert resource.METRIC == rust_str(metrics, "STALE_REFUSALS_TOTAL")
    assert resource.RESOURCE_LABEL == rust_str(metrics, "RESOURCE")
    assert 'Step::Claim => "claim"' in metrics and 'Step::Write => "write"' in metrics
    error = source("error.rs")
    assert '#[error("stale fence {fence} on {resource}: {}", describe_newer(*.last_fence))]' in error
    assert str(resource.Stale("t", 7, 8)) == "stale fence 7 on t: the row carries fence 8 (a newer holder claimed or wrote it)"
    assert 'format!("the row carries fence {last} (a newer holder claimed or wrote it)")' in error
