"""The Rust client's ``Cause`` kinds against the package's, from ``protocol/contract.json``'s
``causes`` (the table the Rust client defines ``Cause::is_retryable`` and ``Cause::is_outage``
from): names, which are retried, which are outages, and the reply codes that name each; and the
package's one error hierarchy. Every other wire fact is checked against the data file in
``tests/test_contract_data.py``. Nothing here reads Rust source."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List

import redis.exceptions as rexc

import fencedlock
from fencedlock.errors import Cause, cause_of

CONTRACT: Dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "protocol" / "contract.json").read_text(encoding="utf-8"))
KINDS: List[Dict[str, Any]] = CONTRACT["causes"]["kinds"]

# Where the package means to differ from the Rust client, and why. ``MISROUTED`` is not
# retried here: a client of one server asks the same node again, which answers ``MOVED`` again
# (see ``Cause.is_retryable``). It is not an outage on either side.
DIFFERS = {("MISROUTED", "retryable")}


def python_name(rust: str) -> str:
    """``NotReady`` → ``NOT_READY``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", rust).upper()


def test_causes_are_the_rust_clients() -> None:
    assert [python_name(kind["name"]) for kind in KINDS] == [c.name for c in Cause]


def test_retries_and_outages_are_the_rust_clients() -> None:
    differs = set()
    for kind in KINDS:
        cause = Cause[python_name(kind["name"])]
        for fact, python in (("retryable", cause.is_retryable), ("outage", cause.is_outage)):
            if python != kind[fact]:
                differs.add((cause.name, fact))
    assert differs == DIFFERS
    # Never an outage to fail open on where the Rust client does not.
    assert {python_name(k["name"]) for k in KINDS if k["outage"]} == {c.name for c in Cause if c.is_outage}


def test_the_codes_name_the_rust_clients_causes() -> None:
    codes = [code for kind in KINDS for code in kind["codes"]]
    assert len(codes) >= 13 and len(codes) == len(set(codes))
    for kind in KINDS:
        cause = Cause[python_name(kind["name"])]
        for code in kind["codes"]:
            assert cause_of(rexc.ResponseError(f"{code} anything")) is cause, code
        for detail in kind["err_details"]:
            assert cause_of(rexc.ResponseError(f"{detail} 'FENCEDLOCK.ACQUIRE'")) is cause, detail
    # The Rust client's own errors: the package makes NO_ENGINE itself, without a code.
    client_codes = {code: kind["name"] for kind in KINDS for code in kind["client_codes"]}
    assert client_codes == {"NOENGINE": "NoEngine", "NOMODULE": "NoModule"}
    assert cause_of(rexc.ResponseError("WRONGTYPE anything")) is Cause.OTHER


def test_the_package_exports_one_error_hierarchy() -> None:
    for name in ("InvalidArgument", "NotAcquired", "LeaseLost", "Unavailable", "NoEngine", "ServerError", "BadReply",
                 "BadRecord"):
        assert issubclass(getattr(fencedlock, name), fencedlock.FencedLockError)
    assert issubclass(fencedlock.InvalidArgument, ValueError)
