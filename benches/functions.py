#!/usr/bin/env python3
"""The module-less engine (issue 22): the `fencedlock` Functions library against the module and
against the `SET NX PX` + `EVALSHA` recipe, side by side in one run.

One redis-server is started with the module loaded *and* the library loaded (`FUNCTION LOAD
REPLACE` of protocol/src/functions.lua, read at run time); the library's floor keys have their
own prefix (`fencedlock:fn-floor:{`), so the two engines never touch each other's keys. A second
redis-server without `--loadmodule` (a managed service's situation) runs the library's fresh
ACQUIRE once per round, to show the module's presence changes nothing (one row).

Groups (redis-benchmark, 50 clients, unpipelined and `-P 16`, alternating rounds; each ratio
is the median of the per-round ratios, higher = the library faster), using server.py's runner:

- acquire, fresh keys (`-r 100000000`, FLUSHALL before each run):
  `FCALL fencedlock_acquire 2 key floor token ttl` vs `FENCEDLOCK.ACQUIRE` vs `SET NX PX`.
- release, matching token (keys consumed: each run starts from K freshly loaded keys of its
  kind): `FCALL fencedlock_release` vs `FENCEDLOCK.RELEASE` vs the `EVALSHA` compare-and-delete
  script. "Real work" is the share of requests that ended a lease: for the library, counted
  after the run by one `EVAL` over the K keys (a released key keeps an empty holder list).
- steady state on held keys (loaded once): `fencedlock_renew` vs `RENEW` vs the `EVALSHA`
  renew script (all renewing to the keys' own 1 h lease, so no lease lapses during the group);
  the busy key (ACQUIRE with another token: nil) vs `SET NX PX` on a held key; RELEASE with a
  wrong token vs the compare-and-delete script with a wrong value.

Floor keys: `fencedlock_protocol::functions::floor_key` names the floor of a key's slot, and
the library (version 5) refuses any other. The library's benchmark keys share the hash tag
`{fb}`, so redis-benchmark's random keys all name one slot and its one floor key; each grant
still reads and writes a floor hash as it would in production (the check is a CRC16 of the
two-byte tag there, not of the whole key: the server-time phase below measures whole keys).
redis-benchmark draws each `__rand_int__` on its own, so it cannot name a key's own wake-up
list, which version 5 requires: a release with the list is measured by the memory phase's
releases only. The memory phase uses the real floor of each key, so the floor count there is
the real one.

What the floor checks cost (group "versions", with a third server running the library as it
was before them, version 4 at BEFORE_REV, read from git): redis-benchmark's fresh-key ACQUIRE
on both, and a server-time phase: `usec_per_call` of FCALL from `INFO commandstats` for the
same pipelined requests on realistic keys without a hash tag, each with its own floor key,
fresh (every key new: a checksum every call) and hot (1,000 keys granted and released over and
over: checked once, then remembered).

Memory (on the same server, one kind at a time from an empty server): N keys acquired (held),
then released (idle), `used_memory` delta / N; then "after cleanup". The library makes an
idle key expire RETENTION_MS (600 s) after its lease ended (`PEXPIREAT`, checked here on
sampled keys); to measure the state after that without waiting, every lock key gets
`PEXPIRE key 1`, i.e. the same key expiry the library set, only sooner, and the run waits until
Redis's expiry has removed them (`DBSIZE` = the floor keys). What is left is the floor keys:
one per slot used, at most 16,384, never expired. The module's cleanup is its own reclaim,
made immediate with `CONFIG SET fencedlock.reclaim-after-ms 0`. The recipe's release deletes
its string, so its idle cost is zero by construction (measured anyway).

Standard library only; server helpers come from server.py. Writes JSON (see --out);
benches/report.py turns it into the "Functions engine" section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import binascii
import itertools
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in benches/
sys.path.insert(0, str(Path(__file__).resolve().parent))
from server import (  # noqa: E402
    CAD_LUA,
    CLIENTS,
    LOADED_TTL_MS,
    MISMATCH,
    PIPELINES,
    RENEW_LUA,
    ROOT,
    TTL_MS,
    Conn,
    Member,
    Server,
    created,
    deleted,
    encode,
    flush,
    free_port,
    released,
    run_group,
)

LIBRARY = ROOT / "protocol" / "src" / "functions.lua"
SLOTS = 16384
FENCED_PREFIX = "fencedlock:fn-floor:{"  # checked against functions.lua's FLOOR_PREFIX at start
# The library's benchmark keys share this hash tag, so redis-benchmark's random keys all name
# one slot and the one floor key the library takes for it.
BENCH_TAG = "{fb}"
EXPIRY_WAIT_S = 180.0


def log(msg: str) -> None:
    print(f"[functions-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Floor keys, as fencedlock_protocol::{cluster::key_slot, cluster::slot_tag, functions::floor_key}


def key_slot(key: bytes) -> int:
    """CLUSTER KEYSLOT: CRC16-XMODEM (binascii.crc_hqx with 0) of the key or its hash tag."""
    open_ = key.find(b"{")
    if open_ >= 0:
        close = key.find(b"}", open_ + 1)
        if close > open_ + 1:
            key = key[open_ + 1 : close]
    return binascii.crc_hqx(key, 0) % SLOTS


def floor_tags() -> dict[int, bytes]:
    """For every slot, its floor tag (fencedlock_protocol::functions::floor_tag): the one
    six-digit string, digits 0-7, 0-7, then four 0-3, whose own slot is that slot."""
    shapes = (b"01234567", b"01234567", b"0123", b"0123", b"0123", b"0123")
    return {key_slot(t): t for t in (bytes(d) for d in itertools.product(*shapes))}


TAGS = floor_tags()


def floor_key(key: bytes) -> bytes:
    return FENCED_PREFIX.encode() + TAGS[key_slot(key)] + b"}"


def wake_prefix(source: str) -> str | None:
    """The library's wake-up list prefix, None for a library without wake-up lists (version 1):
    the bench measures whichever library the tree holds."""
    m = re.search(r"\nlocal WAKE_PREFIX = '([^']+)'\n", source)
    return m.group(1) if m else None


def wake_ttl_ms(source: str) -> int | None:
    m = re.search(r"\nlocal WAKE_TTL_MS = ([0-9]+)\n", source)
    return int(m.group(1)) if m else None


def wake_key(prefix: str, key: bytes) -> bytes:
    """fencedlock_protocol::functions::wake_key: `fencedlock:fn-wake:{tag}:key`, in key's slot."""
    return prefix.encode() + TAGS[key_slot(key)] + b"}:" + key


