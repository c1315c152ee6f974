#!/usr/bin/env python3
"""Memory over time for per-entity lock keys: reclaim on vs off, side by side.

The per-entity pattern (one lock key per invoice, job or user) creates keys that are locked
once or a few times and never again. Before `fencedlock.reclaim-after-ms`, every such key stayed
in the server for good. This script starts two redis-servers on 127.0.0.1 with the module:

- "on":  `fencedlock.reclaim-after-ms 1000` (idle keys go after about a second);
- "off": `fencedlock.reclaim-after-ms 4398046511104` (the maximum: never, in practice),

and drives the same load into both for a fixed time: every tick (100 ms) a fresh set of keys
`inv:<n>` is acquired (`FENCEDLOCK.ACQUIRE key token 30000`) and released at once
(`FENCEDLOCK.RELEASE key token`), pipelined over a raw RESP socket, at a fixed rate (20,000 new
keys per second into each server). Every second it samples `used_memory`, `DBSIZE` and the
reclaim fields of `INFO fencedlock` on both servers; after the load stops it keeps sampling for a
few seconds (the drain) to show what is left.

The summary gives, per server, `used_memory` at the start, at the end of the load and its peak,
and its slope (least squares, bytes/s) over the second half of the load; plus the ratio of the
end memory off / on. Memory is not timing-sensitive: a loaded machine changes the rate the
load achieves (reported) and when keys are swept, not what a key costs.

Standard library only; server helpers come from server.py. Writes JSON (see --out);
benches/report.py turns it into a table of RESULTS.md. Bounded: the load stops after
--duration seconds whatever the rate achieved, and both servers are stopped at the end, also on
error.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in benches/
sys.path.insert(0, str(Path(__file__).resolve().parent))
from server import ROOT, Conn, Server, free_port  # noqa: E402  (this directory's helpers)

RECLAIM_ON_MS = 1000
RECLAIM_OFF_MS = 1 << 42  # fencedlock.reclaim-after-ms's maximum (139 years)
TTL_MS = 30000
PREFIX = "inv:"


def log(msg: str) -> None:
    print(f"[memory-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Load: one tick = ACQUIRE + RELEASE of `count` fresh keys, one pipelined batch per server.


def tick_batch(first: int, count: int, token: str) -> bytes:
    tok = token.encode()
    acquire_tail = b"\r\n$%d\r\n%s\r\n$%d\r\n%d\r\n" % (len(tok), tok, len(str(TTL_MS)), TTL_MS)
    release_tail = b"\r\n$%d\r\n%s\r\n" % (len(tok), tok)
    pre = PREFIX.encode()
    out = []
    for n in range(first, first + count):
        key = pre + b"%d" % n
        k = b"$%d\r\n%s" % (len(key), key)
        out.append(b"*4\r\n$18\r\nFENCEDLOCK.ACQUIRE\r\n" + k + acquire_tail)
        out.append(b"*3\r\n$18\r\nFENCEDLOCK.RELEASE\r\n" + k + release_tail)
    return b"".join(out)


def read_replies(c: Conn, want: int) -> None:
    """Reads `want` single-line replies (ACQUIRE: an integer fence or nil; RELEASE: 0 or 1).
    Raises on an error reply; grants and releases are checked from INFO at the end."""
    c.read_lines(want, "load")


# ---------------------------------------------------------------------------------------------
# Samples


def sample(c: Conn, t: float, created: int) -> dict:
    mem = c.info("memory")
    fl = c.info("fencedlock")
    return {
        "t": round(t, 3),
        "keys_created": created,
        "used_memory": int(mem["used_memory"]),
        "used_memory_rss": int(mem["used_memory_rss"]),
        "dbsize": c.cmd("DBSIZE"),
        "reclaimed": int(fl["fencedlock_reclaimed"]),
        "reclaim_tracked": int(fl["fencedlock_reclaim_tracked"]),
        "reclaim_index_bytes": int(fl["fencedlock_reclaim_index_bytes"]),
    }


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over t (None with fewer than two distinct times)."""
    if len(points) < 2 or len({t for t, _ in points}) < 2:
        return None
    return statistics.linear_regression([t for t, _ in points], [y for _, y in points]).slope


def summarize(series: list[dict], duration: float, keys: int) -> dict:
    load = [s for s in series if s["phase"] == "load"]
    second_half = [s for s in load if s["t"] >= duration / 2]
    start, end, last = load[0], load[-1], series[-1]
    return {
        "used_memory_start": start["used_memory"],
        "used_memory_end": end["used_memory"],
        "used_memory_peak": max(s["used_memory"] for s in series),
        "used_memory_after_drain": last["used_memory"],
        "slope_bytes_per_s": slope([(s["t"], s["used_memory"]) for s in second_half]),
        "growth_bytes_per_key": (end["used_memory"] - start["used_memory"]) / keys if keys else None,
        "used_memory_rss_end": end["used_memory_rss"],
        "dbsize_end": end["dbsize"],
        "dbsize_after_drain": last["dbsize"],
        "reclaimed_end": end["reclaimed"],
        "reclaimed_after_drain": last["reclaimed"],
        "reclaim_tracked_end": end["reclaim_tracked"],
        "reclaim_index_bytes_end": end["reclaim_index_bytes"],
        "dbsize_peak": max(s["dbsize"] for s in series),
    }


