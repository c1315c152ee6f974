#!/usr/bin/env python3
"""How the cost grows: many waiters on one key, many lock keys, side by side with Redis's own.

Waiters (`--waiters 100,1000,10000`): on one server, for each N, three kinds of N connections
are opened in turn, each kind measured from the same baseline:

- "idle": N plain connections (one PING each), the cost of a connection alone;
- "blpop": N connections blocked in `BLPOP k 0`;
- "fencedlock": N connections blocked in `FENCEDLOCK.ACQUIRE k tok<i> 30000 BLOCK 0` behind a
  holder.

With all N blocked it reads `used_memory` (delta from the baseline / N = bytes per waiter,
connection included) and sends `--pings` unpipelined PINGs on another connection (p99, against
the same PINGs before the waiters connected). Then the chain: the holder lets go (`RELEASE`;
for BLPOP an `LPUSH`), and each served waiter passes it on at once (`RELEASE`; `LPUSH`), N
handoffs; handoffs/s from the first release to the last waiter's reply. FIFO order and rising
fences are checked on the way. After the connections close, `used_memory` is sampled until it is
back within 1 MB of the baseline (bounded by `--drain`): Redis frees a module's pooled temporary
clients at 50 per 100 ms (`modulesCron`), so a fencedlock wave takes N / 250 s to drain.

After the connections close, the memory still above the baseline is the server's pool of module
temporary clients (two per module-blocked client, see `temp_clients`): its size per client is
read twice, from the pool and from the rate `modulesCron` trims it at, and what is left of a
waiter's cost above a BLPOP waiter's once they are taken off is the module's own share.

Keys (`--keys 100000,1000000`; 10M once with `--keys 10000000`, about 4 GB and 10 minutes):
fresh `ACQUIRE` vs `SET NX PX` throughput (redis-benchmark, `-P 16`, random keys), busy
`ACQUIRE` (another token) vs `SET NX PX` on a held key, and memory per held key vs per string
with a TTL, at each size (the keys are loaded first). Then the keys are loaded again and ended
at once, each kind by a switch: the lock keys released and reclaimed (`reclaim-after-ms` 0), the
strings expired by Redis's active expiry; keys per second and the longest round trip of a PING
prober while it runs (the longest event-loop stall it saw), and `LATENCY LATEST`.

Standard library only; server helpers come from server.py. Writes JSON (see --out); report.py
turns it into RESULTS.md rows. Bounded: every wait has a deadline; servers stop at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in benches/
sys.path.insert(0, str(Path(__file__).resolve().parent))
from server import ROOT, Conn, Server, encode, free_port, run_benchmark  # noqa: E402

KEY = "growth:hot"
TTL_MS = 30000
MAXCLIENTS = 20000
SETTLE_S = 0.3
# Redis's moduleBlockClient: a reply_client and a thread_safe_ctx_client per blocked client
# (src/module.c, 7.0 and 7.4; Valkey the same); modulesCron frees 50 pooled ones per 100 ms.
TEMP_CLIENTS_PER_WAITER = 2
TEMP_CLIENTS_FREED_PER_S = 500


def log(msg: str) -> None:
    print(f"[growth-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Raw:
    """A non-blocking RESP connection that counts whole replies (integers, nil, +/-)."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setblocking(False)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.setblocking(True)
        self.sock.sendall(data)
        self.sock.setblocking(False)

    def replies(self) -> list[bytes]:
        """Reads what is there; returns the complete top-level replies (arrays flattened to their
        first line, enough for BLPOP's two-element reply)."""
        try:
            chunk = self.sock.recv(65536)
        except BlockingIOError:
            chunk = b""
        self.buf += chunk
        out = []
        while True:
            n = parse(self.buf)
            if n is None:
                break
            out.append(self.buf[:n])
            self.buf = self.buf[n:]
        return out

    def close(self) -> None:
        self.sock.close()


def parse(buf: bytes, at: int = 0) -> int | None:
    """The length of the first complete RESP2 reply at `at`, or None."""
    end = buf.find(b"\r\n", at)
    if end < 0:
        return None
    kind, line = buf[at : at + 1], buf[at + 1 : end]
    if kind in b"+-:":
        return end + 2 - at if kind else None
    if kind == b"$":
        n = int(line)
        if n < 0:
            return end + 2 - at
        return end + 2 + n + 2 - at if len(buf) >= end + 2 + n + 2 else None
    if kind == b"*":
        n, pos = int(line), end + 2
        for _ in range(max(n, 0)):
            ln = parse(buf, pos)
            if ln is None:
                return None
            pos += ln
        return pos - at
    raise RuntimeError(f"unexpected reply {buf[at:at + 40]!r}")