def check_floor_keys(source: str) -> None:
    """The slot function against the protocol crate's test values, and the prefix against the
    library: a wrong floor would only show as FCALL errors (or, worse, a floor in another slot)."""
    if f"\nlocal FLOOR_PREFIX = '{FENCED_PREFIX}'\n" not in source:
        raise RuntimeError(f"functions.lua's FLOOR_PREFIX is no longer {FENCED_PREFIX!r}")
    for key, slot in ((b"foo", 12182), (b"somekey", 11058), (b"lockk", 6125)):
        if key_slot(key) != slot:
            raise RuntimeError(f"key_slot({key!r}) = {key_slot(key)}, CLUSTER KEYSLOT says {slot}")
    if floor_key(b"lockk") != b"fencedlock:fn-floor:{221102}":
        raise RuntimeError("floor_key(b'lockk') is not the protocol crate's")
    for key in (b"invoice:inv_72", b"{user1}.lock", b"a{b", b""):
        if key_slot(floor_key(key)) != key_slot(key):
            raise RuntimeError(f"floor_key({key!r}) is not in the key's slot")


# ---------------------------------------------------------------------------------------------
# Servers


class BareServer(Server):
    """A redis-server without the module: what a managed service gives."""

    def __init__(self, name: str, binary: str, port: int):
        super().__init__(name, binary, "", port)
        lines = [line for line in self.conf.read_text().splitlines() if not line.startswith("loadmodule")]
        self.conf.write_text("\n".join(lines) + "\n")


def load_library(c: Conn, source: str) -> None:
    if c.cmd("FUNCTION", "LOAD", "REPLACE", source) != "fencedlock":
        raise RuntimeError("FUNCTION LOAD did not name the library fencedlock")


