"""Engine detection per server: the module where loaded, else the Functions library (loaded
when missing or older), else the script; NoEngine naming both ways out."""

from __future__ import annotations

import pytest

import fencedlock
from fencedlock import Engine, Locker
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
