"""The package as pip builds it: pyproject's tables are where the build reads them (an
optional-dependencies table placed inside [project] swallows the keys after it), the
``postgres`` extra carries psycopg at a version the tests pin, every subpackage is a package,
and ``pip install ./python`` of a checkout is a working package that leaves nothing behind."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from servers import Server

PYTHON = Path(__file__).resolve().parents[1]
PROTOCOL = PYTHON.parent / "protocol"
PROTOCOL_FILES = {"functions.lua": "src/functions.lua", "contract.json": "contract.json"}
"""The files the package carries that the protocol crate owns: each one's name in the package,
and its path in ``protocol/`` (the build takes them from there)."""


def test_pyproject_declares_the_postgres_extra_and_keeps_its_project_keys() -> None:
    project = tomllib.loads((PYTHON / "pyproject.toml").read_text())["project"]
    assert set(project["optional-dependencies"]) == {"postgres"}
    (psycopg,) = project["optional-dependencies"]["postgres"]
    minimum = re.fullmatch(r"psycopg>=(\d+)\.(\d+)", psycopg)
    assert minimum, psycopg
    assert all("::" in c for c in project["classifiers"]) and project["dependencies"] == ["redis>=4.6"]
    pinned = re.search(r"^psycopg==(\d+)\.(\d+)\.\d+ ", (PYTHON / "requirements-dev.txt").read_text(), re.M)
    assert pinned and tuple(map(int, pinned.groups())) >= tuple(map(int, minimum.groups()))


def test_every_subpackage_has_an_init_so_setuptools_finds_it() -> None:
    source = PYTHON / "src" / "fencedlock"
    for module in source.rglob("*.py"):
        assert (module.parent / "__init__.py").exists(), module
    assert (source / "resource" / "__init__.py").exists()


def test_psycopg_is_never_imported_by_the_package_and_sqlite_needs_nothing_else() -> None:
    """psycopg is an optional extra: importing the resource modules and fencing SQLite rows
    must not import it (a psycopg connection exists only where the application imported it)."""
    program = """
import sqlite3, sys
import fencedlock.resource as resource, fencedlock.asyncio.resource
conn = sqlite3.connect(":memory:")
conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
conn.execute("INSERT INTO t VALUES (1)")
resource.add_fence_column(conn, resource.Table("t"))
assert resource.claim(conn, resource.Table("t"), 1, 5) == (5,)
try:
    resource.claim(object(), resource.Table("t"), 1, 5)
except TypeError as refused:
    assert "fencedlock[postgres]" in str(refused), refused
assert "psycopg" not in sys.modules, "psycopg was imported"
"""
    env = {**os.environ, "PYTHONPATH": str(PYTHON / "src")}
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.engines("functions")
def test_pip_install_of_a_clean_checkout_is_a_working_package(server: Server, tmp_path: Path) -> None:
    """``pip install ./python`` from a checkout (its files as git has them, nothing built,
    and the ``protocol/`` files the build takes next to it): the installed package, not
    ``src``, carries ``functions.lua`` and ``contract.json`` byte-equal to ``protocol/``'s,
    reads its own copies and takes a lease on a server without the module, with the Functions
    library it carries. The build is pip's own (an isolated build environment with the build
    backend from PyPI, as a user's install gets), in a copy of the checkout, which must be left
    exactly as it was: no ``build/``, no ``*.egg-info``, no copied files."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "."], cwd=PYTHON,
                            capture_output=True, text=True, check=True, timeout=60).stdout.split()
    checkout = tmp_path / "python"
    for name in listed:
        if (PYTHON / name).is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PYTHON / name, checkout / name)
    # What the build takes from the protocol crate, where a checkout has it next to python/.
    for name in PROTOCOL_FILES.values():
        (tmp_path / "protocol" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(PROTOCOL / name, tmp_path / "protocol" / name)
    before = sorted(p.name for p in PYTHON.iterdir()), sorted(p.name for p in (PYTHON / "src").iterdir())
    copied = sorted(str(p.relative_to(checkout)) for p in checkout.rglob("*"))
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                           "--target", str(site), str(checkout)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (sorted(p.name for p in PYTHON.iterdir()), sorted(p.name for p in (PYTHON / "src").iterdir())) == before
    left = sorted(str(p.relative_to(checkout)) for p in checkout.rglob("*"))
    assert left == copied, f"the build left {sorted(set(left) - set(copied))} in the checkout"
    program = f"""
import sys, redis, fencedlock, fencedlock.asyncio, fencedlock.resource
assert fencedlock.__file__.startswith({str(site)!r}), fencedlock.__file__
locker = fencedlock.Locker(redis.Redis(port={server.port}), ttl=5)
lease = locker.acquire("packaged")
assert lease is not None and locker.engine is fencedlock.Engine.FUNCTIONS, (lease, locker.engine)
assert lease.release()
from fencedlock import _data, _serving
assert _data.LIBRARY_FILE == _serving.LIBRARY_FILE and str(_data.LIBRARY_FILE).startswith({str(site)!r}), _data.LIBRARY_FILE
assert str(_data.CONTRACT_FILE).startswith({str(site)!r}), _data.CONTRACT_FILE
"""
    for name, in_protocol in PROTOCOL_FILES.items():
        carried = site / "fencedlock" / name
        assert carried.is_file(), f"the installed package does not carry {name}"
        assert carried.read_bytes() == (PROTOCOL / in_protocol).read_bytes(), f"{name} is not protocol/{in_protocol}"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    ran = subprocess.run([sys.executable, "-c", program], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
