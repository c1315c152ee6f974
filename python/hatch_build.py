"""The wheel's build hook: puts the two files the protocol crate owns into the package,
``fencedlock/functions.lua`` (the Functions library) and ``fencedlock/contract.json`` (the
wire contract as data), neither committed in ``python/``.

Built from a checkout, they are forced in from ``../protocol``. Built from the sdist (which
the sdist's own ``force-include`` in ``pyproject.toml`` gave them, in ``src/fencedlock``), the
package's files already hold them and there is no ``../protocol``: a static wheel
``force-include`` of ``../protocol`` would fail there (hatchling refuses a forced path that
does not exist), hence this hook."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

FILES = {"functions.lua": "src/functions.lua", "contract.json": "contract.json"}
"""Each file in the package, and where the protocol crate keeps it."""


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    def initialize(self, version: str, build_data: Dict[str, Any]) -> None:
        root = Path(self.root)
        for name, in_protocol in FILES.items():
            if (root / "src" / "fencedlock" / name).is_file():
                continue  # an sdist: the package carries it
            source = root.parent / "protocol" / in_protocol
            if not source.is_file():
                raise FileNotFoundError(f"{source} not found: build from a checkout of the repository, or from the sdist")
            build_data["force_include"][str(source)] = f"fencedlock/{name}"
