"""The pure parts of serving one lock server, the same for the sync and the asyncio
``Server``: its name in errors, a request's time left, the error of a server without an
engine, and the timing of a waiter's naps on the Functions engine."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from . import _contract, _data
from .errors import Cause, NoEngine

MIN_NAP = 0.005
"""The shortest wait between two attempts of a waiter on the Functions engine."""

LIST_LIBRARY = ("FUNCTION", "LIST", "LIBRARYNAME", _contract.LIBRARY_NAME, "WITHCODE")
"""The server's copy of the library, compared with this package's at detection."""


def describe(pool: Any) -> str:
    """A server's name for errors: ``host:port``, a socket path, or a Sentinel service."""
    service = getattr(pool, "service_name", None)
    if service:
        return f"sentinel:{service}"
    kwargs = getattr(pool, "connection_kwargs", {})
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def remaining(deadline: float) -> float:
    """Seconds left until ``deadline``; never 0, which some waits read as "forever"."""
    return max(deadline - time.monotonic(), 0.001)


LIBRARY_FILE: Path = _data.LIBRARY_FILE
"""The Functions library this package carries (``NoEngine.library``)."""


def no_engine(name: str, refusal: Exception) -> NoEngine:
    """The error of a server that neither runs the module nor lets the library be loaded."""
    return NoEngine(
        f"{name}: the fencedlock module is not loaded and the Functions library could not be loaded "
        f"({refusal}); load the module (--loadmodule …/libfencedlock_module.so), or have an administrator load "
        f"the library this package carries (redis-cli -x FUNCTION LOAD REPLACE < {LIBRARY_FILE}), or allow this "
        "user FUNCTION LOAD, or SCRIPT LOAD and EVALSHA",
        library=LIBRARY_FILE,
        cause=Cause.NO_ENGINE,
    )


def blpop_timeout(nap: float) -> str:
    """``BLPOP``'s timeout for a nap: whole ms rounded up, never 0 (which means forever),
    as decimal seconds."""
    ms = max(math.ceil(nap * 1000), 1)
    return f"{ms // 1000}.{ms % 1000:03d}"


def nap(held_for: float, left: float) -> float:
    """How long a refused waiter stays in ``BLPOP``: until the holders' leases end (one ms
    past STATUS's whole ms), at least MIN_NAP, never past the wait."""
    return min(max(held_for + 0.001, MIN_NAP), left)
