"""The redis-py clients the package takes, and the connections it makes from them.

The user's client says where the server is and how to reach it (host and port, a unix
socket, TLS, credentials, a Sentinel service, its connection class); the package's requests
do not go through the client's own pool, whose settings (no socket timeout, redis-py's retries
with backoff: up to a minute against a stopped server) would let one request outlast the
request timeout by far. Each server gets connections of its own, made with the client's
connection class and arguments but with redis-py's retries off and the socket timeouts set
from the request timeout, so that the request timeout bounds the whole request: taking a
connection, connecting, the connection's handshake (``HELLO``, ``AUTH``, ``SELECT``, ``CLIENT
SETINFO``), the request and its reply. This works alike on every redis-py from 4.6 on."""

from __future__ import annotations

from typing import Any, Dict, Tuple

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from .errors import InvalidArgument

SUPPORTED = (4, 6)
"""The oldest redis-py the package runs on (``pyproject.toml``: ``redis>=4.6``)."""

TESTED = "4.6.0 and 8.2.0"
"""The redis-py releases CI runs the tests on: the oldest admitted and the newest."""

_OVERRIDES = ("socket_timeout", "socket_connect_timeout", "retry", "retry_on_timeout", "retry_on_error")
_DROPPED = ("orig_socket_timeout", "orig_socket_connect_timeout")


def redis_version(text: str) -> Tuple[int, int]:
    """``major.minor`` of a redis-py version string (``"8.2.0"``, ``"5.0.0b1"``)."""
    parts = []
    for part in text.split(".")[:2]:
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        parts.append(int(digits or 0))
    while len(parts) < 2:
        parts.append(0)
    return parts[0], parts[1]


def check_redis_version(text: str) -> None:
    """:class:`InvalidArgument` naming the supported releases when redis-py is older."""
    if redis_version(text) < SUPPORTED:
        raise InvalidArgument(
            f"fencedlock needs redis-py {SUPPORTED[0]}.{SUPPORTED[1]} or later (tested with {TESTED}); "
            f"this is redis-py {text}: pip install 'redis>={SUPPORTED[0]}.{SUPPORTED[1]}'"
        )


_CLUSTER = (
    "cluster clients (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster) are not supported: "
    "fencedlock does not route by key. Give {cls} a client of the one primary that serves the lock key's "
    "slot (a '{{tag}}' in the key fixes the slot), or use the Rust client or the CLI, which route by key"
)


def check_sync(client: object, who: str) -> None:
    """Refuses what :class:`fencedlock.Locker` or :class:`fencedlock.Redlock` cannot use."""
    check_redis_version(redis.__version__)
    if isinstance(client, (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster)):
        raise InvalidArgument(_CLUSTER.format(cls=f"fencedlock.{who} a redis.Redis"))
    if isinstance(client, redis.asyncio.Redis):
        raise InvalidArgument(
            f"fencedlock.{who} takes a redis.Redis client; a redis.asyncio.Redis goes to fencedlock.asyncio.{who}"
        )
    if not isinstance(client, redis.Redis) or getattr(client, "connection_pool", None) is None:
        raise InvalidArgument(f"fencedlock.{who} takes a redis.Redis client, got {type(client).__name__}")


def check_async(client: object, who: str) -> None:
    """Refuses what :class:`fencedlock.asyncio.Locker` or ``Redlock`` cannot use."""
    check_redis_version(redis.__version__)
    if isinstance(client, (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster)):
        raise InvalidArgument(_CLUSTER.format(cls=f"fencedlock.asyncio.{who} a redis.asyncio.Redis"))
    if isinstance(client, redis.Redis):
        raise InvalidArgument(
            f"fencedlock.asyncio.{who} takes a redis.asyncio.Redis client; a redis.Redis goes to fencedlock.{who}"
        )
    if not isinstance(client, redis.asyncio.Redis) or getattr(client, "connection_pool", None) is None:
        raise InvalidArgument(f"fencedlock.asyncio.{who} takes a redis.asyncio.Redis client, got {type(client).__name__}")


def connection_kwargs(pool: Any, timeout: float, retry: Any) -> Dict[str, Any]:
    """The arguments of the package's connections to ``pool``'s server: the pool's own, with
    both socket timeouts the request timeout and ``retry`` (no retries) in place of the
    client's retry settings."""
    kwargs = {k: v for k, v in dict(pool.connection_kwargs).items() if k not in _OVERRIDES + _DROPPED}
    kwargs.update(socket_timeout=timeout, socket_connect_timeout=timeout, retry=retry, retry_on_timeout=False,
                  retry_on_error=[])
    return kwargs
