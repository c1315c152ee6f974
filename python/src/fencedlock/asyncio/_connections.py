"""The asyncio ``Server``'s connections and one request's exchange on one (its sync twin is
``fencedlock/_connections.py``): ``redis.asyncio`` connections, each request bounded by
``asyncio.wait_for``; the sync ones by socket timeouts. The rest of ``Server`` is one source
(``_server.py`` here, from which ``fencedlock/_server.py`` is generated)."""

from __future__ import annotations

import asyncio
from typing import Any, List

import redis.exceptions as rexc
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from .. import _clients
from .._serving import remaining
from .._wire import Args


class Connections:
    """The server's own connections, made with the client's connection class and
    arguments, without redis-py's retries, and connected within a request's time left
    (``asyncio.wait_for`` over the connection's set-up and handshake)."""

    def __init__(self, pool: Any, timeout: float) -> None:
        self._class = pool.connection_class
        self._kwargs = _clients.connection_kwargs(pool, timeout, Retry(NoBackoff(), 0))
        self._timeout = timeout
        self._idle: List[Any] = []

    async def get(self, deadline: float) -> Any:
        """An idle connection, or a new one; connected (handshake included) by ``deadline``."""
        conn = self._idle.pop() if self._idle else self._class(**self._kwargs)
        if not conn.is_connected:
            conn.socket_timeout = self._timeout
            try:
                await asyncio.wait_for(conn.connect(), remaining(deadline))
            except asyncio.TimeoutError:
                await conn.disconnect(nowait=True)
                raise rexc.TimeoutError("Timeout connecting to server") from None
            except BaseException:
                await conn.disconnect(nowait=True)
                raise
            # Each request is bounded by its own deadline (``Server._roundtrip``), one that
            # waits on the server (``ACQUIRE … BLOCK``, ``BLPOP``) by more than the timeout:
            # redis-py must not cut its reads short.
            conn.socket_timeout = None
        return conn

    def put(self, conn: Any) -> None:
        self._idle.append(conn)


async def roundtrip(conn: Any, args: Args, deadline: float) -> Any:
    """One request and its reply by ``deadline``; no answer in time closes the connection
    (the server then forgets a waiter) and is redis-py's ``TimeoutError``."""

    async def exchange() -> Any:
        await conn.send_command(*args)
        return await conn.read_response()

    timeout = remaining(deadline)
    try:
        return await asyncio.wait_for(exchange(), timeout)
    except asyncio.TimeoutError:
        await conn.disconnect(nowait=True)
        raise rexc.TimeoutError(f"no answer within {timeout:.3f} s") from None


async def disconnect(conn: Any, *, at_once: bool = False) -> None:
    """Closes ``conn``; ``at_once`` without waiting on its socket (a cancelled request's:
    the task must end now)."""
    await conn.disconnect(nowait=at_once)
