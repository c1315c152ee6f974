"""A real PostgreSQL server for the resource tests, started as the Rust harness starts one
(``harness/src/postgres.rs``): PostgreSQL refuses to run as root, so when the suite runs as
root the server runs as the unprivileged ``postgres`` user (Debian's package creates it; else
``fencedlock-pg``, created here) in a temp dir it owns; ``initdb -A trust`` (a throwaway
cluster on loopback), ``pg_ctl start -w`` on 127.0.0.1 in ports 23500-23999 with its socket in
the temp dir, ``pg_ctl stop -m immediate`` at the end. One server per test session; each test
gets a schema of its own. A server that cannot start fails the test with what to do."""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import pytest

PORTS = range(23500, 24000)
USER = "postgres"
"""The superuser initdb creates, and the user the tests connect as."""
FALLBACK_OWNER = "fencedlock-pg"
HINT = "install Debian's postgresql package (scripts/setup does), or set FENCEDLOCK_PG_BIN"


def bin_dir() -> Path:
    """``FENCEDLOCK_PG_BIN``, or the newest ``/usr/lib/postgresql/N/bin`` with the binaries."""
    def complete(d: Path) -> bool:
        return all((d / p).is_file() for p in ("initdb", "pg_ctl"))

    chosen = os.environ.get("FENCEDLOCK_PG_BIN")
    if chosen:
        if not complete(Path(chosen)):
            pytest.fail(f"FENCEDLOCK_PG_BIN={chosen} has no initdb and pg_ctl: {HINT}")
        return Path(chosen)
    found = sorted(
        (int(d.name), d / "bin") for d in Path("/usr/lib/postgresql").glob("*") if d.name.isdigit() and complete(d / "bin")
    )
    if not found:
        pytest.fail(f"PostgreSQL's initdb was not found in /usr/lib/postgresql/*/bin: {HINT}")
    return found[-1][1]


def owner() -> Optional[Tuple[int, int]]:
    """The unprivileged (uid, gid) the server runs as when this is root; ``None`` otherwise."""
    if os.geteuid() != 0:
        return None
    for name in (USER, FALLBACK_OWNER):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid != 0:
            return entry.pw_uid, entry.pw_gid
    subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin",
                    FALLBACK_OWNER], check=False, capture_output=True)
    try:
        entry = pwd.getpwnam(FALLBACK_OWNER)
    except KeyError:
        pytest.fail("PostgreSQL refuses to run as root, and no unprivileged user could be created for it")
    return entry.pw_uid, entry.pw_gid


_port_offset = (os.getpid() * 7919) % len(PORTS)


def free_port() -> int:
    global _port_offset
    for _ in range(len(PORTS)):
        port = PORTS[_port_offset]
        _port_offset = (_port_offset + 37) % len(PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    pytest.fail(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


class Postgres:
    """One PostgreSQL server on 127.0.0.1, stopped by :meth:`stop`."""

    def __init__(self) -> None:
        self.bin = bin_dir()
        self.owner = owner()
        self.dir = Path(tempfile.mkdtemp(prefix="fencedlock-py-pg-"))
        self.port = 0
        self._schemas = itertools.count(1)
        if self.owner is not None:
            os.chown(self.dir, *self.owner)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", USER, "-E", "UTF8", "--locale=C",
                  "--no-sync", "--no-instructions")
        for _ in range(8):
            self.port = free_port()
            options = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                       "-c max_connections=100")
            started = self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "-o", options,
                                "start", check=False)
            if started.returncode == 0:
                return
        self.port = 0
        self.stop()
        pytest.fail(f"PostgreSQL did not start: {started.stdout}{started.stderr}\n{self.log_tail()}")

    @property
    def data(self) -> Path:
        return self.dir / "data"

    @property
    def log(self) -> Path:
        return self.dir / "postgres.log"

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def conninfo(self, database: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={USER} dbname={database} connect_timeout=10"

    def fresh_schema(self) -> str:
        """The conninfo of connections whose tables live in a new, empty schema of their own
        (its ``search_path``): a test's own namespace in milliseconds, where a ``CREATE
        DATABASE`` costs a third of a second."""
        import psycopg

        name = f"t{next(self._schemas)}"
        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}".encode())
        return f"{self.conninfo()} options='-c search_path={name}'"

    def stop(self) -> None:
        if self.port:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "60", "stop", check=False)
            self.port = 0
        shutil.rmtree(self.dir, ignore_errors=True)

    def _run(self, program: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A server binary, as the unprivileged owner when this is root."""
        ids: Dict[str, Any] = {}
        if self.owner is not None:
            ids = {"user": self.owner[0], "group": self.owner[1], "extra_groups": []}
        done = subprocess.run([str(self.bin / program), *args], cwd=self.dir, capture_output=True, text=True,
                              env={**os.environ, "HOME": str(self.dir), "LC_ALL": "C"}, **ids)
        if check and done.returncode != 0:
            self.stop()
            pytest.fail(f"{program} {' '.join(args)} exited with {done.returncode}: {done.stdout}{done.stderr}\n{HINT}")
        return done
