"""One lock server behind the user's ``redis.asyncio`` client: the asyncio twin of
``fencedlock._server`` (same engine detection, same bounded requests on pooled
connections, same waiting), sharing its pure parts."""

from __future__ import annotations

import asyncio
import time
from typing import Any, List, Optional

import redis.asyncio
import redis.exceptions as rexc
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from .. import _clients, _contract, _multi, _wire
from .._keys import wake_key
from .._multi import OneCommand
from .._server import LIST_LIBRARY, blpop_timeout, describe, nap, no_engine, remaining
from .._wire import Args, Engine
from ..errors import FencedLockError, NoEngine, Unavailable, translate


class Connections:
    """The twin of ``fencedlock._server.Connections``: connected within the request's
    time left (``asyncio.wait_for`` over the connection's set-up and handshake)."""

    def __init__(self, pool: Any, timeout: float) -> None:
        self._class = pool.connection_class
        self._kwargs = _clients.connection_kwargs(pool, timeout, Retry(NoBackoff(), 0))
        self._timeout = timeout
        self._idle: List[Any] = []

    async def get(self, deadline: float) -> Any:
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


class Server:
    def __init__(self, client: redis.asyncio.Redis, *, timeout: float, engine: Optional[Engine]) -> None:
        self._client = client
        self._pool = Connections(client.connection_pool, timeout)
        self.name = describe(client.connection_pool)
        self.timeout = timeout
        self._forced = engine
        self._engine: Optional[Engine] = None
        self._detecting = asyncio.Lock()
        self._one_command: Optional[OneCommand] = None
        self._probing = asyncio.Lock()

    async def call(self, args: Args, *, secret: Optional[bytes] = None, timeout: Optional[float] = None) -> Any:
        deadline = time.monotonic() + (timeout or self.timeout)
        for attempt in (1, 2):
            conn = await self._connection(secret, deadline)
            try:
                return await self._exchange(conn, args, deadline, secret)
            except rexc.ConnectionError as exc:
                await conn.disconnect()
                if attempt == 2 or isinstance(exc, rexc.AuthenticationError) or time.monotonic() >= deadline:
                    raise translate(exc, self.name, secret) from None
            finally:
                self._pool.put(conn)
        raise AssertionError("unreachable")

    async def _connection(self, secret: Optional[bytes], deadline: float) -> Any:
        try:
            return await self._pool.get(deadline)
        except (rexc.RedisError, OSError) as exc:
            raise translate(exc, self.name, secret) from None

    async def _exchange(self, conn: Any, args: Args, deadline: float, secret: Optional[bytes]) -> Any:
        try:
            try:
                return await self._roundtrip(conn, args, deadline)
            except rexc.NoScriptError:
                await self._roundtrip(conn, ("SCRIPT", "LOAD", _wire.SCRIPT), deadline)
                return await self._roundtrip(conn, args, deadline)
        except rexc.ConnectionError:
            raise
        except rexc.ResponseError as exc:
            raise translate(exc, self.name, secret) from None
        except (rexc.RedisError, OSError) as exc:
            await conn.disconnect()
            raise translate(exc, self.name, secret) from None
        except BaseException:
            # Cancelled mid-request: the reply would land in another request's place, and a
            # waiter must leave the server's queue.
            await conn.disconnect(nowait=True)
            raise

    @staticmethod
    async def _roundtrip(conn: Any, args: Args, deadline: float) -> Any:
        async def exchange() -> Any:
            await conn.send_command(*args)
            return await conn.read_response()

        timeout = remaining(deadline)
        try:
            return await asyncio.wait_for(exchange(), timeout)
        except asyncio.TimeoutError:
            await conn.disconnect(nowait=True)
            raise rexc.TimeoutError(f"no answer within {timeout:.3f} s") from None

    @property
    def engine(self) -> Optional[Engine]:
        return self._engine

    async def detect(self) -> Engine:
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
        """See ``fencedlock._server.Server.one_command``."""
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
        """See ``fencedlock._server.Server._load_library``."""
        version = await self._library_version()
        if version is not None and version > _contract.LIBRARY_VERSION:
            return
        if version == _contract.LIBRARY_VERSION and not await self._library_differs():
            return
        await self.call(("FUNCTION", "LOAD", "REPLACE", _wire.LIBRARY))

    async def _library_differs(self) -> bool:
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

    async def wait(self, attempt: Args, registering: Args, status: Args, key: bytes, until: float, secret: bytes) -> Any:
        """See ``fencedlock._server.Server.wait``."""
        engine = await self.detect()
        conn = await self._connection(secret, time.monotonic() + self.timeout)
        try:
            if engine is Engine.MODULE:
                return await self._exchange(conn, attempt, max(until, time.monotonic()) + self.timeout, secret)
            return await self._woken(conn, attempt, registering, status, key, until, secret)
        except rexc.ConnectionError as exc:
            await conn.disconnect()
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
                shown = _wire.decode_status(await self._exchange(conn, status, self._deadline(), secret))
                held_for = _wire.held_for(shown)
            except FencedLockError as exc:
                if exc.cause is not None and exc.cause.is_outage:
                    raise
                held_for = 0.0
            reply = await self._exchange(conn, registering, self._deadline(), secret)
            if reply is not None:
                return reply
            pause = nap(held_for, left)
            await self._exchange(conn, ("BLPOP", wake_key(key), blpop_timeout(pause)), self._deadline(pause), secret)
            # The attempt after a wake-up names the wake-up list too: a reader granted then
            # passes the wake-up on to the readers waiting behind it (a release wakes one).
            reply = await self._exchange(conn, registering, self._deadline(), secret)
        return reply

    def _deadline(self, longer: float = 0.0) -> float:
        """The deadline of one request sent now (that may wait ``longer`` on the server)."""
        return time.monotonic() + longer + self.timeout