def used_memory(c: Conn) -> int:
    return int(c.info("memory")["used_memory"])


def wait_for(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise RuntimeError(f"timed out after {timeout}s waiting for {what}")


def tot_mem(c: Conn) -> int:
    """The sum of `CLIENT LIST`'s tot-mem: what the server accounts to its real connections."""
    return sum(int(f[8:]) for line in c.cmd("CLIENT", "LIST").splitlines() for f in line.split() if f.startswith("tot-mem="))


def ping_p99(c: Conn, n: int) -> float:
    """p99 of `n` unpipelined PING round trips, in microseconds."""
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        c.cmd("PING")
        lat.append((time.perf_counter() - t) * 1e6)
    lat.sort()
    return lat[min(len(lat) - 1, int(len(lat) * 0.99))]


def open_conns(port: int, n: int, deadline: float) -> list[Raw]:
    conns = []
    for _ in range(n):
        if time.monotonic() > deadline:
            raise RuntimeError(f"opening {n} connections took too long")
        conns.append(Raw(port))
    return conns


def drain(c: Conn, baseline: int, timeout: float) -> tuple[float, int, list[tuple[float, int]]]:
    """Seconds until used_memory is within 1 MB of `baseline` (or the timeout), the last reading,
    and every (seconds, used_memory) sample on the way."""
    t0 = time.monotonic()
    last = used_memory(c)
    samples = [(0.0, last)]
    while time.monotonic() - t0 < timeout:
        last = used_memory(c)
        samples.append((time.monotonic() - t0, last))
        if last - baseline < 1 << 20:
            break
        time.sleep(0.1)
    return time.monotonic() - t0, last, samples


def temp_clients(samples: list[tuple[float, int]], baseline: int, n: int) -> dict:
    """What the server's pool of module temporary clients holds once `n` module-blocked waiters
    are gone, counted two ways. `moduleBlockClient` takes two temporary clients per blocked
    client (`reply_client`, `thread_safe_ctx_client`) and gives them back to a pool when it is
    unblocked; `modulesCron` frees at most 50 pooled clients per 100 ms (500/s). So: the memory
    still above the baseline after the waiters' connections closed, over 2n; and the rate at
    which it falls while the pool is trimmed, over 500/s. Both are bytes per temporary client."""
    t0, m0 = samples[0]
    window = [(t, m) for t, m in samples if t - t0 <= 3.0]
    t1, m1 = window[-1]
    by_trim = (m0 - m1) / (t1 - t0) / TEMP_CLIENTS_FREED_PER_S if t1 > t0 else None
    return {
        "pooled_bytes_after_close": m0 - baseline,
        "temp_client_bytes_by_pool": (m0 - baseline) / (TEMP_CLIENTS_PER_WAITER * n),
        "temp_client_bytes_by_trim": by_trim,
    }


class Pinned:
    """This process and the server on one CPU for a chain (`cpu` None: left alone). A chain is a
    ping-pong of two processes; on two CPUs its rate depends on whether the scheduler wakes them
    on the same one or sends an interrupt to an idle one, which here flips between runs (12k or
    35k handoffs/s for the same BLPOP chain). On one CPU it measures the work per handoff."""

    def __init__(self, server_pid: int, cpu: int | None):
        self.pids, self.cpu = (0, server_pid), cpu
        self.saved: list[set[int]] = []

    def __enter__(self) -> "Pinned":
        if self.cpu is not None:
            self.saved = [os.sched_getaffinity(pid) for pid in self.pids]
            for pid in self.pids:
                os.sched_setaffinity(pid, {self.cpu})
        return self

    def __exit__(self, *exc) -> None:
        for pid, cpus in zip(self.pids, self.saved):
            os.sched_setaffinity(pid, cpus)


PIN = {"server_pid": 0, "cpu": None}


def chain(conns: list[Raw], start, on_reply, n: int, timeout: float) -> float:
    """Runs a handoff chain over `conns` (each expects exactly one blocked reply): `start()` lets
    go; `on_reply(i, reply)` is called for every waiter's reply and passes it on. Returns
    handoffs per second (all `n` must be served within `timeout`), pinned as `PIN` says."""
    with Pinned(PIN["server_pid"], PIN["cpu"]):
        return run_chain(conns, start, on_reply, n, timeout)


def run_chain(conns: list[Raw], start, on_reply, n: int, timeout: float) -> float:
    sel = selectors.DefaultSelector()
    for i, r in enumerate(conns):
        sel.register(r.sock, selectors.EVENT_READ, i)
    done = 0
    t0 = time.perf_counter()
    start()
    deadline = time.monotonic() + timeout
    while done < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"chain stalled: {done} of {n} served in {timeout}s")
        for key, _ in sel.select(timeout=1.0):
            i = key.data
            for reply in conns[i].replies():
                done += on_reply(i, reply)
    elapsed = time.perf_counter() - t0
    sel.close()
    return n / elapsed


