#!/usr/bin/env python3
"""Instructions per command, counted by valgrind's callgrind (deterministic, unlike timings).

Starts a redis-server and a valkey-server with the module under callgrind, sends each
command a fixed number of times in one pipelined stream (every request hits its own
prepared key, so every one does real work), and reports instructions executed by the whole
server per command (event loop and networking included: what bounds pipelined throughput).
With --annotate it also prints the top functions (inclusive) of each fencedlock command,
which is how to see where a module command's cost goes.

    benches/profile.py                 # table of instructions per command
    benches/profile.py --annotate CAD  # plus the call tree costs of matching commands

Standard library plus valgrind (apt-get install valgrind). Servers on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in benches/
sys.path.insert(0, str(Path(__file__).resolve().parent))
from server import (  # noqa: E402  (server.py is this directory's library of helpers)
    CAD_LUA, RENEW_LUA, ROOT, Conn, Server, encode, flush, free_port,
)

TOKEN = "0123456789abcdef0123456789abcdef"
OTHER = "ffffffffffffffffffffffffffffffff"
TTL = "30000"
KEEP: list[Path | None] = [None]  # where --keep copies the dumps


class CallgrindServer(Server):
    """A Server whose process runs under callgrind; counters are zeroed and dumped on demand."""

    def command(self) -> list[str]:
        return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={self.dir}/callgrind.out.%p", *super().command()]

    def control(self, *args: str) -> str:
        res = subprocess.run(["callgrind_control", *args, str(self.proc.pid)], capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            raise RuntimeError(f"callgrind_control {args}: {res.stderr or res.stdout}")
        return res.stdout


def latest_dump(srv: CallgrindServer, before: set[Path], conn: Conn) -> Path:
    """Waits for the dump file. Valgrind acts on a dump request when the server next runs, so
    an idle server is woken with a PING now and then (a few PINGs in 20,000 commands)."""
    for i in range(600):
        new = set(srv.dir.glob("callgrind.out.*")) - before
        if new:
            return max(new, key=lambda p: p.stat().st_mtime)
        if i % 10 == 9:
            conn.cmd("PING")
        time.sleep(0.1)
    raise RuntimeError(f"callgrind wrote no dump: {sorted(p.name for p in srv.dir.iterdir())}")


def total_ir(dump: Path) -> int:
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("totals:") or line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {dump}")


def measure(srv, label, prepare, commands, n, annotate) -> float:
    c = Conn(srv.port, timeout=600)
    flush(c)
    if prepare:
        c.load(prepare(i) for i in range(n))
    c.cmd("PING")
    srv.control("--zero")
    c.load((commands(i) for i in range(n)), batch=2000)
    before = set(srv.dir.glob("callgrind.out.*"))
    srv.control("--dump=" + re.sub(r"[^A-Za-z0-9]+", "_", label))
    dump = latest_dump(srv, before, c)
    c.close()
    per = total_ir(dump) / n
    if KEEP[0] is not None:
        KEEP[0].mkdir(parents=True, exist_ok=True)
        shutil.copy(dump, KEEP[0] / f"{srv.name}-{re.sub(r'[^A-Za-z0-9]+', '_', label).strip('_')}.callgrind")
    print(f"{srv.name:<7} {label:<44} {per:>10,.0f} instructions/command", flush=True)
    if annotate and re.search(annotate, label, re.I):
        out = subprocess.run(
            ["callgrind_annotate", "--inclusive=yes", "--threshold=99", str(dump)],
            capture_output=True, text=True, timeout=300,
        ).stdout
        rows = [l for l in out.splitlines() if re.match(r"^\s*[0-9,]+ ", l)]
        print("    inclusive instructions per command, top functions:")
        for l in rows[:30]:
            ir, _, fn = l.strip().partition(" ")
            print(f"    {int(ir.replace(',', '')) / n:>10,.0f}  {fn.strip()[:150]}")
    return per


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=5000, help="commands per measurement")
    ap.add_argument("--annotate", default=None, help="regex of measurement labels to annotate")
    ap.add_argument("--module", default=os.environ.get("FENCEDLOCK_MODULE", str(ROOT / "target/release/libfencedlock_module.so")))
    ap.add_argument("--redis", default=os.environ.get("FENCEDLOCK_REDIS_SERVER", "redis-server"))
    ap.add_argument("--valkey", default=os.environ.get("FENCEDLOCK_VALKEY_SERVER", str(ROOT / ".cache/valkey/valkey-server")))
    ap.add_argument("--out", default=None, help="write {server: {label: instructions per command}} as JSON")
    ap.add_argument("--keep", default=None, help="copy each callgrind dump into this directory")
    ap.add_argument("--only", choices=["redis", "valkey"], default=None)
    opts = ap.parse_args()
    KEEP[0] = Path(opts.keep) if opts.keep else None
    n = opts.n
    key = lambda p, i: "%s:%012d" % (p, i)  # noqa: E731
    lock = lambda i: encode("FENCEDLOCK.ACQUIRE", key("l", i), TOKEN, TTL)  # noqa: E731
    string = lambda i: encode("SET", key("s", i), TOKEN, "PX", TTL)  # noqa: E731
    used: set[int] = set()
    plans = {
        "redis": [
            ("PING", None, lambda i: encode("PING")),
            ("FENCEDLOCK.ACQUIRE (fresh key)", None, lock),
            ("SET NX PX (fresh key)", None, lambda i: encode("SET", key("s", i), TOKEN, "NX", "PX", TTL)),
            ("FENCEDLOCK.RELEASE (holder)", lock, lambda i: encode("FENCEDLOCK.RELEASE", key("l", i), TOKEN)),
            ("EVALSHA compare-and-delete (match)", string, lambda i: encode("EVALSHA", SHA["cad"], 1, key("s", i), TOKEN)),
            ("FENCEDLOCK.CAD (match)", string, lambda i: encode("FENCEDLOCK.CAD", key("s", i), TOKEN)),
            ("FENCEDLOCK.RENEW (holder)", lock, lambda i: encode("FENCEDLOCK.RENEW", key("l", i), TOKEN, TTL)),
            ("EVALSHA renew (match)", string, lambda i: encode("EVALSHA", SHA["renew"], 1, key("s", i), TOKEN, TTL)),
            ("FENCEDLOCK.RELEASE (wrong token)", lock, lambda i: encode("FENCEDLOCK.RELEASE", key("l", i), OTHER)),
            ("FENCEDLOCK.CAD (wrong value)", string, lambda i: encode("FENCEDLOCK.CAD", key("s", i), OTHER)),
        ],
        "valkey": [
            ("PING", None, lambda i: encode("PING")),
            ("FENCEDLOCK.CAD (match)", string, lambda i: encode("FENCEDLOCK.CAD", key("s", i), TOKEN)),
            ("DELIFEQ (match)", string, lambda i: encode("DELIFEQ", key("s", i), TOKEN)),
            ("EVALSHA compare-and-delete (match)", string, lambda i: encode("EVALSHA", SHA["cad"], 1, key("s", i), TOKEN)),
            ("DEL (existing key)", string, lambda i: encode("DEL", key("s", i))),
            ("FENCEDLOCK.CAD (wrong value)", string, lambda i: encode("FENCEDLOCK.CAD", key("s", i), OTHER)),
            ("DELIFEQ (wrong value)", string, lambda i: encode("DELIFEQ", key("s", i), OTHER)),
        ],
    }
    SHA: dict[str, str] = {}
    binaries = {"redis": opts.redis, "valkey": opts.valkey}
    results: dict[str, dict[str, float]] = {}
    for name, plan in plans.items():
        if opts.only and name != opts.only:
            continue
        srv = CallgrindServer(name, binaries[name], opts.module, free_port(used))
        try:
            srv.start(timeout=180)
            c = Conn(srv.port)
            SHA["cad"] = c.cmd("SCRIPT", "LOAD", CAD_LUA)
            SHA["renew"] = c.cmd("SCRIPT", "LOAD", RENEW_LUA)
            c.close()
            for label, prepare, commands in plan:
                results.setdefault(name, {})[label] = measure(srv, label, prepare, commands, n, opts.annotate)
        finally:
            srv.cleanup()
    if opts.out:
        Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.out).write_text(json.dumps({"commands": n, "instructions": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
