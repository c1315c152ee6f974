"""Engine detection per server: the module where loaded, else the Functions library (loaded
when missing or older), else the script; NoEngine naming both ways out."""

from __future__ import annotations

import asyncio
from typing import Any, Dict

import pytest
import redis.asyncio

import fencedlock
import fencedlock.asyncio
from fencedlock import Engine, Locker, _wire
from fencedlock._wire import LIBRARY
from servers import Server, Servers


@pytest.mark.all_flavors
def test_each_server_kind_gets_its_engine(server: Server, engine: str) -> None:
    locker = Locker(server.client())
    assert locker.engine is None
    assert locker.detect_engine() is Engine(engine)
    if engine == "functions":
        assert server.admin().fcall_ro("fencedlock_version", 0) >= 1


@pytest.mark.engines("functions")
def test_an_older_library_is_replaced_and_a_newer_one_kept(server: Server) -> None:
    admin = server.admin()
    old = LIBRARY.replace("\nlocal VERSION = ", "\nlocal VERSION = 0 * ", 1)
    admin.execute_command(  # type: ignore[no-untyped-call]
        "FUNCTION", "LOAD", "REPLACE", old)
    assert admin.fcall_ro("fencedlock_version", 0) == 0
    assert Locker(server.client()).acquire("k") is not None
    assert admin.fcall_ro("fencedlock_version", 0) >= 1
    newer = LIBRARY.replace("\nlocal VERSION = ", "\nlocal VERSION = 1000 + ", 1)
    admin.execute_command(  # type: ignore[no-untyped-call]
        "FUNCTION", "LOAD", "REPLACE", newer)
    assert Locker(server.client()).acquire("k2") is not None
    assert admin.fcall_ro("fencedlock_version", 0) >= 1000


@pytest.mark.engines("script")
def test_the_script_is_loaded_again_after_a_script_flush(server: Server) -> None:
    locker = Locker(server.client(), ttl=5)
    first = locker.acquire("k")
    assert first is not None and locker.engine is Engine.SCRIPT
    server.admin().script_flush()
    assert first.release() is True
    assert locker.acquire("k") is not None


@pytest.mark.engines("functions")
def test_no_engine_names_both_ways_out(servers: Servers) -> None:
    server = servers.start("functions")
    server.admin().execute_command(  # type: ignore[no-untyped-call]
        "ACL", "SETUSER", "default", "-function", "-script")
    with pytest.raises(fencedlock.NoEngine) as refused:
        Locker(server.client()).acquire("k")
    text = str(refused.value)
    assert "loadmodule" in text and "FUNCTION LOAD" in text
    assert not refused.value.is_unavailable and not refused.value.is_retryable


@pytest.mark.engines("module")
def test_forcing_an_engine(server: Server) -> None:
    locker = Locker(server.client(), engine="functions")
    lease = locker.acquire("k")
    assert lease is not None and locker.engine is Engine.FUNCTIONS
    assert Locker(server.client(), engine="script").detect_engine() is Engine.SCRIPT


def altered_library() -> str:
    """This package's library with one comment more: another library of the same version,
    as a change to functions.lua without a version raise leaves on servers."""
    altered = LIBRARY.replace("\nlocal RETENTION_MS = ", "\n-- altered\nlocal RETENTION_MS = ", 1)
    assert altered != LIBRARY
    return altered


def server_library(server: Server) -> bytes:
    listed = server.admin().execute_command(  # type: ignore[no-untyped-call]
        "FUNCTION", "LIST", "LIBRARYNAME", "fencedlock", "WITHCODE")
    code = _wire.library_code(listed)
    assert code is not None
    return code


def load_altered(server: Server) -> None:
    admin = server.admin()
    admin.execute_command("FUNCTION", "LOAD", "REPLACE", altered_library())  # type: ignore[no-untyped-call]
    assert admin.fcall_ro("fencedlock_version", 0) == fencedlock._contract.LIBRARY_VERSION
    assert b"-- altered" in server_library(server)


@pytest.mark.all_flavors
@pytest.mark.engines("functions")
@pytest.mark.parametrize("client_options", [{}, {"protocol": 3}, {"decode_responses": True}],
                         ids=["resp2", "resp3", "decoded"])
def test_a_library_of_the_same_version_with_other_code_is_replaced(
    server: Server, client_options: Dict[str, Any]
) -> None:
    load_altered(server)
    locker = Locker(server.client(**client_options))
    assert locker.detect_engine() is Engine.FUNCTIONS
    assert server_library(server) == LIBRARY.encode(), "the package's own library is loaded now"
    assert locker.acquire("k") is not None


@pytest.mark.engines("functions")
def test_the_same_versions_library_is_kept_where_function_list_is_denied(server: Server) -> None:
    load_altered(server)
    server.admin().execute_command(  # type: ignore[no-untyped-call]
        "ACL", "SETUSER", "default", "-function|list")
    locker = Locker(server.client())
    assert locker.detect_engine() is Engine.FUNCTIONS
    assert b"-- altered" in server_library(server), "kept: the server would not show its code"
    assert locker.acquire("k") is not None


@pytest.mark.engines("functions")
def test_the_asyncio_locker_replaces_a_library_of_the_same_version_with_other_code(server: Server) -> None:
    load_altered(server)

    async def run() -> None:
        client = redis.asyncio.Redis(port=server.port, socket_timeout=10)
        try:
            locker = fencedlock.asyncio.Locker(client)
            assert await locker.detect_engine() is Engine.FUNCTIONS
        finally:
            await client.aclose()

    asyncio.run(run())
    assert server_library(server) == LIBRARY.encode()


def test_the_library_code_is_found_in_every_reply_shape() -> None:
    flat = [[b"library_name", b"fencedlock", b"engine", b"LUA", b"functions", [], b"library_code", b"#!lua x"]]
    assert _wire.library_code(flat) == b"#!lua x"
    assert _wire.library_code([{"library_name": "fencedlock", "library_code": "#!lua y"}]) == b"#!lua y"
    assert _wire.library_code([[b"library_name", b"other", b"library_code", b"z"]]) is None
    assert _wire.library_code([]) is None and _wire.library_code(None) is None
    assert _wire.library_differs([]) and _wire.library_differs(flat)
    assert not _wire.library_differs([[b"library_name", b"fencedlock", b"library_code", LIBRARY.encode()]])