def passed_on(conn: Raw, reply: bytes) -> int:
    """A BLPOP waiter's turn: its element (an array) is passed on with an LPUSH; the LPUSH's
    own reply (an integer) is not a handoff."""
    if reply.startswith(b"*"):
        conn.send(encode("LPUSH", KEY, "x"))
        return 1
    if not reply.startswith(b":"):
        raise RuntimeError(f"BLPOP waiter: unexpected {reply!r}")
    return 0


def block_all(ctl: Conn, kind: str, holder: Raw, conns: list[Raw]) -> None:
    """Blocks every connection on KEY (behind `holder` for fencedlock) and waits until they are."""
    ctl.cmd("DEL", KEY)
    if kind == "fencedlock":
        holder.send(encode("FENCEDLOCK.ACQUIRE", KEY, "holder", TTL_MS))
        wait_for(holder.replies, 10, "the holder's grant")
    for i, r in enumerate(conns):
        r.send(encode("BLPOP", KEY, 0) if kind == "blpop" else encode("FENCEDLOCK.ACQUIRE", KEY, f"tok{i}", TTL_MS, "BLOCK", 0))
    n = len(conns)
    wait_for(lambda: int(ctl.info("clients")["blocked_clients"]) >= n, 60, f"{n} blocked")


def blpop_chain(ctl: Conn, holder: Raw, conns: list[Raw]) -> float:
    rate = chain(
        conns, lambda: holder.send(encode("LPUSH", KEY, "x")), lambda i, reply: passed_on(conns[i], reply), len(conns), 60
    )
    wait_for(holder.replies, 10, "the first LPUSH's reply")
    return rate


def fencedlock_chain(ctl: Conn, holder: Raw, conns: list[Raw]) -> float:
    """The chain of RELEASEs, checked: granted in arrival order with rising fences."""
    n = len(conns)
    order: list[tuple[int, int]] = []
    was_granted = [False] * n

    def granted(i: int, reply: bytes) -> int:
        if reply.startswith(b":") and not was_granted[i]:
            was_granted[i] = True
            order.append((i, int(reply[1:-2])))
            conns[i].send(encode("FENCEDLOCK.RELEASE", KEY, f"tok{i}"))
            return 0
        if reply != b":1\r\n":
            raise RuntimeError(f"waiter {i}: unexpected {reply!r}")
        return 1

    rate = chain(conns, lambda: holder.send(encode("FENCEDLOCK.RELEASE", KEY, "holder")), granted, n, 60)
    wait_for(holder.replies, 10, "the holder's release reply")
    fifo = [i for i, _ in order] == list(range(n))
    rising = all(a[1] < b[1] for a, b in zip(order, order[1:]))
    if not (fifo and rising):
        raise RuntimeError(f"{n} waiters: FIFO {fifo}, rising fences {rising}")
    return rate


