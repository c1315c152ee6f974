"""The package as pip builds it: pyproject's tables are where setuptools reads them (an
optional-dependencies table placed inside [project] swallows the keys after it), the
``postgres`` extra carries psycopg at a version the tests pin, and every subpackage is found."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

PYTHON = Path(__file__).resolve().parents[1]


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
