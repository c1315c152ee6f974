"""One lock server behind the user's ``redis.asyncio`` client: the asyncio twin of
``fencedlock._server`` (same engine detection, same bounded requests on pooled
connections, same waiting), sharing its pure parts."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Awaitable, Optional

import redis.asyncio
import redis.exceptions as rexc

from .. import _contract, _multi, _wire
from .._keys import wake_key
from .._multi import OneCommand
from .._server import LIST_LIBRARY, blpop_timeout, checkout, describe, nap
from .._wire import Args, Engine
from ..errors import Cause, FencedLockError, NoEngine, Unavailable, translate


class Server:
    def __init__(self, client: redis.asyncio.Redis, *, timeout: float, engine: Optional[Engine]) -> None:
        self._pool = client.connection_pool
        self._get: Callable[[], Awaitable[Any]] = checkout(self._pool)
        self.name = describe(self._pool)
        self.timeout = timeout
        self._forced = engine
        self._engine: Optional[Engine] = None
        self._detecting = asyncio.Lock()
        self._one_command: Optional[OneCommand] = None
        self._probing = asyncio.Lock()

    async def call(self, args: Args, *, secret: Optional[bytes] = None, timeout: Optional[float] = None) -> Any:
        for attempt in (1, 2):
            conn = await self._connection(secret)
            try:
                return await self._exchange(conn, args, timeout or self.timeout, secret)
            except rexc.ConnectionError as exc:
                await conn.disconnect()
                if attempt == 2 or isinstance(exc, rexc.AuthenticationError):
                    raise translate(exc, self.name, secret) from None
            finally:
                await self._pool.release(conn)
        raise AssertionError("unreachable")

    async def _connection(self, secret: Optional[bytes]) -> Any:
        try:
            return await self._get()
        except (rexc.RedisError, OSError) as exc:
            raise translate(exc, self.name, secret) from None

    async def _exchange(self, conn: Any, args: Args, timeout: float, secret: Optional[bytes]) -> Any:
        try:
            try:
                return await self._roundtrip(conn, args, timeout)
            except rexc.NoScriptError:
                await self._roundtrip(conn, ("SCRIPT", "LOAD", _wire.SCRIPT), timeout)
                return await self._roundtrip(conn, args, timeout)
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
    async def _roundtrip(conn: Any, args: Args, timeout: float) -> Any:
        await conn.send_command(*args)
        try:
            return await asyncio.wait_for(conn.read_response(), timeout)
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
        return NoEngine(
            f"{self.name}: the fencedlock module is not loaded and the Functions library could not be loaded "
            f"({refusal}); load the module (--loadmodule …/libfencedlock_module.so), or have an administrator load "
            "the library (fencedlock functions | redis-cli -x FUNCTION LOAD REPLACE), or allow this user "
            "FUNCTION LOAD or SCRIPT LOAD and EVALSHA",
            cause=Cause.NO_ENGINE,
        )

    async def wait(self, attempt: Args, registering: Args, status: Args, key: bytes, until: float, secret: bytes) -> Any:
        """See ``fencedlock._server.Server.wait``."""
        conn = await self._connection(secret)
        try:
            if await self.detect() is Engine.MODULE:
                return await self._exchange(conn, attempt, max(until - time.monotonic(), 0) + self.timeout, secret)
            return await self._woken(conn, attempt, registering, status, key, until, secret)
        except rexc.ConnectionError as exc:
            await conn.disconnect()
            raise translate(exc, self.name, secret) from None
        finally:
            await self._pool.release(conn)

    async def _woken(
        self, conn: Any, attempt: Args, registering: Args, status: Args, key: bytes, until: float, secret: bytes
    ) -> Any:
        reply = await self._exchange(conn, attempt, self.timeout, secret)
        while reply is None:
            left = until - time.monotonic()
            if left <= 0:
                return None
            try:
                shown = _wire.decode_status(await self._exchange(conn, status, self.timeout, secret))
                held_for = _wire.held_for(shown)
            except FencedLockError as exc:
                if exc.cause is not None and exc.cause.is_outage:
                    raise
                held_for = 0.0
            reply = await self._exchange(conn, registering, self.timeout, secret)
            if reply is not None:
                return reply
            pause = nap(held_for, left)
            await self._exchange(conn, ("BLPOP", wake_key(key), blpop_timeout(pause)), pause + self.timeout, secret)
            # The attempt after a wake-up names the wake-up list too: a reader granted then
            # passes the wake-up on to the readers waiting behind it (a release wakes one).
            reply = await self._exchange(conn, registering, self.timeout, secret)
        return reply
