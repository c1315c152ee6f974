#!/usr/bin/env python3
"""Server-side benchmarks: fencedlock's commands against what users run instead.

Drives `redis-benchmark` (50 clients, unpipelined and pipelined with -P 16) against a
redis-server and a valkey-server that this script starts on 127.0.0.1 with the module
loaded. Every comparison is measured in the same run, alternating the members of a group
(and their order from round to round), and reported as the median of the per-round ratios.

Fairness choices (they matter for the "consuming" commands):
- ACQUIRE vs SET NX PX: both on fresh keys (`-r 100000000`, FLUSHALL before each run), with
  the same 32-hex-char token and a 30 s lease.
- RELEASE / CAD / EVALSHA compare-and-delete / DELIFEQ consume the key they hit, so each run
  starts from K freshly loaded keys whose value (or holder) matches, and sends n requests to
  random keys among them: both sides of a pair do real work on the same fraction of requests
  (printed as "real work"); the rest hit already-consumed keys (not held / missing).
- RENEW vs the renew script: both on held keys with the matching token (steady state).
- Read-write locks: ACQUIRE … SHARED and the write ACQUIRE vs a Redisson-style script of each
  (a hash with the mode and per-holder counts, a timeout key per read hold, no fence), all on
  fresh keys, so each request is one grant.
- "token mismatch" rows: RELEASE / CAD vs the EVALSHA script with a wrong token on existing
  keys: both read and compare, neither writes.

Short runs and several rounds beat long runs on a shared machine: load bursts last seconds, and
a burst then spoils one round's ratio instead of shifting a whole comparison.

Standard library only. Writes JSON (see --out); benches/report.py turns it into RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = 50
PIPELINES = (1, 16)
# Lease / PX used by the timed commands, and the long one for loaded keys (outlives the run).
TTL_MS = 30000
LOADED_TTL_MS = 3_600_000
MISMATCH = "ffffffffffffffffffffffffffffffff"

CAD_LUA = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) else return 0 end"
)
RENEW_LUA = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
)
# A read-write lock as Redisson-style libraries keep one (our own script, in their shape): a
# hash with the mode and a reentry count per holder, a timeout key per read hold, no fence.
# nil: granted; otherwise the time left on the key.
RW_READ_LUA = (
    "local mode = redis.call('hget', KEYS[1], 'mode') "
    "if mode == false or mode == 'read' then "
    "  local n = redis.call('hincrby', KEYS[1], ARGV[1], 1) "
    "  if mode == false then redis.call('hset', KEYS[1], 'mode', 'read') end "
    "  redis.call('set', KEYS[1] .. ':' .. ARGV[1] .. ':timeout:' .. n, 1, 'px', ARGV[2]) "
    "  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then redis.call('pexpire', KEYS[1], ARGV[2]) end "
    "  return false "
    "end "
    "return redis.call('pttl', KEYS[1])"
)
# Several keys all or nothing, as hand-rolled scripts take them (our own script): nil when any
# key exists, else every key set with a ttl; no fences.
MULTI_LUA = (
    "for i = 1, #KEYS do if redis.call('exists', KEYS[i]) == 1 then return false end end "
    "for i = 1, #KEYS do redis.call('set', KEYS[i], ARGV[1], 'px', ARGV[2]) end "
    "return #KEYS"
)
RW_WRITE_LUA = (
    "local mode = redis.call('hget', KEYS[1], 'mode') "
    "if mode == false then "
    "  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[1], 1) "
    "  redis.call('pexpire', KEYS[1], ARGV[2]) "
    "  return false "
    "end "
    "if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[1]) == 1 then "
    "  redis.call('hincrby', KEYS[1], ARGV[1], 1) "
    "  redis.call('pexpire', KEYS[1], ARGV[2]) "
    "  return false "
    "end "
    "return redis.call('pttl', KEYS[1])"
)


def log(msg: str) -> None:
    print(f"[server-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# A minimal RESP2 client: enough for setup, INFO, MEMORY USAGE and pipelined loading.


class RespError(Exception):
    pass


def encode(*args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Conn:
    def __init__(self, port: int, timeout: float = 120.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rf = self.sock.makefile("rb")

    def close(self) -> None:
        self.rf.close()
        self.sock.close()

    def _read(self):
        line = self.rf.readline()
        if not line:
            raise ConnectionError("server closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.rf.read(n + 2)[:-2]
            return data.decode(errors="replace")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise ConnectionError(f"bad reply line {line!r}")

    def cmd(self, *args):
        self.sock.sendall(encode(*args))
        reply = self._read()
        if isinstance(reply, RespError):
            raise reply
        return reply

    def info(self, section: str) -> dict[str, str]:
        out = {}
        for line in self.cmd("INFO", section).splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                out[k] = v
        return out

    def load(self, commands, batch: int = 20000) -> int:
        """Sends pre-encoded commands whose replies are single lines, in bounded batches.
        Raises on any error reply. Returns the number of replies read."""
        total = 0
        buf: list[bytes] = []
        for c in commands:
            buf.append(c)
            if len(buf) == batch:
                total += self._flush(buf)
                buf = []
        if buf:
            total += self._flush(buf)
        return total

    def _flush(self, buf: list[bytes]) -> int:
        self.sock.sendall(b"".join(buf))
        self.read_lines(len(buf), "loading")
        return len(buf)

    def read_lines(self, want: int, what: str) -> None:
        """Reads `want` single-line replies of a pipeline; raises on the first error reply."""
        seen, tail = 0, b""
        chunks = []
        while seen < want:
            data = self.rf.read1(1 << 20)
            if not data:
                raise ConnectionError(f"server closed the connection while {what}")
            chunks.append(data)
            seen += (tail + data).count(b"\r\n") - tail.count(b"\r\n")
            tail = data[-1:]
        replies = b"".join(chunks)
        if replies.startswith(b"-") or b"\n-" in replies:
            first = replies[replies.find(b"-"):].split(b"\r\n", 1)[0]
            raise RespError(f"{what} failed: {first.decode(errors='replace')}")


# ---------------------------------------------------------------------------------------------
# Servers


def free_port(used: set[int]) -> int:
    rng = random.Random()
    for _ in range(500):
        port = rng.randint(10000, 22000)
        if port in used:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        used.add(port)
        return port
    raise RuntimeError("no free port in 10000..22000")


class Server:
    """One server process in its own temp dir, killed on exit."""

    def __init__(self, name: str, binary: str, module: str, port: int):
        self.name, self.binary, self.module, self.port = name, binary, module, port
        self.dir = Path(tempfile.mkdtemp(prefix=f"fencedlock-bench-{name}-"))
        self.proc: subprocess.Popen | None = None
        self.conf = self.dir / "server.conf"
        self.logfile = self.dir / "server.log"
        self.conf.write_text(
            "\n".join(
                [
                    f"port {port}",
                    "bind 127.0.0.1",
                    f'dir "{self.dir}"',
                    f'logfile "{self.logfile}"',
                    "loglevel notice",
                    'save ""',
                    "appendonly no",
                    f'loadmodule "{module}"',
                    "",
                ]
            )
        )

    def command(self) -> list[str]:
        """The process to run (profile.py wraps it in valgrind)."""
        return [self.binary, str(self.conf)]

    def start(self, timeout: float = 120.0) -> float:
        """Starts and waits until it answers PING (not LOADING). Returns the wall time."""
        t0 = time.monotonic()
        out = open(self.dir / "stdio.log", "ab")
        self.proc = subprocess.Popen(
            self.command(), cwd=self.dir, stdout=out, stderr=out, stdin=subprocess.DEVNULL
        )
        out.close()
        last = ""
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                c = Conn(self.port, timeout=5)
                try:
                    if c.cmd("PING") == "PONG":
                        return time.monotonic() - t0
                finally:
                    c.close()
            except (OSError, RespError) as e:
                last = str(e)
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"{self.name} did not answer PING within {timeout}s ({last}):\n{self.log_tail()}")

    def stop(self) -> None:
        """SHUTDOWN NOSAVE (the RDB on disk is whatever SAVE wrote) and wait for the exit."""
        if self.proc is None:
            return
        try:
            c = Conn(self.port, timeout=30)
            c.sock.sendall(encode("SHUTDOWN", "NOSAVE"))
            c.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.proc = None

    def log_text(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n: int = 20) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def cleanup(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Loading keys: names exactly as redis-benchmark renders __rand_int__ (12 digits).


def lock_cmds(prefix: str, k: int, token: str, ttl_ms: int):
    tok = token.encode()
    ttl = str(ttl_ms).encode()
    head = b"*4\r\n$18\r\nFENCEDLOCK.ACQUIRE\r\n$%d\r\n" % (len(prefix) + 12)
    tail = b"\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(tok), tok, len(ttl), ttl)
    pre = prefix.encode()
    for i in range(k):
        yield head + pre + b"%012d" % i + tail


def string_cmds(prefix: str, k: int, token: str, ttl_ms: int):
    tok = token.encode()
    ttl = str(ttl_ms).encode()
    head = b"*5\r\n$3\r\nSET\r\n$%d\r\n" % (len(prefix) + 12)
    tail = b"\r\n$%d\r\n%s\r\n$2\r\nPX\r\n$%d\r\n%s\r\n" % (len(tok), tok, len(ttl), ttl)
    pre = prefix.encode()
    for i in range(k):
        yield head + pre + b"%012d" % i + tail


def flush(c: Conn) -> None:
    c.cmd("FLUSHALL", "SYNC")


# ---------------------------------------------------------------------------------------------
# One redis-benchmark run


def run_benchmark(port: int, pipeline: int, n: int, keyspace: int, args: list[str]) -> float:
    cmd = [
        "redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(CLIENTS), "-n", str(n),
        "-P", str(pipeline), "-r", str(keyspace), "--csv", *args,
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        raise RuntimeError(f"redis-benchmark failed ({res.returncode}): {res.stderr.strip()}")
    rows = [line for line in res.stdout.splitlines() if line.startswith('"') and not line.startswith('"test"')]
    if not rows:
        raise RuntimeError(f"no result from redis-benchmark: {res.stdout!r} {res.stderr!r}")
    return float(rows[-1].split('","')[1])


class Member:
    """One thing measured: a command line for redis-benchmark, the key state it needs, and how
    to count the requests that did real work."""

    def __init__(self, name, server, args, keyspace, prepare=None, work=None):
        self.name, self.server, self.args, self.keyspace = name, server, args, keyspace
        self.prepare, self.work = prepare, work


def measure(member: Member, servers: dict, pipeline: int, n: int) -> dict:
    srv = servers[member.server]
    c = Conn(srv.port)
    try:
        if member.prepare:
            member.prepare(c)
        c.cmd("CONFIG", "RESETSTAT")
        before = snapshot(c)
        rps = run_benchmark(srv.port, pipeline, n, member.keyspace, member.args)
        after = snapshot(c)
        errors = int(c.info("stats").get("total_error_replies", "0"))
        if errors:
            raise RuntimeError(
                f"{member.name} on {member.server}: {errors} error replies during the run "
                f"(errorstats: {c.info('errorstats')})"
            )
        work = member.work(before, after, n) if member.work else None
        return {"rps": rps, "work": work}
    finally:
        c.close()


def snapshot(c: Conn) -> dict:
    fl = c.info("fencedlock")
    return {
        "dbsize": c.cmd("DBSIZE"),
        "release_failures": int(fl.get("fencedlock_release_failures", "0")),
        "renew_failures": int(fl.get("fencedlock_renew_failures", "0")),
    }


def deleted(before, after, n):
    return (before["dbsize"] - after["dbsize"]) / n


def created(before, after, n):
    return (after["dbsize"] - before["dbsize"]) / n


def released(before, after, n):
    return 1 - (after["release_failures"] - before["release_failures"]) / n


def renewed(before, after, n):
    return 1 - (after["renew_failures"] - before["renew_failures"]) / n


# ---------------------------------------------------------------------------------------------
# Groups: measured together, alternating, so their ratios share the machine's state.


def run_group(title, members, pairs, servers, rounds, sizes, once=None):
    """Runs every member at every pipeline depth for `rounds` rounds, alternating the order.
    Returns (throughput rows, ratio rows)."""
    log(f"group: {title}")
    if once:
        c = Conn(servers[members[0].server].port)
        try:
            once(c)
        finally:
            c.close()
    results: dict[tuple[str, int], list[dict]] = {}
    for r in range(rounds):
        order = members if r % 2 == 0 else list(reversed(members))
        for pipeline in PIPELINES:
            for m in order:
                res = measure(m, servers, pipeline, sizes[pipeline])
                results.setdefault((m.name, pipeline), []).append(res)
                work = "" if res["work"] is None else f", real work {res['work']:.1%}"
                log(f"  round {r + 1} P={pipeline:<2} {m.name:<40} {res['rps']:>11,.0f} req/s{work}")
    rows = []
    for m in members:
        for pipeline in PIPELINES:
            runs = results[(m.name, pipeline)]
            works = [x["work"] for x in runs if x["work"] is not None]
            rows.append(
                {
                    "group": title,
                    "name": m.name,
                    "server": m.server,
                    "pipeline": pipeline,
                    "rps_median": statistics.median(x["rps"] for x in runs),
                    "rps": [x["rps"] for x in runs],
                    "work": statistics.median(works) if works else None,
                }
            )
    ratios = []
    for a, b, target, label in pairs:
        for pipeline in PIPELINES:
            per_round = [
                x["rps"] / y["rps"] for x, y in zip(results[(a, pipeline)], results[(b, pipeline)])
            ]
            med = statistics.median(per_round)
            ratios.append(
                {
                    "label": label,
                    "a": a,
                    "b": b,
                    "pipeline": pipeline,
                    "ratio": med,
                    "per_round": per_round,
                    "target": target,
                    "met": None if target is None else med >= target,
                }
            )
    return rows, ratios


# ---------------------------------------------------------------------------------------------
# Memory and persistence


def memory_phase(srv: Server, keys: int, token: str) -> dict:
    log(f"memory: MEMORY USAGE, {keys:,} keys each, SAVE and load times")
    c = Conn(srv.port)
    out: dict = {"keys": keys}
    flush(c)
    # One key each, same key length, same token.
    c.cmd("FENCEDLOCK.ACQUIRE", "mu:lock", token, LOADED_TTL_MS)
    if c.cmd("SET", "mu:strk", token, "NX", "PX", LOADED_TTL_MS) != "OK":
        raise RuntimeError("SET NX PX refused on an empty server")
    out["usage_lock"] = c.cmd("MEMORY", "USAGE", "mu:lock", "SAMPLES", "0")
    out["usage_string"] = c.cmd("MEMORY", "USAGE", "mu:strk", "SAMPLES", "0")
    c.close()

    rng = random.Random(42)
    tokens = ["%032x" % rng.getrandbits(128) for _ in range(keys)]
    kinds = {
        "lock": lambda i, t: encode("FENCEDLOCK.ACQUIRE", "ml:%012d" % i, t, LOADED_TTL_MS),
        "string": lambda i, t: encode("SET", "ml:%012d" % i, t, "NX", "PX", LOADED_TTL_MS),
    }
    for kind, make in kinds.items():
        c = Conn(srv.port)
        flush(c)
        time.sleep(0.2)
        base = int(c.info("memory")["used_memory"])
        t0 = time.monotonic()
        c.load(make(i, t) for i, t in enumerate(tokens))
        load_s = time.monotonic() - t0
        if c.cmd("DBSIZE") != keys:
            raise RuntimeError(f"{kind}: expected {keys} keys after loading, got {c.cmd('DBSIZE')}")
        used = int(c.info("memory")["used_memory"])
        t0 = time.monotonic()
        c.cmd("SAVE")
        save_s = time.monotonic() - t0
        c.close()
        rdb = srv.dir / "dump.rdb"
        rdb_bytes = rdb.stat().st_size
        srv.stop()
        log_before = len(srv.log_text())
        wall = srv.start()
        m = re.search(r"DB loaded from disk: ([0-9.]+) seconds", srv.log_text()[log_before:])
        loaded_s = float(m.group(1)) if m else wall
        c = Conn(srv.port)
        if c.cmd("DBSIZE") != keys:
            raise RuntimeError(f"{kind}: expected {keys} keys after the restart, got {c.cmd('DBSIZE')}")
        flush(c)
        c.close()
        rdb.unlink(missing_ok=True)
        out[kind] = {
            "used_memory_delta": used - base,
            "bytes_per_key": (used - base) / keys,
            "pipelined_load_s": load_s,
            "save_s": save_s,
            "rdb_bytes": rdb_bytes,
            "rdb_load_s": loaded_s,
        }
        log(
            f"  {kind:<6}: {(used - base) / keys:6.1f} B/key, SAVE {save_s:.2f}s, "
            f"RDB {rdb_bytes / 1e6:.1f} MB, load {loaded_s:.2f}s"
        )
    return out


# ---------------------------------------------------------------------------------------------


def group_table(
    token: str, K: int, cad_sha: str, renew_sha: str, read_sha: str, write_sha: str, multi_sha: str
) -> dict:
    """Every group: name -> (title, members, pairs (a, b, target, label), prepare-once)."""

    def load_locks(c):
        flush(c)
        c.load(lock_cmds("bl:", K, token, LOADED_TTL_MS))

    def load_strings(c):
        flush(c)
        c.load(string_cmds("bs:", K, token, LOADED_TTL_MS))

    def load_both(c):
        load_locks(c)
        c.load(string_cmds("bs:", K, token, LOADED_TTL_MS))

    fresh, ttl = 100_000_000, str(TTL_MS)
    acquire, set_nx, ping = "FENCEDLOCK.ACQUIRE (fresh key)", "SET NX PX (fresh key)", "PING (redis)"
    release, cad, cad_lua = "FENCEDLOCK.RELEASE (holder)", "FENCEDLOCK.CAD (match)", "EVALSHA compare-and-delete (match)"
    renew, renew_lua = "FENCEDLOCK.RENEW (holder)", "EVALSHA renew (match)"
    release_x, cad_x = "FENCEDLOCK.RELEASE (wrong token)", "FENCEDLOCK.CAD (wrong value)"
    cad_lua_x = "EVALSHA compare-and-delete (wrong value)"
    v_cad, v_delifeq = "FENCEDLOCK.CAD (valkey, match)", "DELIFEQ (valkey, match)"
    v_cad_lua = "EVALSHA compare-and-delete (valkey, match)"
    read, read_lua = "ACQUIRE … SHARED (fresh key)", "EVALSHA Redisson-style read lock (fresh key)"
    write, write_lua = "ACQUIRE, the write lease (fresh key)", "EVALSHA Redisson-style write lock (fresh key)"
    # Four keys a call; each key's own prefix keeps the random names of one call apart.
    set_keys = [f"{prefix}:__rand_int__" for prefix in ("ma", "mb", "mc", "md")]
    lua_keys = [f"{prefix}:__rand_int__" for prefix in ("na", "nb", "nc", "nd")]
    all4, all4_lua = "ACQUIREALL of 4 keys (fresh keys)", "EVALSHA all-or-nothing SET PX of 4 keys (fresh keys)"
    return {
        "acquire": (
            "acquire",
            [
                Member(acquire, "redis", ["FENCEDLOCK.ACQUIRE", "al:__rand_int__", token, ttl], fresh, flush, created),
                Member(set_nx, "redis", ["SET", "as:__rand_int__", token, "NX", "PX", ttl], fresh, flush, created),
                Member(ping, "redis", ["PING"], 1),
            ],
            [
                (acquire, set_nx, 0.9, "ACQUIRE / SET NX PX"),
                (acquire, ping, None, "ACQUIRE / PING"),
                (set_nx, ping, None, "SET NX PX / PING"),
            ],
            None,
        ),
        "consume": (
            "release and compare-and-delete (matching token, keys consumed)",
            [
                Member(release, "redis", ["FENCEDLOCK.RELEASE", "bl:__rand_int__", token], K, load_locks, released),
                Member(cad_lua, "redis", ["EVALSHA", cad_sha, "1", "bs:__rand_int__", token], K, load_strings, deleted),
                Member(cad, "redis", ["FENCEDLOCK.CAD", "bs:__rand_int__", token], K, load_strings, deleted),
            ],
            [
                (release, cad_lua, 1.2, "RELEASE / EVALSHA compare-and-delete"),
                (cad, cad_lua, 1.2, "CAD / EVALSHA compare-and-delete"),
            ],
            None,
        ),
        "steady": (
            "renew, and token mismatch (steady state)",
            [
                Member(renew, "redis", ["FENCEDLOCK.RENEW", "bl:__rand_int__", token, ttl], K, None, renewed),
                Member(renew_lua, "redis", ["EVALSHA", renew_sha, "1", "bs:__rand_int__", token, ttl], K),
                Member(release_x, "redis", ["FENCEDLOCK.RELEASE", "bl:__rand_int__", MISMATCH], K),
                Member(cad_x, "redis", ["FENCEDLOCK.CAD", "bs:__rand_int__", MISMATCH], K),
                Member(cad_lua_x, "redis", ["EVALSHA", cad_sha, "1", "bs:__rand_int__", MISMATCH], K),
            ],
            [
                (renew, renew_lua, 1.2, "RENEW / EVALSHA renew"),
                (release_x, cad_lua_x, None, "RELEASE / EVALSHA, token mismatch"),
                (cad_x, cad_lua_x, None, "CAD / EVALSHA, value mismatch"),
            ],
            load_both,
        ),
        "rwlock": (
            "read-write locks: read and write grants (fresh keys)",
            [
                Member(read, "redis", ["FENCEDLOCK.ACQUIRE", "rl:__rand_int__", token, ttl, "SHARED"], fresh, flush, created),
                Member(read_lua, "redis", ["EVALSHA", read_sha, "1", "rs:__rand_int__", token, ttl], fresh, flush),
                Member(write, "redis", ["FENCEDLOCK.ACQUIRE", "wl:__rand_int__", token, ttl], fresh, flush, created),
                Member(write_lua, "redis", ["EVALSHA", write_sha, "1", "ws:__rand_int__", token, ttl], fresh, flush, created),
            ],
            [
                (read, read_lua, 1.0, "ACQUIRE SHARED / EVALSHA read lock"),
                (write, write_lua, 1.0, "ACQUIRE (write) / EVALSHA write lock"),
            ],
            None,
        ),
        "multikey": (
            "several keys at once: 4 keys all or nothing (fresh keys)",
            [
                Member(all4, "redis", ["FENCEDLOCK.ACQUIREALL", "4", *set_keys, token, ttl], fresh, flush, created),
                Member(all4_lua, "redis", ["EVALSHA", multi_sha, "4", *lua_keys, token, ttl], fresh, flush, created),
            ],
            [(all4, all4_lua, 1.0, "ACQUIREALL / EVALSHA all-or-nothing, 4 keys")],
            None,
        ),
        "valkey": (
            "Valkey 9.1: compare-and-delete (matching value, keys consumed)",
            [
                Member(v_cad, "valkey", ["FENCEDLOCK.CAD", "bs:__rand_int__", token], K, load_strings, deleted),
                Member(v_delifeq, "valkey", ["DELIFEQ", "bs:__rand_int__", token], K, load_strings, deleted),
                Member(v_cad_lua, "valkey", ["EVALSHA", cad_sha, "1", "bs:__rand_int__", token], K, load_strings, deleted),
                Member("PING (valkey)", "valkey", ["PING"], 1),
            ],
            [
                (v_cad, v_delifeq, 0.9, "CAD / DELIFEQ (Valkey)"),
                (v_cad, v_cad_lua, 1.2, "CAD / EVALSHA compare-and-delete (Valkey)"),
            ],
            None,
        ),
    }


GROUPS = ("acquire", "consume", "steady", "rwlock", "multikey", "valkey", "memory")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "target" / "bench-results" / "server.json"))
    ap.add_argument("--module", default=os.environ.get("FENCEDLOCK_MODULE", str(ROOT / "target/release/libfencedlock_module.so")))
    ap.add_argument("--redis", default=os.environ.get("FENCEDLOCK_REDIS_SERVER", "redis-server"))
    ap.add_argument("--valkey", default=os.environ.get("FENCEDLOCK_VALKEY_SERVER", str(ROOT / ".cache/valkey/valkey-server")))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=50_000, help="requests per unpipelined run")
    ap.add_argument("--pipelined-requests", type=int, default=150_000, help="requests per -P 16 run")
    ap.add_argument("--keyspace", type=int, default=600_000, help="keys loaded for consuming commands")
    ap.add_argument("--memory-keys", type=int, default=1_000_000)
    ap.add_argument("--groups", default=",".join(GROUPS), help=f"comma-separated subset of {', '.join(GROUPS)}")
    ap.add_argument("--quick", action="store_true", help="a fast smoke run (1 round, small sizes)")
    opts = ap.parse_args()
    if opts.quick:
        opts.rounds, opts.requests, opts.pipelined_requests = 1, 20_000, 40_000
        opts.keyspace, opts.memory_keys = 200_000, 100_000
    wanted = [g for g in opts.groups.split(",") if g]
    unknown = set(wanted) - set(GROUPS)
    if unknown:
        print(f"server.py: unknown groups {sorted(unknown)}; known: {', '.join(GROUPS)}", file=sys.stderr)
        return 2
    for tool in ("redis-benchmark", opts.redis):
        if shutil.which(tool) is None:
            print(f"server.py: {tool} not found (scripts/setup installs it)", file=sys.stderr)
            return 2
    for path in (opts.module, opts.valkey):
        if not Path(path).is_file():
            print(f"server.py: {path} is missing (build the module / run scripts/setup)", file=sys.stderr)
            return 2

    token = "%032x" % random.SystemRandom().getrandbits(128)
    sizes = {1: opts.requests, 16: opts.pipelined_requests}
    used: set[int] = set()
    servers = {
        "redis": Server("redis", opts.redis, opts.module, free_port(used)),
        "valkey": Server("valkey", opts.valkey, opts.module, free_port(used)),
    }
    started = time.monotonic()
    throughput, ratios, memory = [], [], None
    try:
        for s in servers.values():
            s.start()
        shas = []
        for s in servers.values():
            c = Conn(s.port)
            shas.append(tuple(c.cmd("SCRIPT", "LOAD", lua) for lua in (CAD_LUA, RENEW_LUA, RW_READ_LUA, RW_WRITE_LUA, MULTI_LUA)))
            c.close()
        if len(set(shas)) != 1:
            raise RuntimeError(f"the servers computed different script SHA1s: {shas}")
        table = group_table(token, opts.keyspace, *shas[0])
        for name in GROUPS:
            if name not in wanted or name == "memory":
                continue
            title, members, pairs, once = table[name]
            rows, rs = run_group(title, members, pairs, servers, opts.rounds, sizes, once)
            throughput += rows
            ratios += rs
            for s in {m.server for m in members}:
                c = Conn(servers[s].port)
                flush(c)
                c.close()
        servers["valkey"].stop()
        if "memory" in wanted:
            memory = memory_phase(servers["redis"], opts.memory_keys, token)
            memory["ratio"] = memory["usage_lock"] / memory["usage_string"]
            memory["ratio_bulk"] = memory["lock"]["bytes_per_key"] / memory["string"]["bytes_per_key"]
    finally:
        for s in servers.values():
            s.cleanup()

    result = {
        "settings": {
            "clients": CLIENTS,
            "pipelines": list(PIPELINES),
            "rounds": opts.rounds,
            "requests": sizes,
            "keyspace": opts.keyspace,
            "token_len": len(token),
            "ttl_ms": TTL_MS,
            "module": opts.module,
        },
        "throughput": throughput,
        "ratios": ratios,
        "memory": memory,
        "elapsed_s": time.monotonic() - started,
    }
    out = Path(opts.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    log(f"done in {result['elapsed_s']:.0f}s; results in {out}")
    for r in ratios:
        t = "" if r["target"] is None else f"  target {r['target']}: {'met' if r['met'] else 'MISSED'}"
        log(f"  P={r['pipeline']:<2} {r['label']:<45} {r['ratio']:.2f}x{t}")
    if memory:
        log(f"  memory lock/string: MEMORY USAGE {memory['ratio']:.2f}x, used_memory {memory['ratio_bulk']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