# ---------------------------------------------------------------------------------------------
# Loading keys (names as redis-benchmark renders __rand_int__: 12 digits)


def fn_acquire_cmds(prefix: str, k: int, floor: str, token: str, ttl_ms: int):
    """Pipelined FCALL fencedlock_acquire, every key with the same (single-server) floor."""
    for i in range(k):
        yield encode("FCALL", "fencedlock_acquire", 2, f"{prefix}{i:012d}", floor, token, ttl_ms)


def cmds(k: int, make):
    return (make(f"{i:012d}") for i in range(k))


# After a run of fencedlock_release on keys `prefix%012d`, 0 <= i < k: how many keys are idle
# (an empty holder list, msgpack 0x90). Keys it does not declare are fine on a single server.
COUNT_IDLE_LUA = (
    "local n = 0 "
    "for i = 0, tonumber(ARGV[2]) - 1 do "
    "  if redis.call('HGET', ARGV[1] .. string.format('%012d', i), 'holders') == '\\144' then n = n + 1 end "
    "end return n"
)


def fn_released(port: int, prefix: str, k: int):
    """A work function for run_group: the share of requests that ended a library lease."""

    def work(_before, _after, n):
        c = Conn(port)
        try:
            return c.cmd("EVAL", COUNT_IDLE_LUA, 0, prefix, k) / n
        finally:
            c.close()

    return work


# ---------------------------------------------------------------------------------------------
# Groups