# ---------------------------------------------------------------------------------------------


def start_server(name: str, opts, port: int, reclaim_ms: int) -> Server:
    srv = Server(name, opts.redis, opts.module, port)
    # A module config in the config file, after loadmodule, as a deployment would set it.
    srv.conf.write_text(srv.conf.read_text() + f"fencedlock.reclaim-after-ms {reclaim_ms}\n")
    return srv


def run(opts, servers: dict[str, Server]) -> dict:
    token = "%032x" % random.SystemRandom().getrandbits(128)
    load: dict[str, Conn] = {}
    probe: dict[str, Conn] = {}
    grants0: dict[str, int] = {}
    for name, srv in servers.items():
        srv.start()
        load[name], probe[name] = Conn(srv.port), Conn(srv.port)
        got = probe[name].cmd("CONFIG", "GET", "fencedlock.reclaim-after-ms")
        want = str(opts.reclaim_on_ms if name == "on" else RECLAIM_OFF_MS)
        if got != ["fencedlock.reclaim-after-ms", want]:
            raise RuntimeError(f"{name}: fencedlock.reclaim-after-ms is {got}, expected {want}")
        if probe[name].cmd("DBSIZE") != 0:
            raise RuntimeError(f"{name}: the new server is not empty")
        grants0[name] = int(probe[name].info("fencedlock")["fencedlock_grants"])
    time.sleep(0.5)  # let start-up allocations settle before the first sample

    per_tick = max(1, round(opts.rate * opts.tick))
    n_ticks = max(1, round(opts.duration / opts.tick))
    duration = n_ticks * opts.tick
    series: dict[str, list[dict]] = {name: [] for name in servers}
    created = 0
    skipped = 0  # ticks dropped because the load fell more than a second behind
    late_max = 0.0
    next_key = 1

    def take(t: float, phase: str) -> None:
        for name in servers:
            s = sample(probe[name], t, created)
            s["phase"] = phase
            series[name].append(s)

    log(
        f"load: {per_tick:,} keys per {opts.tick * 1000:.0f} ms tick ({per_tick / opts.tick:,.0f} keys/s "
        f"into each server) for {duration:.0f} s, then {opts.drain} s of drain"
    )
    t0 = time.monotonic()
    take(0.0, "load")
    next_sample = 1
    tick = 0
    while tick < n_ticks or next_sample <= duration:
        due_tick = tick * opts.tick if tick < n_ticks else float("inf")
        due_sample = float(next_sample) if next_sample <= duration else float("inf")
        wait = min(due_tick, due_sample) - (time.monotonic() - t0)
        if wait > 0:
            time.sleep(wait)
        now = time.monotonic() - t0
        if due_sample <= due_tick:
            take(now, "load")
            on, off = series["on"][-1], series["off"][-1]
            log(
                f"  t={now:5.1f}s keys {created:>10,}  on: {on['used_memory'] / 1e6:7.1f} MB, "
                f"DBSIZE {on['dbsize']:>9,}  off: {off['used_memory'] / 1e6:7.1f} MB, DBSIZE {off['dbsize']:>9,}"
            )
            next_sample += 1
            continue
        late = now - due_tick
        late_max = max(late_max, late)
        if late > 1.0:
            skipped += 1
        else:
            batch = tick_batch(next_key, per_tick, token)
            for name in servers:
                load[name].sock.sendall(batch)
            for name in servers:
                read_replies(load[name], 2 * per_tick)
            next_key += per_tick
            created += per_tick
        tick += 1
    load_s = time.monotonic() - t0

    for i in range(1, opts.drain + 1):
        wait = duration + i - (time.monotonic() - t0)
        if wait > 0:
            time.sleep(wait)
        take(time.monotonic() - t0, "drain")
    last = {name: series[name][-1] for name in servers}
    log(
        f"  drain done: on {last['on']['used_memory'] / 1e6:.1f} MB, DBSIZE {last['on']['dbsize']:,}; "
        f"off {last['off']['used_memory'] / 1e6:.1f} MB, DBSIZE {last['off']['dbsize']:,}"
    )

    checks = {}
    for name in servers:
        fl = probe[name].info("fencedlock")
        grants = int(fl["fencedlock_grants"]) - grants0[name]
        failures = int(fl["fencedlock_release_failures"])
        if grants != created or failures:
            raise RuntimeError(
                f"{name}: {grants:,} grants and {failures:,} failed releases for {created:,} keys "
                "(every ACQUIRE on a fresh key must grant, every RELEASE must end a lease)"
            )
        checks[name] = {"grants": grants, "release_failures": failures}
    if series["off"][-1]["reclaimed"] != 0:
        raise RuntimeError("the server with reclaim off reclaimed keys")
    for c in list(load.values()) + list(probe.values()):
        c.close()

    summary = {name: summarize(series[name], duration, created) for name in servers}
    on, off = summary["on"], summary["off"]
    summary["ratio_end_off_on"] = off["used_memory_end"] / on["used_memory_end"]
    summary["ratio_growth_off_on"] = (
        (off["used_memory_end"] - off["used_memory_start"]) / (on["used_memory_end"] - on["used_memory_start"])
        if on["used_memory_end"] > on["used_memory_start"]
        else None
    )
    return {
        "settings": {
            "duration_s": duration,
            "tick_s": opts.tick,
            "keys_per_tick": per_tick,
            "rate_per_s": per_tick / opts.tick,
            "drain_s": opts.drain,
            "ttl_ms": TTL_MS,
            "token_len": len(token),
            "key_pattern": f"{PREFIX}<n>",
            "reclaim_after_ms": {"on": opts.reclaim_on_ms, "off": RECLAIM_OFF_MS},
            "module": opts.module,
            "redis": opts.redis,
        },
        "keys_created": created,
        "ticks_skipped": skipped,
        "late_max_s": late_max,
        "load_elapsed_s": load_s,
        "achieved_rate_per_s": created / load_s if load_s else None,
        "checks": checks,
        "summary": summary,
        "series": series,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "target" / "bench-results" / "memory.json"))
    ap.add_argument("--module", default=os.environ.get("FENCEDLOCK_MODULE", str(ROOT / "target/release/libfencedlock_module.so")))
    ap.add_argument("--redis", default=os.environ.get("FENCEDLOCK_REDIS_SERVER", "redis-server"))
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of load (default 60)")
    ap.add_argument("--rate", type=int, default=20_000, help="new keys per second into each server (default 20000)")
    ap.add_argument("--tick", type=float, default=0.1, help="seconds between two batches (default 0.1)")
    ap.add_argument("--drain", type=int, default=5, help="seconds sampled after the load stops (default 5)")
    ap.add_argument("--reclaim-on-ms", type=int, default=RECLAIM_ON_MS, help=f"reclaim-after-ms of the 'on' server (default {RECLAIM_ON_MS})")
    ap.add_argument("--quick", action="store_true", help="a fast smoke run (10 s of load, 3 s of drain)")
    opts = ap.parse_args()
    if opts.quick:
        opts.duration, opts.drain = 10.0, 3
    if not (0 < opts.duration <= 3600 and 0 < opts.rate <= 1_000_000 and 0.01 <= opts.tick <= 1.0 and 0 <= opts.drain <= 600):
        print("memory.py: want 0 < --duration <= 3600, 0 < --rate <= 1000000, 0.01 <= --tick <= 1, 0 <= --drain <= 600", file=sys.stderr)
        return 2
    if not 0 <= opts.reclaim_on_ms < RECLAIM_OFF_MS:
        print(f"memory.py: --reclaim-on-ms must be in 0..{RECLAIM_OFF_MS - 1}", file=sys.stderr)
        return 2
    if shutil.which(opts.redis) is None:
        print(f"memory.py: {opts.redis} not found (scripts/setup installs it)", file=sys.stderr)
        return 2
    if not Path(opts.module).is_file():
        print(f"memory.py: {opts.module} is missing (cargo build --release -p fencedlock-module)", file=sys.stderr)
        return 2

    used: set[int] = set()
    servers = {
        "on": start_server("reclaim-on", opts, free_port(used), opts.reclaim_on_ms),
        "off": start_server("reclaim-off", opts, free_port(used), RECLAIM_OFF_MS),
    }
    started = time.monotonic()
    try:
        result = run(opts, servers)
    finally:
        for s in servers.values():
            s.cleanup()
    result["elapsed_s"] = time.monotonic() - started

    out = Path(opts.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    s = result["summary"]
    log(
        f"done in {result['elapsed_s']:.0f}s; {result['keys_created']:,} keys into each server "
        f"({result['achieved_rate_per_s']:,.0f}/s, {result['ticks_skipped']} ticks skipped); results in {out}"
    )
    for name in ("on", "off"):
        x = s[name]
        sl = "–" if x["slope_bytes_per_s"] is None else f"{x['slope_bytes_per_s'] / 1e3:,.1f} kB/s"
        log(
            f"  reclaim {name:<3}: used_memory start {x['used_memory_start'] / 1e6:.1f} MB, end "
            f"{x['used_memory_end'] / 1e6:.1f} MB, peak {x['used_memory_peak'] / 1e6:.1f} MB, "
            f"slope (2nd half) {sl}, DBSIZE at end {x['dbsize_end']:,}"
        )
    log(f"  end memory off / on: {s['ratio_end_off_on']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
