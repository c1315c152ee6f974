"""Real server processes for the tests, as the Rust harness starts them: Redis 7.0 (Debian's
``redis-server``), Redis 7.4 and Valkey 9.1 (``.cache/``, installed by ``scripts/setup``),
each with the module or as a managed service (the default user restricted, an admin user for
the tests' own CONFIG/DEBUG), on 127.0.0.1 ports 21000-23499 (PostgreSQL takes 23500-23999,
see ``postgres.py``), in a temporary directory.
A server that cannot start fails the test with what to do; it never skips."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
import redis

REPO = Path(__file__).resolve().parents[2]
MODULE = Path(os.environ.get("FENCEDLOCK_MODULE", REPO / "target/release/libfencedlock_module.so"))
BINARIES = {
    "redis70": os.environ.get("FENCEDLOCK_REDIS_SERVER", "redis-server"),
    "redis74": str(REPO / ".cache/redis74/redis-server"),
    "valkey": str(REPO / ".cache/valkey/valkey-server"),
}
ADMIN = ("harness", "harness-admin")
# The default user of a managed service: everything but MODULE, CONFIG and DEBUG; "script"
# servers deny FUNCTION too (FCALL stays), so the library can only run as a script.
MANAGED_RULES = ["on", "nopass", "~*", "&*", "+@all", "-module", "-config", "-debug"]

REDIS_PORTS = 2500
"""Ports 21000 to 21000 + REDIS_PORTS - 1."""
_next_port = 21000 + (os.getpid() % 100) * 25


def free_port() -> int:
    """A port in 21000-23499 nobody listens on (nor on its cluster bus, port + 10000)."""
    global _next_port
    for _ in range(REDIS_PORTS):
        port = _next_port
        _next_port = 21000 + (_next_port - 21000 + 1) % REDIS_PORTS
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port in 21000-23499")


class Server:
    """One server process. ``kind``: ``module`` (the module loaded, DEBUG enabled),
    ``functions`` (managed, no module), ``script`` (managed, FUNCTION denied) or ``bare`` (no
    module, every right: a module server restarted without its module)."""

    def __init__(self, flavor: str, kind: str, *, args: Optional[List[str]] = None, port: Optional[int] = None) -> None:
        self.flavor, self.kind = flavor, kind
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"fencedlock-py-{self.port}-"))
        self.extra = list(args or [])
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.start()

    def command_line(self) -> List[str]:
        binary = BINARIES[self.flavor]
        line = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                "--save", "", "--daemonize", "no", "--logfile", str(self.dir / "server.log"),
                "--enable-debug-command", "yes", "--repl-diskless-sync", "no"]
        if self.kind == "module":
            if not MODULE.exists():
                pytest.fail(f"{MODULE} is missing: run 'cargo build --release -p fencedlock-module'")
            line += ["--loadmodule", str(MODULE)]
        elif self.kind != "bare":
            rules = MANAGED_RULES + (["-function"] if self.kind == "script" else [])
            line += ["--user", "default", *rules, "--user", ADMIN[0], "on", f">{ADMIN[1]}", "~*", "&*", "+@all"]
        return line + self.extra

    def start(self) -> None:
        binary = BINARIES[self.flavor]
        if shutil.which(binary) is None:
            pytest.fail(f"{binary} not found: run scripts/setup (it installs Redis 7.0, 7.4 and Valkey 9.1)")
        self.proc = subprocess.Popen(self.command_line(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = (self.dir / "server.log").read_text(errors="replace") if (self.dir / "server.log").exists() else ""
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                pytest.fail(f"{self.flavor} ({self.kind}) on port {self.port} did not start:\n{err}\n{log[-2000:]}")
            try:
                if self.admin().ping():
                    return
            except redis.RedisError:
                time.sleep(0.01)
        pytest.fail(f"{self.flavor} on port {self.port} did not answer within 10 s")

    def client(self, **kwargs: Any) -> redis.Redis:
        """A client of the default user (the application's)."""
        kwargs.setdefault("socket_timeout", 10)
        return redis.Redis(port=self.port, **kwargs)

    def admin(self) -> redis.Redis:
        """A client with every right (CONFIG, DEBUG, DEL of anything)."""
        if self.kind in ("module", "bare"):
            return redis.Redis(port=self.port, socket_timeout=10)
        return redis.Redis(port=self.port, username=ADMIN[0], password=ADMIN[1], socket_timeout=10)

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """``kill -9``."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def calls(stats: redis.Redis, command: str) -> int:
    """How many times the server ran ``command`` (``INFO commandstats``; names compared
    case-insensitively: a module's command shows as it was registered)."""
    wanted = f"cmdstat_{command}".lower()
    return sum(int(entry["calls"]) for name, entry in stats.info("commandstats").items() if name.lower() == wanted)


class Servers:
    """Every server a test started, stopped at its end."""

    def __init__(self, flavor: str) -> None:
        self.flavor = flavor
        self.started: List[Server] = []

    def start(self, kind: str, **kwargs: Any) -> Server:
        server = Server(self.flavor, kind, **kwargs)
        self.started.append(server)
        return server

    def stop_all(self) -> None:
        for server in self.started:
            server.stop()


ENGINE_KINDS: Dict[str, str] = {"module": "module", "functions": "functions", "script": "script"}