def group_table(token: str, K: int, floor: str, shas: tuple[str, str], ports: dict) -> dict:
    """Every group: name -> (title, members, pairs (a, b, target, label), prepare-once)."""
    cad_sha, renew_sha = shas
    fresh, ttl, held_ttl = 100_000_000, str(TTL_MS), str(LOADED_TTL_MS)

    def load_fn(prefix):
        def go(c):
            flush(c)
            c.load(fn_acquire_cmds(prefix, K, floor, token, LOADED_TTL_MS))

        return go

    def load_locks(c):
        flush(c)
        c.load(cmds(K, lambda n: encode("FENCEDLOCK.ACQUIRE", "ml:" + n, token, LOADED_TTL_MS)))

    def load_strings(c):
        flush(c)
        c.load(cmds(K, lambda n: encode("SET", "bs:" + n, token, "NX", "PX", LOADED_TTL_MS)))

    def load_all(c):
        load_fn("{fb}s:")(c)
        c.load(cmds(K, lambda n: encode("FENCEDLOCK.ACQUIRE", "ml:" + n, token, LOADED_TTL_MS)))
        c.load(cmds(K, lambda n: encode("SET", "bs:" + n, token, "NX", "PX", LOADED_TTL_MS)))

    fn_acq, fn_acq_bare = "FCALL fencedlock_acquire (fresh key)", "FCALL fencedlock_acquire (fresh key, no module)"
    fn_acq_v4 = "FCALL fencedlock_acquire (fresh key, version 4)"
    acq, set_nx = "FENCEDLOCK.ACQUIRE (fresh key)", "SET NX PX (fresh key)"
    fn_rel, rel, cad_lua = "FCALL fencedlock_release (holder)", "FENCEDLOCK.RELEASE (holder)", "EVALSHA compare-and-delete (match)"
    fn_renew, renew, renew_lua = "FCALL fencedlock_renew (holder)", "FENCEDLOCK.RENEW (holder)", "EVALSHA renew (match)"
    fn_busy, busy, set_busy = "FCALL fencedlock_acquire (busy key)", "FENCEDLOCK.ACQUIRE (busy key)", "SET NX PX (held key)"
    fn_rel_x, rel_x = "FCALL fencedlock_release (wrong token)", "FENCEDLOCK.RELEASE (wrong token)"
    cad_lua_x = "EVALSHA compare-and-delete (wrong value)"
    fcall = ["FCALL"]
    return {
        "acquire": (
            "functions: acquire (fresh keys)",
            [
                Member(fn_acq, "redis", fcall + ["fencedlock_acquire", "2", "{fb}a:__rand_int__", floor, token, ttl], fresh, flush, created),
                Member(acq, "redis", ["FENCEDLOCK.ACQUIRE", "al:__rand_int__", token, ttl], fresh, flush, created),
                Member(set_nx, "redis", ["SET", "as:__rand_int__", token, "NX", "PX", ttl], fresh, flush, created),
                Member(fn_acq_bare, "bare", fcall + ["fencedlock_acquire", "2", "{fb}a:__rand_int__", floor, token, ttl], fresh, flush, created),
            ],
            [
                (fn_acq, acq, None, "functions ACQUIRE / module ACQUIRE"),
                (fn_acq, set_nx, None, "functions ACQUIRE / SET NX PX"),
                (fn_acq_bare, fn_acq, None, "functions ACQUIRE, server without / with the module"),
            ],
            None,
        ),
        "release": (
            "functions: release (matching token, keys consumed)",
            [
                Member(fn_rel, "redis", fcall + ["fencedlock_release", "2", "{fb}r:__rand_int__", floor, token], K, load_fn("{fb}r:"), fn_released(ports["redis"], "{fb}r:", K)),
                Member(rel, "redis", ["FENCEDLOCK.RELEASE", "ml:__rand_int__", token], K, load_locks, released),
                Member(cad_lua, "redis", ["EVALSHA", cad_sha, "1", "bs:__rand_int__", token], K, load_strings, deleted),
            ],
            [
                (fn_rel, rel, None, "functions RELEASE / module RELEASE"),
                (fn_rel, cad_lua, None, "functions RELEASE / EVALSHA compare-and-delete"),
            ],
            None,
        ),
        "versions": (
            f"functions: acquire on the library before the floor checks (version 4, {BEFORE_REV}) and now",
            [
                Member(fn_acq_v4, "before", fcall + ["fencedlock_acquire", "2", "{fb}a:__rand_int__", floor, token, ttl], fresh, flush, created),
                Member(fn_acq_bare, "bare", fcall + ["fencedlock_acquire", "2", "{fb}a:__rand_int__", floor, token, ttl], fresh, flush, created),
            ],
            [(fn_acq_bare, fn_acq_v4, None, "functions ACQUIRE now / before the floor checks")],
            None,
        ),
        "steady": (
            "functions: renew, busy key, wrong token (held keys, steady state)",
            [
                Member(fn_renew, "redis", fcall + ["fencedlock_renew", "2", "{fb}s:__rand_int__", floor, token, held_ttl], K),
                Member(renew, "redis", ["FENCEDLOCK.RENEW", "ml:__rand_int__", token, held_ttl], K),
                Member(renew_lua, "redis", ["EVALSHA", renew_sha, "1", "bs:__rand_int__", token, held_ttl], K),
                Member(fn_busy, "redis", fcall + ["fencedlock_acquire", "2", "{fb}s:__rand_int__", floor, MISMATCH, ttl], K),
                Member(busy, "redis", ["FENCEDLOCK.ACQUIRE", "ml:__rand_int__", MISMATCH, ttl], K),
                Member(set_busy, "redis", ["SET", "bs:__rand_int__", MISMATCH, "NX", "PX", ttl], K),
                Member(fn_rel_x, "redis", fcall + ["fencedlock_release", "2", "{fb}s:__rand_int__", floor, MISMATCH], K),
                Member(rel_x, "redis", ["FENCEDLOCK.RELEASE", "ml:__rand_int__", MISMATCH], K),
                Member(cad_lua_x, "redis", ["EVALSHA", cad_sha, "1", "bs:__rand_int__", MISMATCH], K),
            ],
            [
                (fn_renew, renew, None, "functions RENEW / module RENEW"),
                (fn_renew, renew_lua, None, "functions RENEW / EVALSHA renew"),
                (fn_busy, busy, None, "functions ACQUIRE / module ACQUIRE, busy key"),
                (fn_busy, set_busy, None, "functions ACQUIRE busy / SET NX PX on a held key"),
                (fn_rel_x, rel_x, None, "functions RELEASE / module RELEASE, wrong token"),
                (fn_rel_x, cad_lua_x, None, "functions RELEASE / EVALSHA, wrong token"),
            ],
            load_all,
        ),
    }


GROUPS = ("acquire", "release", "steady", "versions", "memory")

