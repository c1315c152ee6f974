"""One lock server behind the user's redis-py client: its engine, detected once, and every
request bounded by the per-server timeout, connection set-up included, on connections of the
server's own (made from the client's connection settings, see ``_clients``).

Requests go on pooled connections one at a time, so a request that waits on the server
(``ACQUIRE … BLOCK``, a ``BLPOP`` on a wake-up list) holds its own connection and never stalls
another request. A request without an answer in time closes its connection (the server then
forgets a waiter) and is an :class:`~fencedlock.Unavailable` of cause ``TIMED_OUT``.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import redis.asyncio
import redis.exceptions as rexc

from .. import _contract, _multi, _wire
from .._keys import wake_key
from .._multi import OneCommand
from .._serving import LIST_LIBRARY, blpop_timeout, describe, nap, no_engine
from .._wire import Args, Engine
from ..errors import FencedLockError, NoEngine, Unavailable, translate
from . import _backend, _connections
from ._connections import Connections


class Server:
    """One server: the user's client, its engine, and bounded requests."""

    def __init__(self, client: redis.asyncio.Redis, *, timeout: float, engine: Optional[Engine]) -> None:
        self._client = client
        self._pool = Connections(client.connection_pool, timeout)
        self.name = describe(client.connection_pool)
        self.timeout = timeout
        self._forced = engine
        self._engine: Optional[Engine] = None
        self._detecting = _backend.Lock()
        self._one_command: Optional[OneCommand] = None
        self._probing = _backend.Lock()

    # -- requests ------------------------------------------------------------------------

    async def call(self, args: Args, *, secret: Optional[bytes] = None, timeout: Optional[float] = None) -> Any:
        """``args`` on a pooled connection, answered within ``timeout`` (the server's timeout
        by default). A connection found broken (a server restarted since) is replaced and the
        request sent once more: every request is safe to repeat for its token."""
        deadline = time.monotonic() + (timeout or self.timeout)
        for attempt in (1, 2):
            conn = await self._connection(secret, deadline)
            try:
                return await self._exchange(conn, args, deadline, secret)
            except rexc.ConnectionError as exc:
                await _connections.disconnect(conn)
                if attempt == 2 or isinstance(exc, rexc.AuthenticationError) or time.monotonic() >= deadline:
                    raise translate(exc, self.name, secret) from None
            finally:
                self._pool.put(conn)
        raise AssertionError("unreachable")

    async def _connection(self, secret: Optional[bytes], deadline: float) -> Any:
        """A connection, connected by ``deadline`` (the request's)."""
        try:
            return await self._pool.get(deadline)
        except (rexc.RedisError, OSError) as exc:
            raise translate(exc, self.name, secret) from None

    async def _exchange(self, conn: Any, args: Args, deadline: float, secret: Optional[bytes]) -> Any:
        """One request and its reply on ``conn`` by ``deadline``; the script loaded once more
        if the server's cache lost it (a restart, a failover, ``SCRIPT FLUSH``). Error replies
        and timeouts are the package's errors; a broken connection is left to the caller
        (redis-py's ``ConnectionError``). The connection is closed unless it is in step."""
        try:
            try:
                return await _connections.roundtrip(conn, args, deadline)
            except rexc.NoScriptError:
                await _connections.roundtrip(conn, ("SCRIPT", "LOAD", _wire.SCRIPT), deadline)
                return await _connections.roundtrip(conn, args, deadline)
        except rexc.ConnectionError:
            raise
        except rexc.ResponseError as exc:
            raise translate(exc, self.name, secret) from None
        except (rexc.RedisError, OSError) as exc:
            await _connections.disconnect(conn)
            raise translate(exc, self.name, secret) from None
        except BaseException:
            # Interrupted (KeyboardInterrupt) or cancelled mid-request: the reply would land in
            # the next request's place, and a waiter must leave the server's queue.
            await _connections.disconnect(conn, at_once=True)
            raise

    # -- engine --------------------------------------------------------------------------

    @property
    def engine(self) -> Optional[Engine]:
        return self._engine

    async def detect(self) -> Engine:
        """The engine, asked of the server by the first caller (once per server)."""
        engine = self._engine
        if engine is not None:
            return engine
        async with self._detecting:
            if self._engine is None:
                self._engine = await self._detect()
            return self._engine

    async def _detect(self) -> Engine:
        forced = self._forced
        if forced is Engine.MODULE:
            return Engine.MODULE
        if forced is Engine.SCRIPT:
            await self._load_script()
            return Engine.SCRIPT
        if forced is None:
            try:
                entries = await self.call(("COMMAND", "INFO", _contract.ACQUIRE))
                module = any(entry is not None for entry in entries or [])
            except Unavailable:
                raise
            except FencedLockError:
                # A server that hides COMMAND runs the module unless it has the library.
                module = await self._library_version() is None
            if module:
                return Engine.MODULE
        try:
            await self._load_library()
            return Engine.FUNCTIONS
        except Unavailable:
            raise
        except FencedLockError as refusal:
            if forced is Engine.FUNCTIONS:
                raise self._no_engine(refusal) from None
        await self._load_script()
        return Engine.SCRIPT

    async def one_command(self) -> OneCommand:
        """Which sets of keys this server takes in one ``ACQUIREALL``, found by the first
        caller and kept. On the Functions library (``FCALL`` or the script) keys of one slot,
        without asking: detection loaded version 7 or later. On the module, asked
        (``COMMAND INFO``, then ``INFO cluster``), never by sending the command itself: a server
        that does not know it would echo the token in its error; one that hides ``COMMAND``
        does not know it. :class:`Unavailable` when the server cannot be asked now (asked again
        next time)."""
        found = self._one_command
        if found is not None:
            return found
        async with self._probing:
            if self._one_command is None:
                self._one_command = await self._probe_one_command()
            return self._one_command

    async def _probe_one_command(self) -> OneCommand:
        if await self.detect() is not Engine.MODULE:
            # The library's fencedlock_acquireall (version 7, loaded at detection where older).
            return _multi.LIBRARY
        try:
            if not _multi.known(await self.call(("COMMAND", "INFO", _contract.ACQUIREALL))):
                return _multi.NOT_SERVED
        except Unavailable:
            raise
        except FencedLockError:
            return _multi.NOT_SERVED
        try:
            info = await self.call(_multi.INFO_CLUSTER)
        except Unavailable:
            raise
        except FencedLockError:
            info = None
        return OneCommand(known=True, one_slot=_multi.clustered(info))

    async def _library_version(self) -> Optional[int]:
        try:
            version = await self.call(("FCALL_RO", _contract.VERSION_FUNCTION, 0))
        except Unavailable:
            raise
        except FencedLockError:
            return None
        return version if isinstance(version, int) else None

    async def _load_library(self) -> None:
        """Loads this package's library unless the server has it or a newer one. A library of
        this version whose code differs (changed without a version raise) is replaced too."""
        version = await self._library_version()
        if version is not None and version > _contract.LIBRARY_VERSION:
            return
        if version == _contract.LIBRARY_VERSION and not await self._library_differs():
            return
        await self.call(("FUNCTION", "LOAD", "REPLACE", _wire.LIBRARY))

    async def _library_differs(self) -> bool:
        """Whether the server's library's code is other than this package's; ``False`` when
        the server will not say (an ACL that denies ``FUNCTION LIST``): keep it then."""
        try:
            return _wire.library_differs(await self.call(LIST_LIBRARY))
        except Unavailable:
            raise
        except FencedLockError:
            return False

    async def _load_script(self) -> None:
        try:
            await self.call(("SCRIPT", "LOAD", _wire.SCRIPT))
        except Unavailable:
            raise
        except FencedLockError as refusal:
            raise self._no_engine(refusal) from None

    def _no_engine(self, refusal: FencedLockError) -> NoEngine:
        return no_engine(self.name, refusal)

    # -- waiting -------------------------------------------------------------------------

    async def wait(self, attempt: Args, registering: Args, status: Args, key: bytes, until: float, secret: bytes) -> Any:
        """An ``ACQUIRE`` that waits until the monotonic instant ``until``, on a connection
        of its own: on the module ``attempt`` carries ``BLOCK`` (the server's FIFO queue);
        on the library, refused attempts are followed by a ``BLPOP`` on the key's wake-up
        list for as long as ``STATUS`` shows the holders' leases to last. The reply: a fence
        or nil. Without an answer in time: :class:`Unavailable` (the caller must release, the
        server may have granted at that instant)."""
        engine = await self.detect()
        conn = await self._connection(secret, time.monotonic() + self.timeout)
        try:
            if engine is Engine.MODULE:
                return await self._exchange(conn, attempt, max(until, time.monotonic()) + self.timeout, secret)
            return await self._woken(conn, attempt, registering, status, key, until, secret)
        except rexc.ConnectionError as exc:
            await _connections.disconnect(conn)
            raise translate(exc, self.name, secret) from None
        finally:
            self._pool.put(conn)

    async def _woken(
        self, conn: Any, attempt: Args, registering: Args, status: Args, key: bytes, until: float, secret: bytes
    ) -> Any:
        reply = await self._exchange(conn, attempt, self._deadline(), secret)
        while reply is None:
            left = until - time.monotonic()
            if left <= 0:
                return None
            try:
                held_for = _wire.held_for(_wire.decode_status(await self._exchange(conn, status, self._deadline(), secret)))
            except FencedLockError as exc:
                if exc.cause is not None and exc.cause.is_outage:
                    raise
                held_for = 0.0
            # This attempt names the wake-up list, so releases until the refusing leases end
            # push a wake-up; it follows the STATUS the nap is timed by.
            reply = await self._exchange(conn, registering, self._deadline(), secret)
            if reply is not None:
                return reply
            pause = nap(held_for, left)
            blpop = ("BLPOP", wake_key(key), blpop_timeout(pause))
            await self._exchange(conn, blpop, self._deadline(pause), secret)
            # The attempt after a wake-up names the wake-up list too: a reader granted then
            # passes the wake-up on to the readers waiting behind it (a release wakes one).
            reply = await self._exchange(conn, registering, self._deadline(), secret)
        return reply

    def _deadline(self, longer: float = 0.0) -> float:
        """The deadline of one request sent now (that may wait ``longer`` on the server)."""
        return time.monotonic() + longer + self.timeout

