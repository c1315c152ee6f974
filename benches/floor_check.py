#!/usr/bin/env python3
"""What the Functions library's floor checks cost (issue 30), in instructions per request
counted by callgrind (deterministic, unlike timings on a shared machine): the library as it
was before the checks (version 4, BEFORE_REV, read from git; it trusted any floor key) against
the current one, both forms (FCALL and the script through EVALSHA), on one Redis server each
without the module.

Every request is a real grant (`fencedlock_acquire 2 key floor token ttl`) on realistic keys
without a hash tag (`invoice:inv_%012d`, 24 bytes), each naming its own slot's floor key:

- fresh: every key new, so the check finds no key it checked before (the library computes the
  CRC16 of the key): the worst case on a standalone server;
- repeated: 1,000 keys granted and released over and over (ACQUIRE and RELEASE both check;
  the library remembers the keys it checked, the script cannot).

    benches/floor_check.py                  # table and ratios (about 3 minutes)
    benches/floor_check.py -n 2000          # fewer requests per measurement
    benches/floor_check.py --before 9fac37b # against another revision's library (here
                                            # version 6, before ACQUIREALL split ACQUIRE)

Standard library plus valgrind (scripts/setup --bench). Servers on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in benches/
sys.path.insert(0, str(Path(__file__).resolve().parent))
from functions import BEFORE_REV, floor_key, library_at  # noqa: E402
from profile import CallgrindServer, measure  # noqa: E402
from server import LOADED_TTL_MS, ROOT, Conn, encode, free_port  # noqa: E402

TOKEN = "0123456789abcdef0123456789abcdef"
HOT = 1000


def key(i: int) -> str:
    return f"invoice:inv_{i:012d}"


def request(form: dict, function: str, k: str, *args) -> bytes:
    """`function` on `k` and its floor, as the form sends it."""
    floor = floor_key(k.encode())
    if form["sha"] is None:
        return encode("FCALL", function, 2, k, floor, *args)
    return encode("EVALSHA", form["sha"], 2, k, floor, function, *args)


def plan(form: dict):
    """(label, prepare, commands): fresh grants, then grant/release pairs on HOT keys (one
    measured command is a grant or a release)."""

    def fresh(i):
        return request(form, "fencedlock_acquire", key(i), TOKEN, LOADED_TTL_MS)

    def repeated(i):
        k = key((i // 2) % HOT)
        if i % 2 == 0:
            return request(form, "fencedlock_acquire", k, TOKEN, LOADED_TTL_MS)
        return request(form, "fencedlock_release", k, TOKEN)

    def warm(i):
        # Every HOT key granted and released once first: the library's memory of checked
        # keys is then as a long-running service's is.
        return repeated(i % (2 * HOT))

    return [("acquire, fresh key", None, fresh), ("acquire/release, repeated key", warm, repeated)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=5000, help="requests per measurement")
    ap.add_argument("--redis", default=os.environ.get("FENCEDLOCK_REDIS_SERVER", "redis-server"))
    ap.add_argument("--out", default=str(ROOT / "target" / "bench-results" / "floor_check.json"))
    ap.add_argument("--before", default=BEFORE_REV, help="the revision whose library is compared with now")
    opts = ap.parse_args()
    before = f"at {opts.before}"
    libraries = {before: library_at(opts.before), "now": (ROOT / "protocol/src/functions.lua").read_text()}
    used: set[int] = set()
    results: dict[str, dict[str, float]] = {}
    for name, source in libraries.items():
        srv = CallgrindServer(name.replace(" ", ""), opts.redis, "", free_port(used))
        lines = [line for line in srv.conf.read_text().splitlines() if not line.startswith("loadmodule")]
        srv.conf.write_text("\n".join(lines) + "\n")
        srv.start()
        try:
            c = Conn(srv.port, timeout=600)
            c.cmd("FUNCTION", "LOAD", "REPLACE", source)
            sha = c.cmd("SCRIPT", "LOAD", source.split("\n", 1)[1])
            c.close()
            for form in ({"name": "FCALL", "sha": None}, {"name": "EVALSHA", "sha": sha}):
                for label, prepare, commands in plan(form):
                    full = f"{form['name']} {label}"
                    # `measure` flushes the server first: every measurement starts empty.
                    results.setdefault(full, {})[name] = measure(srv, full, prepare, commands, opts.n, None)
        finally:
            srv.cleanup()
    print(f"\n{'request':<44} {before:>12} {'now':>12} {'ratio':>7}")
    for label, by in results.items():
        print(f"{label:<44} {by[before]:>12,.0f} {by['now']:>12,.0f} {by['now'] / by[before]:>6.2f}x")
    out = Path(opts.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"n": opts.n, "before_rev": opts.before, "instructions": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