# The library before issue 30's floor checks (version 4, which trusted any floor key): the
# "versions" group and the server-time phase measure what the checks cost, same run.
BEFORE_REV = "0a2de1d"


def library_at(rev: str) -> str:
    """protocol/src/functions.lua at commit `rev` of this repository."""
    res = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:protocol/src/functions.lua"], capture_output=True, text=True
    )
    if res.returncode != 0:
        raise RuntimeError(f"git show {rev}:protocol/src/functions.lua failed: {res.stderr.strip()}")
    return res.stdout


def fcall_usec(c: Conn) -> float:
    """INFO commandstats: the server's time per FCALL since the last CONFIG RESETSTAT."""
    stat = c.info("commandstats").get("cmdstat_fcall", "")
    m = re.search(r"usec_per_call=([0-9.]+)", stat)
    if not m:
        raise RuntimeError(f"no FCALL in commandstats: {stat!r}")
    return float(m.group(1))


def server_time_phase(servers: dict, rounds: int, n: int, token: str) -> dict:
    """ACQUIRE's server time (usec_per_call of FCALL) on the library before the floor checks
    ("before") and now ("bare"), alternating, on realistic keys without a hash tag
    (`invoice:inv_%012d`, 24 bytes), each named with its own slot's floor key:
    - fresh: n distinct keys, each granted once: the check finds no key it checked before, the
      worst case (a CRC16 of the whole key every call);
    - hot: 1,000 keys, each granted and released n/1,000 times (acquire and release both check,
      after the first time from the library's memory)."""
    keys = [f"invoice:inv_{i:012d}" for i in range(n)]
    floors = [floor_key(k.encode()) for k in keys]
    hot = 1000
    runs: dict[tuple[str, str], list[float]] = {}
    for r in range(rounds):
        for name in (("before", "bare") if r % 2 == 0 else ("bare", "before")):
            c = Conn(servers[name].port)
            try:
                flush(c)
                c.cmd("CONFIG", "RESETSTAT")
                c.load(encode("FCALL", "fencedlock_acquire", 2, k, f, token, TTL_MS) for k, f in zip(keys, floors))
                runs.setdefault(("fresh", name), []).append(fcall_usec(c))
                flush(c)
                c.cmd("CONFIG", "RESETSTAT")

                def pairs():
                    for _ in range(max(n // hot, 1)):
                        for k, f in zip(keys[:hot], floors[:hot]):
                            yield encode("FCALL", "fencedlock_acquire", 2, k, f, token, TTL_MS)
                            yield encode("FCALL", "fencedlock_release", 2, k, f, token)

                c.load(pairs())
                runs.setdefault(("hot", name), []).append(fcall_usec(c))
            finally:
                c.close()
            log(f"  round {r + 1} {name:<6} server time per FCALL: fresh {runs[('fresh', name)][-1]:.2f} us, hot {runs[('hot', name)][-1]:.2f} us")
    out = {}
    for kind in ("fresh", "hot"):
        per_round = [a / b for a, b in zip(runs[(kind, "bare")], runs[(kind, "before")])]
        out[kind] = {
            "usec_before": statistics.median(runs[(kind, "before")]),
            "usec_now": statistics.median(runs[(kind, "bare")]),
            "ratio": statistics.median(per_round),
            "per_round": per_round,
        }
        log(f"  {kind}: {out[kind]['usec_now']:.2f} us now vs {out[kind]['usec_before']:.2f} us before: {out[kind]['ratio']:.3f}x")
    return {"keys": n, "hot_keys": hot, "rev": BEFORE_REV, **out}


# ---------------------------------------------------------------------------------------------
# Memory per key: held, idle, after cleanup


def used_memory(c: Conn) -> int:
    time.sleep(0.2)  # let the pipelining client's buffers go
    return int(c.info("memory")["used_memory"])


def wait_dbsize(c: Conn, want: int, what: str) -> float:
    """Waits (bounded) until the expiry / reclaim has removed keys down to `want`; seconds."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < EXPIRY_WAIT_S:
        if c.cmd("DBSIZE") <= want:
            return time.monotonic() - t0
        time.sleep(0.1)
    raise RuntimeError(f"{what}: DBSIZE {c.cmd('DBSIZE')} still above {want} after {EXPIRY_WAIT_S:.0f} s")


def wait_index_empty(c: Conn) -> float:
    """Waits (bounded: the lease's ttl plus a margin) until the module's reclaim index is empty."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < TTL_MS / 1000 + 30:
        if int(c.info("fencedlock").get("fencedlock_reclaim_tracked", "-1")) == 0:
            return time.monotonic() - t0
        time.sleep(0.2)
    raise RuntimeError(f"module: reclaim index not empty after {TTL_MS / 1000 + 30:.0f} s: {c.info('fencedlock')}")


def memory_phase(srv: Server, n: int, wake: str | None) -> dict:
    log(f"memory: {n:,} keys of each kind, held, idle and after cleanup")
    rng = random.Random(7)
    tokens = ["%032x" % rng.getrandbits(128) for _ in range(n)]
    keys = [f"mk:{i:012d}" for i in range(n)]
    floors = {floor_key(k.encode()) for k in keys}
    c = Conn(srv.port)
    out: dict = {"keys": n}
    try:
        # The library.
        flush(c)
        base = used_memory(c)
        c.load(encode("FCALL", "fencedlock_acquire", 2, k, floor_key(k.encode()), t, TTL_MS) for k, t in zip(keys, tokens))
        if c.cmd("DBSIZE") != n + len(floors):
            raise RuntimeError(f"library: DBSIZE {c.cmd('DBSIZE')}, expected {n} keys + {len(floors)} floors")
        held = used_memory(c)
        wake_lists, idle_with_lists = 0, None
        sample = range(0, n, max(1, n // 20))
        if wake:
            # As the client releases: with the key's wake-up list, which lives WAKE_TTL_MS.
            c.load(
                encode("FCALL", "fencedlock_release", 3, k, floor_key(k.encode()), wake_key(wake, k.encode()), t)
                for k, t in zip(keys, tokens)
            )
            pttls = [c.cmd("PTTL", keys[i]) for i in sample]
            wake_lists = c.cmd("DBSIZE") - n - len(floors)
            idle_with_lists = used_memory(c)
            # The lists' own expiry, sooner (as for the lock keys below).
            c.load(encode("PEXPIRE", wake_key(wake, k.encode()), 1) for k in keys)
            wait_dbsize(c, n + len(floors), "wake-up lists' expiry")
        else:
            c.load(encode("FCALL", "fencedlock_release", 2, k, floor_key(k.encode()), t) for k, t in zip(keys, tokens))
            pttls = [c.cmd("PTTL", keys[i]) for i in sample]
        idle = used_memory(c)
        # (pttls: the library's own cleanup, a key expiry RETENTION_MS after the lease ended.)
        floor_pttl = c.cmd("PTTL", next(iter(floors)))
        floor_usage = c.cmd("MEMORY", "USAGE", next(iter(floors)), "SAMPLES", "0")
        key_usage = c.cmd("MEMORY", "USAGE", keys[0], "SAMPLES", "0")
        c.load(encode("PEXPIRE", k, 1) for k in keys)
        expiry_s = wait_dbsize(c, len(floors), "library cleanup")
        after = used_memory(c)
        out["library"] = {
            "held_bytes_per_key": (held - base) / n,
            "idle_bytes_per_key": (idle - base) / n,
            "idle_bytes_per_key_without_floors": (idle - after) / n,
            "after_cleanup_bytes_per_key": (after - base) / n,
            "floor_keys": len(floors),
            "floors_total_bytes": after - base,
            "floor_memory_usage": floor_usage,
            "floor_pttl": floor_pttl,
            "key_memory_usage_idle": key_usage,
            "idle_pttl_ms_min": min(pttls),
            "idle_pttl_ms_max": max(pttls),
            "cleanup_expiry_s": expiry_s,
            "wake_lists": wake_lists,
            "idle_with_wake_lists_bytes_per_key": None if idle_with_lists is None else (idle_with_lists - base) / n,
        }
        if idle_with_lists is not None:
            log(f"  library: {wake_lists:,} wake-up lists after the releases: {(idle_with_lists - base) / n:.1f} B/key")
        log(
            f"  library: held {(held - base) / n:.1f} B/key, idle {(idle - base) / n:.1f} B/key "
            f"(PTTL {min(pttls):,}..{max(pttls):,} ms), after cleanup {after - base:,} B total "
            f"for {len(floors):,} floor keys ({expiry_s:.1f} s of expiry)"
        )

        # The module.
        flush(c)
        before_cfg = c.cmd("CONFIG", "GET", "fencedlock.reclaim-after-ms")[1]
        base = used_memory(c)
        c.load(encode("FENCEDLOCK.ACQUIRE", k, t, TTL_MS) for k, t in zip(keys, tokens))
        held = used_memory(c)
        c.load(encode("FENCEDLOCK.RELEASE", k, t) for k, t in zip(keys, tokens))
        idle = used_memory(c)
        key_usage = c.cmd("MEMORY", "USAGE", keys[0], "SAMPLES", "0")
        c.cmd("CONFIG", "SET", "fencedlock.reclaim-after-ms", "0")
        try:
            reclaim_s = wait_dbsize(c, 0, "module reclaim")
            after_keys = used_memory(c)
            # A released key keeps a second index entry until the ttl it was granted with has
            # passed (benches/README.md); the index is empty once the sweep has seen it due.
            index_s = wait_index_empty(c)
        finally:
            c.cmd("CONFIG", "SET", "fencedlock.reclaim-after-ms", before_cfg)
        after = used_memory(c)
        out["module"] = {
            "held_bytes_per_key": (held - base) / n,
            "idle_bytes_per_key": (idle - base) / n,
            "after_reclaim_total_bytes": after_keys - base,
            "after_cleanup_bytes_per_key": (after - base) / n,
            "after_cleanup_total_bytes": after - base,
            "key_memory_usage_idle": key_usage,
            "cleanup_reclaim_s": reclaim_s,
            "cleanup_index_s": index_s,
        }
        log(
            f"  module:  held {(held - base) / n:.1f} B/key, idle {(idle - base) / n:.1f} B/key, "
            f"keys reclaimed in {reclaim_s:.1f} s ({after_keys - base:,} B left), index empty "
            f"{index_s:.1f} s later ({after - base:,} B left)"
        )

        # The recipe: SET NX PX, released by the compare-and-delete script.
        flush(c)
        sha = c.cmd("SCRIPT", "LOAD", CAD_LUA)
        base = used_memory(c)
        c.load(encode("SET", k, t, "NX", "PX", TTL_MS) for k, t in zip(keys, tokens))
        held = used_memory(c)
        key_usage = c.cmd("MEMORY", "USAGE", keys[0], "SAMPLES", "0")
        c.load(encode("EVALSHA", sha, 1, k, t) for k, t in zip(keys, tokens))
        if c.cmd("DBSIZE") != 0:
            raise RuntimeError(f"recipe: {c.cmd('DBSIZE')} keys left after compare-and-delete")
        idle = used_memory(c)
        out["string"] = {
            "held_bytes_per_key": (held - base) / n,
            "idle_bytes_per_key": (idle - base) / n,
            "key_memory_usage_held": key_usage,
        }
        log(f"  recipe:  held {(held - base) / n:.1f} B/key, after compare-and-delete {(idle - base) / n:.1f} B/key")
        flush(c)
    finally:
        c.close()
    lib, mod = out["library"], out["module"]
    out["ratio_idle_library_module"] = lib["idle_bytes_per_key"] / mod["idle_bytes_per_key"]
    out["ratio_held_library_string"] = lib["held_bytes_per_key"] / out["string"]["held_bytes_per_key"]
    out["ratio_held_library_module"] = lib["held_bytes_per_key"] / mod["held_bytes_per_key"]
    return out


# ---------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "target" / "bench-results" / "functions.json"))
    ap.add_argument("--module", default=os.environ.get("FENCEDLOCK_MODULE", str(ROOT / "target/release/libfencedlock_module.so")))
    ap.add_argument("--redis", default=os.environ.get("FENCEDLOCK_REDIS_SERVER", "redis-server"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=30_000, help="requests per unpipelined run")
    ap.add_argument("--pipelined-requests", type=int, default=60_000, help="requests per -P 16 run")
    ap.add_argument("--keyspace", type=int, default=300_000, help="keys loaded for release and steady groups")
    ap.add_argument("--memory-keys", type=int, default=500_000)
    ap.add_argument("--groups", default=",".join(GROUPS), help=f"comma-separated subset of {', '.join(GROUPS)}")
    ap.add_argument("--quick", action="store_true", help="a fast smoke run (1 round, small sizes)")
    opts = ap.parse_args()
    if opts.quick:
        opts.rounds, opts.requests, opts.pipelined_requests = 1, 10_000, 20_000
        opts.keyspace, opts.memory_keys = 100_000, 50_000
    wanted = [g for g in opts.groups.split(",") if g]
    unknown = set(wanted) - set(GROUPS)
    if unknown:
        print(f"functions.py: unknown groups {sorted(unknown)}; known: {', '.join(GROUPS)}", file=sys.stderr)
        return 2
    for tool in ("redis-benchmark", opts.redis):
        if shutil.which(tool) is None:
            print(f"functions.py: {tool} not found (scripts/setup installs it)", file=sys.stderr)
            return 2
    if not Path(opts.module).is_file():
        print(f"functions.py: {opts.module} is missing (cargo build --release -p fencedlock-module)", file=sys.stderr)
        return 2
    source = LIBRARY.read_text()
    check_floor_keys(source)
    wake = wake_prefix(source)

    token = "%032x" % random.SystemRandom().getrandbits(128)
    # One fixed floor for redis-benchmark's random keys: valid for every key on one server.
    floor = floor_key(BENCH_TAG.encode()).decode()
    sizes = {1: opts.requests, 16: opts.pipelined_requests}
    used: set[int] = set()
    servers = {
        "redis": Server("redis", opts.redis, opts.module, free_port(used)),
        "bare": BareServer("bare", opts.redis, free_port(used)),
    }
    if "versions" in wanted:
        servers["before"] = BareServer("before", opts.redis, free_port(used))
    sources = {"redis": source, "bare": source, "before": library_at(BEFORE_REV) if "versions" in wanted else ""}
    started = time.monotonic()
    throughput, ratios, memory, version = [], [], None, None
    try:
        for s in servers.values():
            s.start()
            c = Conn(s.port)
            try:
                load_library(c, sources[s.name])
                if s.name != "before":
                    version = c.cmd("FCALL", "fencedlock_version", 0)
                has_module = any("fencedlock" in str(m) for m in c.cmd("MODULE", "LIST"))
                if has_module != (s.name == "redis"):
                    raise RuntimeError(f"{s.name}: module loaded = {has_module}, not as intended")
                if s.name == "redis":
                    shas = (c.cmd("SCRIPT", "LOAD", CAD_LUA), c.cmd("SCRIPT", "LOAD", RENEW_LUA))
            finally:
                c.close()
        table = group_table(token, opts.keyspace, floor, shas, {k: v.port for k, v in servers.items()})
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
        server_time = None
        if "versions" in wanted:
            log("server time per FCALL, library before the floor checks and now")
            server_time = server_time_phase(servers, opts.rounds, opts.requests, token)
            servers["before"].stop()
        servers["bare"].stop()
        if "memory" in wanted:
            # A fresh process: keys FLUSHALL removed leave the module's reclaim index entries
            # behind until they fall due, which the memory phase's reclaim would then free.
            srv = servers["redis"]
            srv.stop()
            srv.start()
            c = Conn(srv.port)
            try:
                load_library(c, source)
            finally:
                c.close()
            memory = memory_phase(srv, opts.memory_keys, wake)
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
            "held_ttl_ms": LOADED_TTL_MS,
            "library_version": version,
            "floor": floor,
            "wake_prefix": wake,
            "wake_ttl_ms": wake_ttl_ms(source),
            "quick": opts.quick,
        },
        "throughput": throughput,
        "ratios": ratios,
        "memory": memory,
        "server_time": server_time,
        "elapsed_s": time.monotonic() - started,
    }
    out = Path(opts.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    log(f"done in {result['elapsed_s']:.0f}s; results in {out}")
    for r in ratios:
        log(f"  P={r['pipeline']:<2} {r['label']:<55} {r['ratio']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
