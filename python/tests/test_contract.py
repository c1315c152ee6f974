"""What is left of the package's contract that ``protocol/contract.json`` does not hold yet:
the Rust client's ``Cause`` kinds, read from ``client/src/cause.rs`` (they live in the client
crate, not the protocol crate, which cannot render them without depending on it), and the
package's one error hierarchy. Every wire fact is checked against the data file in
``tests/test_contract_data.py``."""

from __future__ import annotations

import re
from pathlib import Path

import fencedlock
from fencedlock.errors import Cause

CLIENT = Path(__file__).resolve().parents[2] / "client" / "src"


def test_causes_are_the_rust_clients() -> None:
    cause = (CLIENT / "cause.rs").read_text()
    block = cause[cause.index("pub enum Cause"):cause.index("impl Cause")]
    rust = re.findall(r"^    (\w+),$", block, re.M)
    python = {re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper() for name in rust}
    assert python == {c.name for c in Cause}


def test_the_package_exports_one_error_hierarchy() -> None:
    for name in ("InvalidArgument", "NotAcquired", "LeaseLost", "Unavailable", "NoEngine", "ServerError", "BadReply",
                 "BadRecord"):
        assert issubclass(getattr(fencedlock, name), fencedlock.FencedLockError)
    assert issubclass(fencedlock.InvalidArgument, ValueError)
