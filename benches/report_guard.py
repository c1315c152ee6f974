"""RESULTS.md rows for benches/guard.rs (issue 32): the fence at the resource on PostgreSQL.

Kept apart from report.py so the bench's rendering stays next to its own numbers; report.py
calls `guard_section` with the parsed guard.json (or None). Standard library only.
"""

from __future__ import annotations

# The target: a guarded UPDATE at most this many times the same UPDATE without the
# fence condition.
TARGET = 1.1
COMMAND = "cargo bench --bench guard"


def verdict(ratio: float) -> str:
    return "met" if round(ratio, 2) <= TARGET else f"**missed** ({ratio / TARGET:.2f}× the bound)"


def guard_section(data: dict | None) -> list[str]:
    out = ["", "## The fence at the resource (PostgreSQL)", ""]
    if not data:
        return out + [f"(no results: run `{COMMAND}`)"]
    helper, prepared = data.get("helper", {}), data.get("prepared", {})
    out += [
        f"`{COMMAND}`: one applied single-row `UPDATE` per write (autocommit, 10,000 rows, a real "
        "PostgreSQL on loopback), the guarded statement against the same statement without "
        "`AND \"last_fence\" <= $1`, in alternating blocks; median of the per-round ratios.",
        "",
        "| write | plain | guarded | guarded / plain | target |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    rows = [
        ("`fencedlock_guard::postgres::write` vs `Client::execute` of the plain text", helper, "plain_sql", "guarded_helper"),
        ("the guarded text through `Client::execute` (no helper)", helper, "plain_sql", "guarded_sql"),
        ("both statements prepared once (the condition's cost to the server)", prepared, "plain_prepared", "guarded_prepared"),
    ]
    for label, group, plain, guarded in rows:
        ratio = group.get(f"{guarded}_ratio")
        if ratio is None:
            continue
        out.append(
            f"| {label} | {group[f'{plain}_us']:.1f} µs | {group[f'{guarded}_us']:.1f} µs | "
            f"{ratio:.2f}× | ≤ {TARGET}×: {verdict(ratio)} |"
        )
    return out
