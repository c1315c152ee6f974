"""A lease's terms checked against the protocol's limits before anything is sent, and the
validity arithmetic: validity is measured on the local monotonic clock from *before* the
request was sent, minus drift (``ttl * 0.01 + 2 ms`` by default)."""

from __future__ import annotations

import datetime
import math
import secrets
from dataclasses import dataclass
from typing import Optional, Union

from . import _contract
from ._wire import Engine
from .errors import InvalidArgument

Seconds = Union[int, float, datetime.timedelta]

EngineName = Union[Engine, str, None]
"""A locker's ``engine=``: an :class:`Engine`, its name, ``"auto"`` or ``None``."""

BACKOFF = (0.02, 0.4)
"""Jittered pause between attempts after an answer-less failure, in seconds (min, max)."""


def engine_choice(engine: EngineName) -> Optional[Engine]:
    """The engine a locker is told to use; ``None`` to detect it."""
    if engine is None or engine == "auto":
        return None
    try:
        return Engine(engine)
    except ValueError:
        raise InvalidArgument(f"engine is 'auto', 'module', 'functions' or 'script', got {engine!r}") from None

TOKEN_BYTES = 16
"""Random bytes in a generated token: 128 bits."""


def new_token() -> bytes:
    return secrets.token_bytes(TOKEN_BYTES)


def seconds(value: object, what: str) -> float:
    """``value`` (seconds, or a ``timedelta``) as a float of seconds, or InvalidArgument."""
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{what} is a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value):
        raise InvalidArgument(f"{what} must be finite, got {value}")
    return float(value)


def ttl_ms(value: object) -> int:
    """A ttl in seconds as the whole milliseconds sent: 1 ms to the protocol's largest."""
    ttl = seconds(value, "ttl")
    ms = ttl * 1000
    if ms < 1 or ms > _contract.MAX_MAX_TTL_MS:
        raise InvalidArgument(f"ttl must be 0.001 to {_contract.MAX_MAX_TTL_MS // 1000} seconds, got {ttl}")
    if abs(ms - round(ms)) > 1e-6:
        raise InvalidArgument(f"ttl must be whole milliseconds, got {ttl}")
    return int(round(ms))


def wait_seconds(value: object) -> float:
    """A wait: ``None`` is no wait; else a number of seconds from 0."""
    if value is None:
        return 0.0
    wait = seconds(value, "wait")
    if wait < 0:
        raise InvalidArgument(f"wait must not be negative, got {wait}")
    return wait


def check_token(token: object) -> bytes:
    if not isinstance(token, bytes) or not 1 <= len(token) <= _contract.MAX_TOKEN_LEN:
        raise InvalidArgument(f"a token is 1 to {_contract.MAX_TOKEN_LEN} bytes")
    return token


def check_label(label: object) -> Optional[bytes]:
    if label is None:
        return None
    raw = label.encode("utf-8") if isinstance(label, str) else label
    if not isinstance(raw, bytes) or not 1 <= len(raw) <= _contract.MAX_LABEL_LEN:
        raise InvalidArgument(f"a label is 1 to {_contract.MAX_LABEL_LEN} bytes (str or bytes); it is public")
    return raw


def check_permits(permits: object) -> int:
    if isinstance(permits, bool) or not isinstance(permits, int) or not 1 <= permits <= _contract.MAX_PERMITS:
        raise InvalidArgument(f"permits must be an integer from 1 to {_contract.MAX_PERMITS}, got {permits!r}")
    return permits


@dataclass(frozen=True)
class Clock:
    """The drift allowance: ``ttl * factor + constant`` seconds."""

    factor: float = 0.01
    constant: float = 0.002

    def __post_init__(self) -> None:
        if not (math.isfinite(self.factor) and 0 <= self.factor < 1):
            raise InvalidArgument(f"drift factor must be in [0, 1), got {self.factor}")
        if not (math.isfinite(self.constant) and self.constant >= 0):
            raise InvalidArgument(f"drift constant must be >= 0 seconds, got {self.constant}")

    def drift(self, ttl_ms: int) -> float:
        return ttl_ms / 1000 * self.factor + self.constant

    def window(self, ttl_ms: int) -> float:
        """How long a lease can be relied on from the moment its request was sent."""
        return max(ttl_ms / 1000 - self.drift(ttl_ms), 0.0)

    def deadline(self, sent: float, ttl_ms: int) -> float:
        """The monotonic instant after which a lease asked for at ``sent`` must not be used."""
        return sent + self.window(ttl_ms)

    def needs_anchor(self, waited: float, ttl_ms: int) -> bool:
        """Whether a wait that took ``waited`` ate more than a quarter of the usable lease, so
        a RENEW should re-anchor its validity."""
        return waited > self.window(ttl_ms) / 4


def renewal_due(deadline: float, ttl_ms: int, clock: Clock, every: float) -> float:
    """One renew interval after the request that gave ``deadline`` was sent."""
    return deadline - clock.window(ttl_ms) + every
