"""The package's data files, both owned by the protocol crate: ``functions.lua`` (the Functions
library, ``protocol/src/functions.lua``) and ``contract.json`` (the wire contract as data,
``protocol/contract.json``, see ``protocol/CONTRACT.md``). Neither is committed in
``python/``.

An installed package uses its own copies, next to this module: the sdist force-includes both
files from ``../protocol`` (``pyproject.toml``), and the wheel's build hook
(``hatch_build.py``) takes them from ``../protocol`` or from the sdist's copies. In a source checkout (the tests and the
benches run with ``python/src`` on the path) the package directory has neither, and they are
read from the repository's ``protocol/`` next to ``python/``.

The contract is read once, at import, into :data:`CONTRACT`; the modules that use it keep
what they need as module constants."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

PACKAGE = Path(__file__).resolve().parent
"""This package's directory."""

_CHECKOUT_PROTOCOL = PACKAGE.parents[2] / "protocol"
"""``protocol/`` of the repository, when the package is run from ``python/src``."""


def data_file(name: str, in_checkout: str) -> Path:
    """The package's own ``name``, or in a source checkout ``protocol/<in_checkout>``."""
    own = PACKAGE / name
    if own.is_file():
        return own
    checkout = _CHECKOUT_PROTOCOL / in_checkout
    if PACKAGE.parent.name == "src" and checkout.is_file():
        return checkout
    raise FileNotFoundError(
        f"fencedlock: {own} is missing (an installed package carries it; a source checkout reads "
        f"{checkout}): reinstall the package"
    )


LIBRARY_FILE = data_file("functions.lua", "src/functions.lua")
"""The Functions library this package carries."""

CONTRACT_FILE = data_file("contract.json", "contract.json")
"""The wire contract as data."""

CONTRACT: Dict[str, Any] = json.loads(CONTRACT_FILE.read_text("utf-8"))
"""``contract.json``, parsed."""


def integer(value: Any) -> int:
    """An integer of the contract: a JSON number, or ``{"int": "<decimal>"}`` beyond 2^53 - 1."""
    if isinstance(value, dict):
        value = int(value["int"])
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"contract.json: an integer was expected, not {value!r}")
    return value


def text(value: Any) -> str:
    """A text fact of the contract (a name, a prefix, a script)."""
    if not isinstance(value, str):
        raise ValueError(f"contract.json: a string was expected, not {value!r}")
    return value