def waiters_round(port: int, n: int, pings: int, drain_s: float, settle: float, chains: int) -> dict:
    ctl = Conn(port)
    ctl.cmd("FLUSHALL")
    time.sleep(SETTLE_S)
    out: dict = {"waiters": n}
    deadline = time.monotonic() + 120
    for kind in ("idle", "blpop", "fencedlock"):
        ctl.cmd("DEL", KEY)
        time.sleep(SETTLE_S)
        base = used_memory(ctl)
        base_visible = tot_mem(ctl)
        p99_before = ping_p99(ctl, pings)
        holder = Raw(port)
        conns = open_conns(port, n, deadline)
        if kind == "idle":
            for r in conns:
                r.send(encode("PING"))
            for r in conns:
                wait_for(r.replies, 10, "PONG")
            wait_for(lambda: int(ctl.info("clients")["connected_clients"]) >= n + 2, 30, "connections")
        else:
            block_all(ctl, kind, holder, conns)
        time.sleep(SETTLE_S)
        fresh = used_memory(ctl)
        # Idle connections' reply buffers shrink once their peak resets (clientsCron, every
        # reply-buffer-peak-reset-time = 5 s): the steady state is read after that.
        time.sleep(settle)
        mem = used_memory(ctl)
        visible = tot_mem(ctl)
        p99_during = ping_p99(ctl, pings)
        row = {
            "bytes_per_conn_fresh": (fresh - base) / n,
            "bytes_per_conn": (mem - base) / n,
            "client_list_tot_mem_per_conn": (visible - base_visible) / n,
            "ping_p99_us_before": p99_before,
            "ping_p99_us_during": p99_during,
        }
        if kind != "idle":
            # A single chain is at the mercy of this shared machine's scheduler: run `chains`
            # (the waiters block again between them) and keep the median.
            rates = []
            for rep in range(chains):
                if rep:
                    block_all(ctl, kind, holder, conns)
                rates.append((blpop_chain if kind == "blpop" else fencedlock_chain)(ctl, holder, conns))
            row["handoffs_per_s_runs"] = rates
            row["handoffs_per_s"] = statistics.median(rates)
            if kind == "fencedlock":
                row["fifo_and_rising"] = True
        for r in conns:
            r.close()
        holder.close()
        wait_for(lambda: int(ctl.info("clients")["connected_clients"]) <= 2, 30, "disconnects")
        row["drain_s"], row["after_drain_delta"], samples = drain(ctl, base, drain_s)
        row["after_drain_delta"] -= base
        if kind == "fencedlock":
            row.update(temp_clients(samples, base, n))
        out[kind] = row
        log(f"{n} {kind}: {row}")
    ctl.close()
    f, b, i = out["fencedlock"], out["blpop"], out["idle"]
    # What is left of a fencedlock waiter's cost once a BLPOP waiter's and the server's two
    # temporary clients are taken off: the module's own queue entry and blocked-client handle.
    # The pool's size is the estimate used (the trim rate needs a drain of seconds: 1,000+ waiters).
    temp = f["temp_client_bytes_by_pool"]
    out["ratios"] = {
        "memory_per_waiter": f["bytes_per_conn"] / b["bytes_per_conn"],
        "temp_clients_per_waiter_bytes": TEMP_CLIENTS_PER_WAITER * temp,
        "module_share_per_waiter": f["bytes_per_conn"] - b["bytes_per_conn"] - TEMP_CLIENTS_PER_WAITER * temp,
        "above_connection_fencedlock": f["bytes_per_conn"] - i["bytes_per_conn"],
        "above_connection_blpop": b["bytes_per_conn"] - i["bytes_per_conn"],
        "handoff_chain": f["handoffs_per_s"] / b["handoffs_per_s"],
        "ping_p99_during_vs_before": f["ping_p99_us_during"] / f["ping_p99_us_before"],
        "blpop_ping_p99_during_vs_before": b["ping_p99_us_during"] / b["ping_p99_us_before"],
    }
    return out


class Prober(threading.Thread):
    """Unpipelined PINGs on a connection of its own until stopped (at most `limit_s`): its
    longest round trip is the longest the event loop was kept from answering."""

    def __init__(self, port: int, limit_s: float):
        super().__init__(daemon=True)
        self.port, self.limit_s = port, limit_s
        self.lat_us: list[float] = []
        self.done = threading.Event()

    def run(self) -> None:
        c = Conn(self.port)
        deadline = time.monotonic() + self.limit_s
        while not self.done.is_set() and time.monotonic() < deadline:
            t = time.perf_counter()
            c.cmd("PING")
            self.lat_us.append((time.perf_counter() - t) * 1e6)
        c.close()

    def stop(self) -> dict:
        self.done.set()
        self.join(timeout=30)
        lat = sorted(self.lat_us) or [0.0]
        return {"ping_max_us": lat[-1], "ping_p99_us": lat[min(len(lat) - 1, int(len(lat) * 0.99))], "pings": len(self.lat_us)}


