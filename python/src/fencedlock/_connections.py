"""The sync ``Server``'s connections and one request's exchange on one (its asyncio twin is
``fencedlock/asyncio/_connections.py``): redis-py's blocking connections, bounded by socket
timeouts; the asyncio ones by ``asyncio.wait_for``. The rest of ``Server`` is one source
(``fencedlock/asyncio/_server.py``, from which ``fencedlock/_server.py`` is generated)."""

from __future__ import annotations

import os
import threading
from typing import Any, List

import redis.exceptions as rexc
from redis.backoff import NoBackoff
from redis.retry import Retry

from . import _clients
from ._serving import remaining
from ._wire import Args


class Connections:
    """The server's own connections, made with the client's connection class and
    arguments, without redis-py's retries, and connected within a request's time left."""

    def __init__(self, pool: Any, timeout: float) -> None:
        self._class = pool.connection_class
        self._kwargs = _clients.connection_kwargs(pool, timeout, Retry(NoBackoff(), 0))
        self._timeout = timeout
        self._idle: List[Any] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def get(self, deadline: float) -> Any:
        """An idle connection, or a new one; connected (handshake included) by ``deadline``."""
        with self._lock:
            if self._pid != os.getpid():
                # A forked child: the parent's sockets are not ours to use.
                self._idle, self._pid = [], os.getpid()
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._class(**self._kwargs)
        if getattr(conn, "_sock", None) is None:
            budget = remaining(deadline)
            conn.socket_connect_timeout = conn.socket_timeout = budget
            try:
                conn.connect()
            except BaseException:
                conn.disconnect()
                raise
            finally:
                conn.socket_connect_timeout = conn.socket_timeout = self._timeout
            sock = getattr(conn, "_sock", None)
            if sock is not None:
                sock.settimeout(self._timeout)
        return conn

    def put(self, conn: Any) -> None:
        with self._lock:
            if self._pid == os.getpid():
                self._idle.append(conn)


def roundtrip(conn: Any, args: Args, deadline: float) -> Any:
    """One request and its reply by ``deadline``; no answer in time closes the connection
    (the server then forgets a waiter) and is redis-py's ``TimeoutError``."""
    conn.send_command(*args)
    timeout = remaining(deadline)
    if not conn.can_read(timeout=timeout):
        conn.disconnect()
        raise rexc.TimeoutError(f"no answer within {timeout:.3f} s")
    return conn.read_response()


def disconnect(conn: Any, *, at_once: bool = False) -> None:
    """Closes ``conn`` (``at_once`` matters on asyncio only: a cancelled request's
    connection is closed without waiting on its socket)."""
    conn.disconnect()
