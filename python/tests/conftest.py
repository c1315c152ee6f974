"""Fixtures: real servers per test. Every test that takes ``server`` runs once per engine
(the module; the Functions library on a managed server; the library as a script where the
user may not run FUNCTION) on Redis 7.0; tests marked ``all_flavors`` also on Redis 7.4 and
Valkey 9.1. ``FENCEDLOCK_PY_FLAVORS=redis70`` narrows a local run."""

from __future__ import annotations

import os
from typing import Iterator, List, Tuple

import pytest

from postgres import Postgres
from resource_support import Refusals
from servers import Server, Servers

ALL_FLAVORS = ["redis70", "redis74", "valkey"]
ENGINES = ["module", "functions", "script"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "all_flavors: run on Redis 7.0, Redis 7.4 and Valkey 9.1")
    config.addinivalue_line("markers", "engines(*names): run on these engines only")


def _allowed() -> List[str]:
    wanted = os.environ.get("FENCEDLOCK_PY_FLAVORS")
    return [f for f in ALL_FLAVORS if not wanted or f in wanted.split(",")]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "spec" not in metafunc.fixturenames:
        return
    flavors = ALL_FLAVORS if metafunc.definition.get_closest_marker("all_flavors") else ["redis70"]
    marker = metafunc.definition.get_closest_marker("engines")
    engines = list(marker.args) if marker else ENGINES
    specs: List[Tuple[str, str]] = [(f, e) for f in flavors if f in _allowed() for e in engines]
    metafunc.parametrize("spec", specs, ids=[f"{f}-{e}" for f, e in specs])


@pytest.fixture
def servers(spec: Tuple[str, str]) -> Iterator[Servers]:
    started = Servers(spec[0])
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture
def engine(spec: Tuple[str, str]) -> str:
    return spec[1]


@pytest.fixture
def server(servers: Servers, engine: str) -> Server:
    return servers.start(engine)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Postgres]:
    """One real PostgreSQL server for the session's resource tests."""
    server = Postgres()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg(postgres_server: Postgres) -> str:
    """The conninfo of the test's own schema on the session's PostgreSQL server."""
    return postgres_server.fresh_schema()


@pytest.fixture
def refusals(caplog: pytest.LogCaptureFixture) -> Refusals:
    """The stale refusals counted and logged during the test."""
    return Refusals(caplog)