def latency_latest(c: Conn) -> dict[str, int]:
    """`LATENCY LATEST`'s worst latency per event (ms), e.g. Redis's own `expire-cycle`."""
    return {str(ev[0]): int(ev[3]) for ev in c.cmd("LATENCY", "LATEST") or []}


def reclaimed_total(c: Conn) -> int:
    """The module's `reclaimed` counter (INFO prefixes a module's fields with its name)."""
    return int(c.info("fencedlock")["fencedlock_reclaimed"])


def reclaim_round(c: Conn, port: int, k: int, token: str, timeout: float) -> dict:
    """The `k` held lock keys released and reclaimed by the module's sweep, against `k` strings
    expired by Redis's active expiry, each with a PING prober running: keys per second and the
    longest PING while it happens. Both start from a switch thrown after the keys are ready
    (`fencedlock.reclaim-after-ms` 0; `DEBUG SET-ACTIVE-EXPIRE 1` after `PEXPIRE … 1` with
    active expiry off), so neither measures the loading of its keys."""
    out: dict = {}
    # Only these keys: the fresh-key runs left random keys with leases and TTLs behind.
    c.cmd("FLUSHALL")
    load(c, (("FENCEDLOCK.ACQUIRE", f"l:{n:012d}", token, 3_600_000) for n in range(k)))
    load(c, (("SET", f"s:{n:012d}", token, "PX", 3_600_000) for n in range(k)))
    c.cmd("CONFIG", "SET", "latency-monitor-threshold", "1")
    load(c, (("FENCEDLOCK.RELEASE", f"l:{n:012d}", token) for n in range(k)))
    before = reclaimed_total(c)
    c.cmd("LATENCY", "RESET")
    prober = Prober(port, timeout + 10)
    prober.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    c.cmd("CONFIG", "SET", "fencedlock.reclaim-after-ms", "0")

    wait_for(lambda: reclaimed_total(c) - before >= k, timeout, f"{k} lock keys reclaimed")
    out["reclaim"] = {"keys_per_s": k / (time.monotonic() - t0), **prober.stop(), "latency_latest_ms": latency_latest(c)}
    c.cmd("CONFIG", "SET", "fencedlock.reclaim-after-ms", "600000")

    c.cmd("DEBUG", "SET-ACTIVE-EXPIRE", "0")
    load(c, (("PEXPIRE", f"s:{n:012d}", 1) for n in range(k)))
    time.sleep(0.05)
    c.cmd("LATENCY", "RESET")
    prober = Prober(port, timeout + 10)
    prober.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    c.cmd("DEBUG", "SET-ACTIVE-EXPIRE", "1")
    wait_for(lambda: int(c.cmd("DBSIZE")) == 0, timeout, f"{k} strings expired")
    out["expiry"] = {"keys_per_s": k / (time.monotonic() - t0), **prober.stop(), "latency_latest_ms": latency_latest(c)}
    c.cmd("CONFIG", "SET", "latency-monitor-threshold", "0")
    return out


def load(c: Conn, cmds, batch: int = 20000) -> None:
    c.load((encode(*args) for args in cmds), batch)


