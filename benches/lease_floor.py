#!/usr/bin/env python3
"""What a fenced lease costs the server at the least, beside redlock's (issue #44).

The Node lease on the Functions library missed its target (≤ 1.0× `redlock` 4) by the
library's server time per call. This measures how much of that any fenced lease on `FCALL`
must pay, and how much each of the library's guarantees adds, with a ladder of throwaway
functions (`lease_floor.lua`, a library of its own loaded beside fencedlock's), each a lease's two calls:

  redlock           redlock 4.2's own scripts through EVALSHA (acquire: EXISTS, SET PX;
                    release: GET, DEL) -- the incumbent.
  redlock (FCALL)   the same two bodies as functions: what FCALL itself costs beside EVALSHA.
  fenced            the least a fenced lease does: read the key, advance a fence (INCR of the
                    slot's floor, so fences never repeat when the key is gone), write the
                    holder with its expiry; release: compare and delete.
  + epochs          the fence also starts a new epoch on another server process (a restart or
                    a promoted replica must not repeat fences its predecessor issued and did
                    not replicate): TIME, the floor as a hash of fence and run (HMGET, HSET).
  + lock record     the key a hash of the library's shape: its `kind` (an application's key is
                    refused, never overwritten), fence and holder list (cmsgpack), expiring a
                    retention after its lease (PEXPIREAT): a deleted or expired key's fence is
                    still above it; release rewrites the holders and the expiry.
  library           the library itself (protocol/src/functions.lua, or `--library FILE`), as
                    the clients send it (acquire with the floor; release with the wake-up list):
                    adds parsing and checking every argument, the floor proof, semaphores,
                    read-write leases, labels and the waiters' marks.

Each acquire is on a key that does not exist (`--existing`: a key granted and released before),
each release on the lease just granted. Reports instructions per call (callgrind, one server,
deterministic) and `INFO commandstats` usec_per_call on a plain server (rounds alternating the
rungs; medians), each as a multiple of redlock's EVALSHA.

    python3 benches/lease_floor.py                 # both, 2,000 leases a rung
    python3 benches/lease_floor.py --no-callgrind --rounds 7

Standard library (valgrind for the instructions). Servers on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
from functions import floor_key, wake_key  # noqa: E402
from profile import TOKEN, TTL, CallgrindServer, measure  # noqa: E402
from server import ROOT, Conn, Server, encode, flush, free_port  # noqa: E402

# redlock 4.2's scripts (node_modules/redlock/redlock.js) for one key.
REDLOCK_ACQUIRE = (
    "for i, key in ipairs(KEYS) do if redis.call('exists', key) == 1 then return 0 end end "
    "for i, key in ipairs(KEYS) do redis.call('set', key, ARGV[1], 'PX', ARGV[2]) end "
    "return #KEYS"
)
REDLOCK_RELEASE = (
    "local count = 0 "
    "for i, key in ipairs(KEYS) do if redis.call('get', key) == ARGV[1] then "
    "redis.pcall('del', key) count = count + 1 end end "
    "return count"
)

# The ladder's functions (a library of its own, shared with lease_floor.mjs).
LADDER = (Path(__file__).resolve().parent / "lease_floor.lua").read_text()


def key(i: int) -> str:
    return f"invoice:inv_{i:012d}"


def rungs(shas: dict[str, str]) -> list[tuple[str, object, object]]:
    """(name, acquire(i), release(i)): each a function of the lease's number to its request."""
    floor = lambda i: floor_key(key(i).encode()).decode()  # noqa: E731
    wake = lambda i: wake_key("fencedlock:fn-wake:{", key(i).encode()).decode()  # noqa: E731
    counter = lambda i: floor(i) + ":n"  # noqa: E731  (a string counter, not the library's hash)

    def fcall(fn, keys, *args):
        return encode("FCALL", fn, len(keys), *keys, *args)

    return [
        ("redlock", lambda i: encode("EVALSHA", shas["acquire"], 1, key(i), TOKEN, TTL),
         lambda i: encode("EVALSHA", shas["release"], 1, key(i), TOKEN)),
        ("redlock (FCALL)", lambda i: fcall("redlock_acquire", [key(i)], TOKEN, TTL),
         lambda i: fcall("redlock_release", [key(i)], TOKEN)),
        ("fenced", lambda i: fcall("fenced_acquire", [key(i), counter(i)], TOKEN, TTL),
         lambda i: fcall("fenced_release", [key(i)], TOKEN)),
        ("+ epochs", lambda i: fcall("epochs_acquire", [key(i), floor(i)], TOKEN, TTL),
         lambda i: fcall("fenced_release", [key(i)], TOKEN)),
        ("+ lock record", lambda i: fcall("record_acquire", [key(i), floor(i)], TOKEN, TTL),
         lambda i: fcall("record_release", [key(i)], TOKEN)),
        ("library", lambda i: fcall("fencedlock_acquire", [key(i), floor(i)], TOKEN, TTL),
         lambda i: fcall("fencedlock_release", [key(i), floor(i), wake(i)], TOKEN)),
    ]


