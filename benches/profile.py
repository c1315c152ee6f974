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
    benches/profile.py --only functions --before HEAD
                                       # the Functions library (protocol/src/functions.lua) as
                                       # the tree has it and at a revision, FCALL and EVALSHA

The `functions` plan runs on a redis-server without the module (a managed service's
situation), the library loaded with `FUNCTION LOAD` and as a script: `ACQUIRE` of a key that
does not exist (the floor proof of a new key), of a key that exists and is free (released
before: its recorded floor), of a new key with a hash tag, and `RELEASE` as the client sends
it (with the key's wake-up list), on realistic keys (`invoice:inv_%012d`, 24 bytes) each
naming its own slot's floor (`--key-bytes N`: keys of N bytes). With `--usec` it also runs the same streams on a plain server
(no valgrind), alternating the libraries, and prints `INFO commandstats` usec_per_call of
FCALL / EVALSHA (median of the rounds; noisy on a shared machine, unlike the instructions).

Standard library plus valgrind (apt-get install valgrind). Servers on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
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


def prepared(c: Conn, prepare, n: int) -> None:
    """Runs `prepare` (one function of i, or a list of them, each over range(n) in turn)."""
    for p in prepare if isinstance(prepare, (list, tuple)) else [prepare] if prepare else []:
        c.load((p(i) for i in range(n)), batch=2000)


def measure(srv, label, prepare, commands, n, annotate) -> float:
    c = Conn(srv.port, timeout=600)
    flush(c)
    prepared(c, prepare, n)
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


def library_plan(sha: str | None, key_bytes: int = 24) -> list:
    """The library's rows for one form: FCALL (`sha` None) or the script through EVALSHA, on
    keys of `key_bytes` bytes (24 or more: `invoice:inv_%012d`, then `:xxx…`)."""
    from functions import floor_key, wake_key  # noqa: E402

    def call(function: str, keys: list[str], *args) -> bytes:
        if sha is None:
            return encode("FCALL", function, len(keys), *keys, *args)
        return encode("EVALSHA", sha, len(keys), *keys, function, *args)

    def key(i: int) -> str:
        k = f"invoice:inv_{i:012d}"
        return k if key_bytes <= len(k) else (k + ":" + "x" * key_bytes)[:key_bytes]

    def tagged(i: int) -> str:
        return f"{{invoice:{i:09d}}}:lock"

    def acquire(k: str) -> bytes:
        return call("fencedlock_acquire", [k, floor_key(k.encode()).decode()], TOKEN, TTL)

    def release(k: str) -> bytes:
        floor, wake = floor_key(k.encode()).decode(), wake_key("fencedlock:fn-wake:{", k.encode()).decode()
        return call("fencedlock_release", [k, floor, wake], TOKEN)

    form = "FCALL" if sha is None else "EVALSHA"
    return [
        (f"{form} ACQUIRE (new key)", None, lambda i: acquire(key(i))),
        (f"{form} ACQUIRE (existing key, free)", [lambda i: acquire(key(i)), lambda i: release(key(i))], lambda i: acquire(key(i))),
        (f"{form} ACQUIRE (new key, hash tag)", None, lambda i: acquire(tagged(i))),
        (f"{form} RELEASE (holder, wake-up list)", lambda i: acquire(key(i)), lambda i: release(key(i))),
    ]


from functions import floor_key  # noqa: E402


def library_sources(before: str | None) -> dict[str, str]:
    """{name: source}: the tree's functions.lua as "now", and the one at `before` if given."""
    out = {}
    if before:
        from functions import library_at  # noqa: E402
        out[f"at {before}"] = library_at(before)
    out["now"] = (ROOT / "protocol/src/functions.lua").read_text()
    return out


def load_library(c: Conn, source: str) -> str:
    """Loads `source` as the library and as a script; returns the script's sha."""
    c.cmd("FUNCTION", "LOAD", "REPLACE", source)
    return c.cmd("SCRIPT", "LOAD", source.split("\n", 1)[1])


def functions_callgrind(opts, used: set[int]) -> dict[str, dict[str, float]]:
    """Instructions per request of each library (callgrind), one server each."""
    results: dict[str, dict[str, float]] = {}
    for name, source in library_sources(opts.before).items():
        srv = CallgrindServer(re.sub(r"[^A-Za-z0-9]+", "", name), opts.redis, "", free_port(used))
        srv.conf.write_text("".join(l + "\n" for l in srv.conf.read_text().splitlines() if not l.startswith("loadmodule")))
        try:
            srv.start(timeout=180)
            c = Conn(srv.port, timeout=600)
            sha = load_library(c, source)
            # One grant first: what a library state makes once (its CRC tables) is not counted.
            c.cmd("FCALL", "fencedlock_acquire", 2, "warm", floor_key(b"warm").decode(), TOKEN, TTL)
            c.close()
            for form in (None, sha):
                for label, prepare, commands in library_plan(form, opts.key_bytes):
                    results.setdefault(label, {})[name] = measure(srv, label, prepare, commands, opts.n, opts.annotate)
        finally:
            srv.cleanup()
    return results


def functions_usec(opts, used: set[int], rounds: int) -> dict[str, dict[str, float]]:
    """usec_per_call (INFO commandstats) of the same streams on a plain server, the libraries
    alternating within each round; medians over the rounds."""
    sources = library_sources(opts.before)
    srv = Server("usec", opts.redis, "", free_port(used))
    srv.conf.write_text("".join(l + "\n" for l in srv.conf.read_text().splitlines() if not l.startswith("loadmodule")))
    runs: dict[str, dict[str, list[float]]] = {}
    try:
        srv.start()
        c = Conn(srv.port, timeout=600)
        for r in range(rounds):
            names = list(sources) if r % 2 == 0 else list(reversed(sources))
            for name in names:
                sha = load_library(c, sources[name])
                c.cmd("FCALL", "fencedlock_acquire", 2, "warm", floor_key(b"warm").decode(), TOKEN, TTL)
                for form in (None, sha):
                    command = "fcall" if form is None else "evalsha"
                    for label, prepare, commands in library_plan(form, opts.key_bytes):
                        flush(c)
                        prepared(c, prepare, opts.n)
                        c.cmd("CONFIG", "RESETSTAT")
                        c.load((commands(i) for i in range(opts.n)), batch=2000)
                        stat = c.info("commandstats").get(f"cmdstat_{command}", "")
                        usec = float(re.search(r"usec_per_call=([0-9.]+)", stat).group(1))
                        runs.setdefault(label, {}).setdefault(name, []).append(usec)
        c.close()
    finally:
        srv.cleanup()
    return {label: {name: statistics.median(v) for name, v in by.items()} for label, by in runs.items()}


def print_library_table(title: str, results: dict[str, dict[str, float]], fmt: str) -> None:
    names = list(next(iter(results.values())))
    print(f"\n{title}")
    print(f"{'request':<44}" + "".join(f" {n:>14}" for n in names) + ("   ratio" if len(names) == 2 else ""))
    for label, by in results.items():
        row = f"{label:<44}" + "".join(f" {format(by[n], fmt):>14}" for n in names)
        if len(names) == 2:
            row += f" {by[names[1]] / by[names[0]]:>6.2f}x"
        print(row)
    for name in names:
        for form in ("FCALL", "EVALSHA"):
            new, old = results.get(f"{form} ACQUIRE (new key)"), results.get(f"{form} ACQUIRE (existing key, free)")
            if new and old:
                print(f"  {name}: {form} ACQUIRE new key / existing key: {new[name] / old[name]:.2f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=5000, help="commands per measurement")
    ap.add_argument("--annotate", default=None, help="regex of measurement labels to annotate")
    ap.add_argument("--module", default=os.environ.get("FENCEDLOCK_MODULE", str(ROOT / "target/release/libfencedlock_module.so")))
    ap.add_argument("--redis", default=os.environ.get("FENCEDLOCK_REDIS_SERVER", "redis-server"))
    ap.add_argument("--valkey", default=os.environ.get("FENCEDLOCK_VALKEY_SERVER", str(ROOT / ".cache/valkey/valkey-server")))
    ap.add_argument("--out", default=None, help="write {server: {label: instructions per command}} as JSON")
    ap.add_argument("--keep", default=None, help="copy each callgrind dump into this directory")
    ap.add_argument("--only", choices=["redis", "valkey", "functions"], default=None,
                    help="one plan; `functions` (the library) runs only when named")
    ap.add_argument("--before", default=None, help="functions: also the library at this revision")
    ap.add_argument("--key-bytes", type=int, default=24, help="functions: the length of the untagged keys (24 or more)")
    ap.add_argument("--usec", type=int, default=0, metavar="ROUNDS",
                    help="functions: also usec_per_call on a plain server, over this many rounds")
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
    if opts.only == "functions":
        used_ports: set[int] = set()
        out = {"callgrind": functions_callgrind(opts, used_ports)}
        print_library_table("instructions per request (callgrind)", out["callgrind"], ",.0f")
        if opts.usec:
            out["usec_per_call"] = functions_usec(opts, used_ports, opts.usec)
            print_library_table(f"usec_per_call (INFO commandstats, median of {opts.usec} rounds)", out["usec_per_call"], ".2f")
        if opts.out:
            Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
            Path(opts.out).write_text(json.dumps({"commands": n, "before": opts.before, **out}, indent=1))
        return 0
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