def keys_round(port: int, k: int, requests: int, token: str) -> dict:
    """At k held keys of each kind: memory per key, fresh and busy throughput vs SET NX PX."""
    c = Conn(port, timeout=300)
    c.cmd("FLUSHALL")
    time.sleep(SETTLE_S)
    base = used_memory(c)
    load(c, (("FENCEDLOCK.ACQUIRE", f"l:{n:012d}", token, 3_600_000) for n in range(k)))
    lock_mem = used_memory(c) - base
    mid = used_memory(c)
    load(c, (("SET", f"s:{n:012d}", token, "NX", "PX", 3_600_000) for n in range(k)))
    string_mem = used_memory(c) - mid
    out: dict = {"keys": k, "bytes_per_lock_key": lock_mem / k, "bytes_per_string_key": string_mem / k}
    other = "f" * 32
    runs = {
        # Fresh: random names in a space far larger than the run, beside the k held keys.
        "acquire_fresh": (100_000_000_000, ["FENCEDLOCK.ACQUIRE", "n:__rand_int__", token, "30000"]),
        "set_fresh": (100_000_000_000, ["SET", "m:__rand_int__", token, "NX", "PX", "30000"]),
        # Busy: another token on a held key (nil on both sides, nothing written).
        "acquire_busy": (k, ["FENCEDLOCK.ACQUIRE", "l:__rand_int__", other, "30000"]),
        "set_busy": (k, ["SET", "s:__rand_int__", other, "NX", "PX", "30000"]),
    }
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for rnd in range(3):
        names = list(runs) if rnd % 2 == 0 else list(reversed(runs))
        for name in names:
            space, args = runs[name]
            rates[name].append(run_benchmark(port, 16, requests, space, args))
    for name, rs in rates.items():
        out[name] = statistics.median(rs)
    out["ratios"] = {
        "memory_per_key": out["bytes_per_lock_key"] / out["bytes_per_string_key"],
        "acquire_fresh": statistics.median(a / b for a, b in zip(rates["acquire_fresh"], rates["set_fresh"])),
        "acquire_busy": statistics.median(a / b for a, b in zip(rates["acquire_busy"], rates["set_busy"])),
    }
    out.update(reclaim_round(c, port, k, token, max(60.0, k / 20_000)))
    r, e = out["reclaim"], out["expiry"]
    out["ratios"]["reclaim_rate"] = r["keys_per_s"] / e["keys_per_s"]
    out["ratios"]["longest_stall"] = r["ping_max_us"] / e["ping_max_us"] if e["ping_max_us"] else None
    log(f"{k} keys: {out}")
    c.cmd("FLUSHALL")
    c.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "target" / "bench-results" / "growth.json"))
    ap.add_argument("--module", default=os.environ.get("FENCEDLOCK_MODULE", str(ROOT / "target/release/libfencedlock_module.so")))
    ap.add_argument("--server", default=os.environ.get("FENCEDLOCK_REDIS_SERVER", "redis-server"))
    ap.add_argument("--waiters", default="100,1000,10000")
    ap.add_argument("--keys", default="100000,1000000")
    ap.add_argument("--pings", type=int, default=2000)
    ap.add_argument("--requests", type=int, default=200_000, help="requests per redis-benchmark run")
    ap.add_argument("--settle", type=float, default=7.0, help="seconds before the steady-state read")
    ap.add_argument("--drain", type=float, default=60.0, help="longest wait for memory to return")
    ap.add_argument("--chains", type=int, default=3, help="handoff chains per kind and size (the median is kept)")
    ap.add_argument("--chain-cpu", default="last", help="CPU to run each chain on, server and client both "
                    "('last': the highest this process may use; 'none': unpinned, see Pinned)")
    ap.add_argument("--quick", action="store_true", help="1,000 waiters, 100k keys (about 40 s)")
    opts = ap.parse_args()
    if opts.quick:
        opts.waiters, opts.keys, opts.pings, opts.requests, opts.drain = "1000", "100000", 500, 50_000, 5
        opts.settle = 6.0
    waiters = [int(x) for x in opts.waiters.split(",") if x]
    keys = [int(x) for x in opts.keys.split(",") if x]
    token = "%032x" % int.from_bytes(os.urandom(16), "big")
    srv = Server("growth", opts.server, opts.module, free_port(set()))
    with open(srv.conf, "a") as f:
        # DEBUG SET-ACTIVE-EXPIRE (see reclaim_round); loopback only.
        f.write(f"maxclients {MAXCLIENTS}\nenable-debug-command local\n")
    started = time.monotonic()
    result: dict = {"server": opts.server, "waiters": [], "keys": []}
    try:
        srv.start()
        cpus = sorted(os.sched_getaffinity(0))
        PIN["server_pid"] = srv.proc.pid
        PIN["cpu"] = None if opts.chain_cpu == "none" else cpus[-1] if opts.chain_cpu == "last" else int(opts.chain_cpu)
        result["chain_cpu"] = PIN["cpu"]
        c = Conn(srv.port)
        result["server_version"] = c.info("server").get("redis_version")
        c.close()
        for n in waiters:
            result["waiters"].append(waiters_round(srv.port, n, opts.pings, opts.drain, opts.settle, opts.chains))
        for k in keys:
            result["keys"].append(keys_round(srv.port, k, opts.requests, token))
    finally:
        srv.stop()
        srv.cleanup()
    result["seconds"] = time.monotonic() - started
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps(result, indent=2))
    log(f"done in {result['seconds']:.0f}s, wrote {opts.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