def load(c: Conn, library: str) -> dict[str, str]:
    c.cmd("FUNCTION", "FLUSH")
    c.cmd("FUNCTION", "LOAD", "REPLACE", LADDER)
    c.cmd("FUNCTION", "LOAD", "REPLACE", library)
    # One grant first: the library's one-time tables are not counted.
    c.cmd("FCALL", "fencedlock_acquire", 2, "warm", floor_key(b"warm").decode(), TOKEN, TTL)
    return {"acquire": c.cmd("SCRIPT", "LOAD", REDLOCK_ACQUIRE), "release": c.cmd("SCRIPT", "LOAD", REDLOCK_RELEASE)}


def plain(srv: Server) -> Server:
    srv.conf.write_text("".join(l + "\n" for l in srv.conf.read_text().splitlines() if not l.startswith("loadmodule")))
    return srv


def instructions(opts, library: str) -> dict[str, tuple[float, float]]:
    srv = plain(CallgrindServer("ladder", opts.redis, "", free_port(set())))
    out = {}
    try:
        srv.start(timeout=180)
        c = Conn(srv.port, timeout=600)
        shas = load(c, library)
        for name, acquire, release in rungs(shas):
            before = [acquire, release] if opts.existing else None
            a = measure(srv, f"{name} acquire", before, acquire, opts.n, None)
            r = measure(srv, f"{name} release", acquire, release, opts.n, None)
            out[name] = (a, r)
        c.close()
    finally:
        srv.cleanup()
    return out


def usec(opts, library: str) -> dict[str, tuple[float, float]]:
    srv = plain(Server("ladder", opts.redis, "", free_port(set())))
    runs: dict[str, list[tuple[float, float]]] = {}
    try:
        srv.start()
        c = Conn(srv.port, timeout=600)
        shas = load(c, library)
        ladder = rungs(shas)
        for r in range(opts.rounds):
            for name, acquire, release in ladder if r % 2 == 0 else list(reversed(ladder)):
                command = "evalsha" if name == "redlock" else "fcall"
                got = []
                for prepare, stream in (([acquire, release] if opts.existing else [], acquire), ([acquire], release)):
                    flush(c)
                    for p in prepare:
                        c.load((p(i) for i in range(opts.n)), batch=2000)
                    c.cmd("CONFIG", "RESETSTAT")
                    c.load((stream(i) for i in range(opts.n)), batch=2000)
                    stat = c.info("commandstats").get(f"cmdstat_{command}", "")
                    got.append(float(re.search(r"usec_per_call=([0-9.]+)", stat).group(1)))
                runs.setdefault(name, []).append(tuple(got))
        c.close()
    finally:
        srv.cleanup()
    # Medians of the per-round ratios to redlock, and of the µs.
    out = {}
    for name, rows in runs.items():
        out[name] = tuple(statistics.median(row[k] for row in rows) for k in (0, 1))
        ratio = [statistics.median(rows[i][k] / runs["redlock"][i][k] for i in range(len(rows))) for k in (0, 1)]
        lease = statistics.median(sum(rows[i]) / sum(runs["redlock"][i]) for i in range(len(rows)))
        out[name] = (*out[name], *ratio, lease)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=2000, help="leases per rung (and per round)")
    ap.add_argument("--rounds", type=int, default=7, help="usec_per_call rounds")
    ap.add_argument("--existing", action="store_true", help="acquire keys granted and released before")
    ap.add_argument("--no-callgrind", action="store_true")
    ap.add_argument("--no-usec", action="store_true")
    ap.add_argument("--library", default=str(ROOT / "protocol/src/functions.lua"))
    ap.add_argument("--redis", default="redis-server")
    opts = ap.parse_args()
    library = Path(opts.library).read_text()
    if not opts.no_callgrind:
        ins = instructions(opts, library)
        base = ins["redlock"]
        print("\ninstructions per call (callgrind) | acquire | release | lease ÷ redlock")
        for name, (a, r) in ins.items():
            print(f"{name:<18} {a:>10,.0f} {r:>10,.0f} {(a + r) / sum(base):>8.2f}x")
    if not opts.no_usec:
        us = usec(opts, library)
        print(f"\nusec_per_call (INFO commandstats, medians of {opts.rounds} rounds) | acquire | release | "
              "÷ redlock: acquire, release, lease")
        for name, (a, r, ra, rr, rl) in us.items():
            print(f"{name:<18} {a:>7.2f} {r:>7.2f}   {ra:>5.2f}x {rr:>5.2f}x {rl:>5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
