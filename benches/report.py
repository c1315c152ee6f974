#!/usr/bin/env python3
"""Turns the results of benches/server.py, benches/memory.py and the criterion benches into
RESULTS.md.

Reads <results>/server.json, <results>/memory.json, <results>/profile.json, <results>/functions.json,
<results>/client_paired.json, <results>/contention.json, <results>/session.json,
<results>/go_locks.json and criterion's
<target>/criterion/*/*/new/estimates.json. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import time
from pathlib import Path

import sys

sys.dont_write_bytecode = True  # no __pycache__ in benches/
sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_growth import growth_section  # noqa: E402
from report_guard import guard_section  # noqa: E402
from report_go import go_section  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def sh(*cmd: str) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def version(binary: str) -> str:
    m = re.search(r"v=([0-9.]+)", sh(binary, "--version"))
    return m.group(1) if m else "?"


def machine(valkey: str, load_before: str) -> list[str]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    bench_version = re.search(r"([0-9]+\.[0-9]+\.[0-9]+)", sh("redis-benchmark", "--version"))
    return [
        f"- CPU: {cpu}, {os.cpu_count()} cores (`nproc` {sh('nproc')}), {mem} RAM",
        f"- Kernel: {platform.system()} {platform.release()}",
        f"- Redis {version('redis-server')} (Debian), Valkey {version(valkey)}, "
        f"redis-benchmark {bench_version.group(1) if bench_version else '?'}",
        f"- {sh('rustc', '--version')}",
        f"- Load average when the run started: {load_before or '?'} (the machine is shared: "
        "absolute numbers are noisy; ratios measured in the same run are what count)",
    ]


def fmt_ratio(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}×"


def verdict(ratio: float | None, target: float | None, higher_is_better: bool) -> str:
    if ratio is None or target is None:
        return ""
    ok = ratio >= target if higher_is_better else ratio <= target
    return "met" if ok else "**missed**"


# ---------------------------------------------------------------------------------------------


def server_section(s: dict) -> list[str]:
    rows = {(r["name"], r["pipeline"]): r for r in s["throughput"]}
    by_label: dict[str, dict[int, dict]] = {}
    for r in s["ratios"]:
        by_label.setdefault(r["label"], {})[r["pipeline"]] = r
    st = s["settings"]
    out = [
        "## Server side: throughput ratios (redis-benchmark)",
        "",
        f"{st['clients']} clients, unpipelined and pipelined (`-P 16`), {st['rounds']} alternating rounds; "
        f"each ratio is the median of the per-round ratios (higher = fencedlock faster). "
        f"Requests per run: {st['requests']['1']:,} unpipelined, {st['requests']['16']:,} pipelined; "
        f"{st['token_len']}-hex-char token; lease / PX {st['ttl_ms']} ms.",
        "",
        "Unpipelined, every request costs the server a read and a write system call, which dwarf "
        "the command's own work: all commands run near the PING rate and ratios crowd around 1×. "
        "Pipelined, the server's command execution is the bottleneck, so that column (and the "
        "instruction counts below) is where a command's cost shows.",
        "",
        "| comparison | unpipelined | pipelined (-P 16) | target | unpipelined | pipelined |",
        "| --- | ---: | ---: | ---: | --- | --- |",
    ]
    for label, by_p in by_label.items():
        r1, r16 = by_p.get(1), by_p.get(16)
        target = (r1 or r16)["target"]
        v1 = verdict(r1["ratio"], target, True) if r1 else ""
        v16 = verdict(r16["ratio"], target, True) if r16 else ""
        t = f"≥ {target}×" if target else "–"
        out.append(
            f"| {label} | {fmt_ratio(r1 and r1['ratio'])} | {fmt_ratio(r16 and r16['ratio'])} | {t} | {v1} | {v16} |"
        )
    out += [
        "",
        "Throughput (median requests/s) and the share of requests that did real work (matched and "
        "wrote) where it varies:",
        "",
        "| command | server | unpipelined | pipelined | real work (P=1 / P=16) |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    names = []
    for r in s["throughput"]:
        if r["name"] not in names:
            names.append(r["name"])
    for name in names:
        a, b = rows[(name, 1)], rows[(name, 16)]
        work = "" if a["work"] is None else f"{a['work']:.0%} / {b['work']:.0%}"
        out.append(f"| {name} | {a['server']} | {a['rps_median']:,.0f} | {b['rps_median']:,.0f} | {work} |")
    return out


def memory_section(s: dict) -> list[str]:
    m = s["memory"]
    lock, string = m["lock"], m["string"]
    k = m["keys"]
    out = [
        "",
        "## Server side: memory and persistence (Redis)",
        "",
        "A lock key (`FENCEDLOCK.ACQUIRE`, held) vs a `SET key token NX PX` string with the same "
        "32-hex-char token; the bulk rows load distinct random tokens into an empty server.",
        "",
        "| measure | lock key | string key | ratio | target |",
        "| --- | ---: | ---: | ---: | --- |",
        f"| `MEMORY USAGE` of one key (bytes) | {m['usage_lock']} | {m['usage_string']} | "
        f"{fmt_ratio(m['ratio'])} | ≤ 1.5×: {verdict(m['ratio'], 1.5, False)} |",
        f"| `used_memory` growth per key, {k:,} keys (bytes) | {lock['bytes_per_key']:.1f} | "
        f"{string['bytes_per_key']:.1f} | {fmt_ratio(m['ratio_bulk'])} | ≤ 1.5×: {verdict(m['ratio_bulk'], 1.5, False)} |",
        f"| RDB file, {k:,} keys (MB) | {lock['rdb_bytes'] / 1e6:.1f} | {string['rdb_bytes'] / 1e6:.1f} | "
        f"{fmt_ratio(lock['rdb_bytes'] / string['rdb_bytes'])} | |",
        f"| `SAVE`, {k:,} keys (s) | {lock['save_s']:.2f} | {string['save_s']:.2f} | "
        f"{fmt_ratio(lock['save_s'] / string['save_s'])} | |",
        f"| RDB load at start-up, {k:,} keys (s, from the server log) | {lock['rdb_load_s']:.2f} | "
        f"{string['rdb_load_s']:.2f} | {fmt_ratio(lock['rdb_load_s'] / string['rdb_load_s'])} | |",
        f"| pipelined load of {k:,} keys by a Python client (s) | {lock['pipelined_load_s']:.2f} | "
        f"{string['pipelined_load_s']:.2f} | | |",
    ]
    return out


def mb(x: float) -> str:
    return f"{x / 1e6:,.1f}"


def memory_over_time_section(m: dict | None) -> list[str]:
    out = ["", "## Server side: memory over time (per-entity keys)", ""]
    if m is None:
        return out + ["(no memory-over-time results: run benches/memory.py)"]
    st, s = m["settings"], m["summary"]
    keys, dur = m["keys_created"], st["duration_s"]
    skipped = f", {m['ticks_skipped']} ticks skipped (the load fell behind)" if m["ticks_skipped"] else ""
    out += [
        f"Two redis-servers, the same load into each for {dur:.0f} s: every {st['tick_s'] * 1000:.0f} ms "
        f"{st['keys_per_tick']:,} fresh keys `{st['key_pattern']}` acquired and released at once "
        f"({m['achieved_rate_per_s']:,.0f} new keys/s{skipped}), `used_memory` sampled every second "
        f"(`benches/memory.py`). Reclaim on: `fencedlock.reclaim-after-ms {st['reclaim_after_ms']['on']}`; "
        f"off: `{st['reclaim_after_ms']['off']}` (the maximum), where every released key stays. "
        "Slope: least squares over the second half of the load.",
        "",
        "| reclaim | keys created | `used_memory` start (MB) | end (MB) | peak (MB) | slope, 2nd half | keys left at end | after "
        f"{st['drain_s']} s idle (MB, keys) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    labels = {"on": f"on ({st['reclaim_after_ms']['on']} ms)", "off": "off (maximum)"}
    for name in ("on", "off"):
        x = s[name]
        sl = "–" if x["slope_bytes_per_s"] is None else f"{x['slope_bytes_per_s'] / 1e3:,.1f} kB/s"
        out.append(
            f"| {labels[name]} | {keys:,} | {mb(x['used_memory_start'])} | "
            f"{mb(x['used_memory_end'])} | {mb(x['used_memory_peak'])} | {sl} | {x['dbsize_end']:,} | "
            f"{mb(x['used_memory_after_drain'])}, {x['dbsize_after_drain']:,} |"
        )
    off = s["off"]
    out += [
        "",
        f"End of the load: off / on = {s['ratio_end_off_on']:.1f}× `used_memory`. With reclaim off, memory "
        f"grows by {off['growth_bytes_per_key']:.0f} B per key created, of which "
        f"{off['reclaim_index_bytes_end'] / max(off['reclaim_tracked_end'], 1):.0f} B is the reclaim index's "
        "entry (`fencedlock_reclaim_index_bytes`): the index tracks every lock key, whatever the setting.",
    ]
    return out


INSTRUCTION_PAIRS = [
    ("redis", "FENCEDLOCK.ACQUIRE (fresh key)", "SET NX PX (fresh key)"),
    ("redis", "FENCEDLOCK.RELEASE (holder)", "EVALSHA compare-and-delete (match)"),
    ("redis", "FENCEDLOCK.CAD (match)", "EVALSHA compare-and-delete (match)"),
    ("redis", "FENCEDLOCK.RENEW (holder)", "EVALSHA renew (match)"),
    ("redis", "FENCEDLOCK.ACQUIRE (fresh key)", "PING"),
    ("valkey", "FENCEDLOCK.CAD (match)", "DELIFEQ (match)"),
    ("valkey", "FENCEDLOCK.CAD (wrong value)", "DELIFEQ (wrong value)"),
    ("valkey", "FENCEDLOCK.CAD (match)", "EVALSHA compare-and-delete (match)"),
]


def instructions_section(p: dict | None) -> list[str]:
    out = ["", "## Server side: instructions per command (callgrind)", ""]
    if p is None:
        return out + ["(no callgrind results: run benches/profile.py)"]
    ins = p["instructions"]
    out += [
        "Deterministic, unlike the timings above: instructions the whole server executes per "
        f"command (event loop, parsing, reply included), {p['commands']:,} pipelined commands each "
        "on their own prepared key, counted by valgrind's callgrind (`benches/profile.py`). "
        "Lower is cheaper; at `-P 16` the server is the bottleneck, so these ratios predict the "
        "pipelined throughput ratios (inverted) up to cache effects.",
        "",
        "| server | fencedlock | instructions | baseline | instructions | fencedlock ÷ baseline |",
        "| --- | --- | ---: | --- | ---: | ---: |",
    ]
    for server, a, b in INSTRUCTION_PAIRS:
        x, y = ins.get(server, {}).get(a), ins.get(server, {}).get(b)
        if x is None or y is None:
            continue
        out.append(f"| {server} | {a} | {x:,.0f} | {b} | {y:,.0f} | {x / y:.2f}× |")
    return out


def ratio_median(samples: dict, a: str, b: str) -> float | None:
    if a not in samples or b not in samples:
        return None
    return statistics.median(x / y for x, y in zip(samples[a], samples[b]))


def client_section(paired: dict | None, estimates: dict) -> list[str]:
    out = ["", "## Client side: one lease (acquire + release), criterion", ""]
    if paired is None:
        return out + ["(no paired results: run `cargo bench --bench client`)"]
    single, red = paired.get("single_node", {}), paired.get("redlock_5", {})
    managed = paired.get("managed", {})
    rounds = max((len(v) for v in list(single.values()) + list(red.values())), default=0)
    rows = [
        ("single node: `Locker` acquire + release / two PINGs", single, "fencedlock_single_node", "two_pings", 1.15),
        ("single node: raw ACQUIRE + RELEASE commands / two PINGs", single, "raw_acquire_release", "two_pings", None),
        ("Redlock, 5 masters, plain / rslock", red, "fencedlock_redlock_plain", "rslock", 1.0),
        ("Redlock, 5 masters, fenced / rslock", red, "fencedlock_redlock_fenced", "rslock", 1.5),
        ("Redlock plain / single node", red, "fencedlock_redlock_plain", "fencedlock_single_node", None),
        ("Redlock fenced / plain", red, "fencedlock_redlock_fenced", "fencedlock_redlock_plain", None),
        ("rslock / single node", red, "rslock", "fencedlock_single_node", None),
        ("without the module (the library): `Locker` / two PINGs", managed, "managed_fencedlock_single_node",
         "managed_two_pings", None),
        ("without the module (the library): `Locker` / rslock", managed, "managed_fencedlock_single_node",
         "managed_rslock", None),
    ]
    out += [
        "Time ratios (lower = fencedlock faster), from the paired pass: the operations of a group "
        f"run in alternating ~25 ms blocks (up to {rounds} rounds), each ratio is the median of the "
        "per-round ratios. All servers are local Redis processes with the module, but the `managed` "
        "group's one, which runs without it (the locker loads the Functions library).",
        "",
        "| comparison | time ratio | target | verdict |",
        "| --- | ---: | ---: | --- |",
    ]
    for label, group, a, b, target in rows:
        r = ratio_median(group, a, b)
        t = f"≤ {target}×" if target else "–"
        out.append(f"| {label} | {fmt_ratio(r)} | {t} | {verdict(r, target, False)} |")
    out += [
        "",
        "Absolute times (µs per lease): criterion's median of its own run of each operation, and the "
        "median of the paired blocks.",
        "",
        "| operation | criterion median | paired median |",
        "| --- | ---: | ---: |",
    ]
    for group_name, group in (("single_node", single), ("redlock_5", red), ("managed", managed)):
        for name, samples in group.items():
            est = estimates.get((group_name, name))
            crit = f"{est / 1000:.1f}" if est is not None else "–"
            out.append(f"| {group_name}/{name} | {crit} | {statistics.median(samples):.1f} |")
    return out


def contention_section(c: dict | None, estimates: dict) -> list[str]:
    out = ["", "## Client side: contention on one hot key", ""]
    if c is None:
        return out + ["(no contention results: run `cargo bench --bench contention`)"]
    st = c["settings"]
    out += [
        f"{st['tasks']} tasks on one `Locker` take turns on one key until {st['grants_per_batch']} grants "
        f"were handed out; each holder works ~{st['hold_ms']} ms and releases. Server commands per "
        "grant from `INFO commandstats`, over every batch criterion ran.",
        "",
        "| strategy | grants/s | of the limit | server commands per grant | of which ACQUIRE | handoff p50 | max wait | criterion median per batch |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    limit = c.get("limit")
    labels = {
        "fencedlock_server_wait": "`Locker::acquire`, waiting on the server (`ACQUIRE … BLOCK`)",
        "fencedlock_backoff": "`Locker::acquire` polling with jittered exponential backoff (20 → 400 ms; `max_blocking(0)`, as before BLOCK)",
        "fixed_20ms_poll": f"fixed-delay poll (`try_acquire`, sleep {st['poll_ms']} ms)",
    }
    for key, label in labels.items():
        r = c.get(key)
        if not r:
            continue
        est = estimates.get(("contention_64_tasks", key))
        crit = f"{est / 1e9:.2f} s" if est is not None else "–"
        acq = r["by_command"].get("FENCEDLOCK.ACQUIRE", r["by_command"].get("fencedlock.acquire", 0))
        out.append(
            f"| {label} | {r['grants_per_s']:.0f} | {r.get('of_limit', 0):.2f}× | {r['commands_per_grant']:.2f} "
            f"| {acq:.2f} | {r.get('handoff_p50_ms', 0):.2f} ms | {r.get('wait_max_ms', 0):.0f} ms | {crit} |"
        )
    if limit:
        out += [
            "",
            f"Physical limit measured in the same run: one grant per (hold {limit['hold_ms_measured']:.2f} ms + one "
            f"ACQUIRE round trip {limit['rtt_ms']:.3f} ms) = {limit['grants_per_s']:.0f} grants/s; FIFO order "
            f"predicts a longest wait of {limit['fifo_max_wait_ms']:.0f} ms ({st['tasks']} × (hold + round trip)).",
        ]
    return out


def session_section(s: dict | None) -> list[str]:
    out = ["", "## Client side: 1,000 leases kept alive", ""]
    if s is None:
        return out + ["(no session results: run `cargo bench --bench session`)"]
    out += [
        f"{s['leases']} leases on one server, renewed every {s['interval_ms']} ms: one `Session` (one pipeline "
        f"of renewals per interval) against {s['leases']} `keep_alive`s; the server's own counters per "
        f"interval (`INFO stats`, `INFO cpu`), median of {s['rounds']} paired rounds.",
        "",
        "| per renew interval | session | independent keep-alives | ratio |",
        "| --- | ---: | ---: | ---: |",
    ]
    rows = [("requests read (`total_reads_processed`)", "reads", "{:.1f}"),
            ("commands run", "commands", "{:.0f}"),
            ("server CPU (ms)", "cpu_ms", "{:.2f}")]
    ratios = {"reads": "reads", "commands": "commands", "cpu_ms": "cpu"}
    for label, field, form in rows:
        out.append(
            f"| {label} | {form.format(s['session'][field])} | {form.format(s['independent'][field])} "
            f"| {fmt_ratio(s['ratio'][ratios[field]])} |"
        )
    return out


def leases_per_s(rows: dict, acquire: str, release: str, pipeline: int) -> float | None:
    """Leases (one ACQUIRE + one RELEASE) per second a server does when only leases run: the
    harmonic combination of the two commands' throughputs."""
    a, r = rows.get((acquire, pipeline)), rows.get((release, pipeline))
    if not a or not r:
        return None
    return 1 / (1 / a["rps_median"] + 1 / r["rps_median"])


def functions_section(f: dict | None) -> list[str]:
    """The module-less engine (issue 22): benches/functions.py."""
    out = ["", "## Functions engine (no module): the library vs the module vs `SET NX PX` + `EVALSHA`", ""]
    if f is None:
        return out + ["(no Functions results: run benches/functions.py)"]
    st = f["settings"]
    rows = {(r["name"], r["pipeline"]): r for r in f["throughput"]}
    out += [
        f"One redis-server with the module and the `fencedlock` library (version {st['library_version']}, "
        "`FUNCTION LOAD REPLACE` of `protocol/src/functions.lua`) side by side, plus one without the module; "
        f"{st['clients']} clients, {st['rounds']} alternating rounds, requests per run {st['requests']['1']:,} "
        f"unpipelined / {st['requests']['16']:,} pipelined, {st['keyspace']:,} loaded keys for release and "
        f"the held-key rows (`benches/functions.py`). The random keys of redis-benchmark all name one floor "
        f"key (`{st['floor']}`), valid for every key on one server. Ratio = library ÷ other, median of the "
        "per-round ratios (below 1× = the library slower).",
        "",
        "| comparison | unpipelined | pipelined (-P 16) |",
        "| --- | ---: | ---: |",
    ]
    by_label: dict[str, dict[int, float]] = {}
    for r in f["ratios"]:
        by_label.setdefault(r["label"], {})[r["pipeline"]] = r["ratio"]
    for label, by_p in by_label.items():
        out.append(f"| {label} | {fmt_ratio(by_p.get(1))} | {fmt_ratio(by_p.get(16))} |")
    out += [
        "",
        "| command | server | unpipelined | pipelined | real work (P=1 / P=16) |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    names = []
    for r in f["throughput"]:
        if r["name"] not in names:
            names.append(r["name"])
    for name in names:
        a, b = rows[(name, 1)], rows[(name, 16)]
        work = "" if a["work"] is None else f"{a['work']:.0%} / {b['work']:.0%}"
        server = "redis, no module" if a["server"] == "bare" else "redis + module"
        out.append(f"| {name} | {server} | {a['rps_median']:,.0f} | {b['rps_median']:,.0f} | {work} |")
    fn_release = "FCALL fencedlock_release (holder, wake-up list)"
    if (fn_release, 1) not in rows:
        fn_release = "FCALL fencedlock_release (holder)"
    lease = [
        (what, leases_per_s(rows, acq, rel, 1), leases_per_s(rows, acq, rel, 16))
        for what, acq, rel in (
            ("library", "FCALL fencedlock_acquire (fresh key)", fn_release),
            ("module", "FENCEDLOCK.ACQUIRE (fresh key)", "FENCEDLOCK.RELEASE (holder)"),
            ("recipe", "SET NX PX (fresh key)", "EVALSHA compare-and-delete (match)"),
        )
    ]
    out += ["", "Leases per second (a fresh ACQUIRE plus its RELEASE, nothing else running), from the medians above:", ""]
    out += ["| engine | unpipelined | pipelined |", "| --- | ---: | ---: |"]
    for what, p1, p16 in lease:
        out.append(f"| {what} | {'–' if p1 is None else f'{p1:,.0f}'} | {'–' if p16 is None else f'{p16:,.0f}'} |")
    m = f.get("memory")
    if not m:
        return out
    lib, mod, s = m["library"], m["module"], m["string"]
    n = m["keys"]
    out += [
        "",
        f"Memory, {n:,} keys of each kind with distinct 32-hex-char tokens, `used_memory` growth per key "
        "from an empty server: held, released (idle), and after cleanup. The library expires an idle key "
        f"RETENTION_MS after its lease (`PTTL` of sampled keys after the releases: {lib['idle_pttl_ms_min']:,}–"
        f"{lib['idle_pttl_ms_max']:,} ms); its cleanup is measured by giving every lock key `PEXPIRE key 1` "
        "(the same expiry, sooner) and waiting for Redis's expiry; the module's by `CONFIG SET "
        "fencedlock.reclaim-after-ms 0`, until the keys and then its reclaim index are gone. The "
        "recipe's release deletes its string.",
        "",
        "| bytes per key | library | module | `SET NX PX` string |",
        "| --- | ---: | ---: | ---: |",
        f"| held (lease running) | {lib['held_bytes_per_key']:.1f} | {mod['held_bytes_per_key']:.1f} | "
        f"{s['held_bytes_per_key']:.1f} |",
    ]
    if lib.get("idle_with_wake_lists_bytes_per_key") is not None:
        out.append(
            f"| released, first {st['wake_ttl_ms'] / 1000:.0f} s (with its wake-up list, {lib['wake_lists']:,} lists) | "
            f"{lib['idle_with_wake_lists_bytes_per_key']:.1f} | | |"
        )
    out += [
        f"| released (idle) | {lib['idle_bytes_per_key']:.1f} | {mod['idle_bytes_per_key']:.1f} | "
        f"{s['idle_bytes_per_key']:.1f} (deleted) |",
        f"| released, floor keys left out | {lib['idle_bytes_per_key_without_floors']:.1f} | | |",
        f"| after cleanup | {lib['after_cleanup_bytes_per_key']:.1f} (the floor keys) | "
        f"{mod['after_cleanup_bytes_per_key']:.1f} | |",
        f"| `MEMORY USAGE` of one idle key | {lib['key_memory_usage_idle']} | {mod['key_memory_usage_idle']} | "
        f"{s['key_memory_usage_held']} (held) |",
        "",
        f"Floor keys: {lib['floor_keys']:,} for {n:,} keys (one per slot used, at most 16,384, never expired: "
        f"PTTL {lib['floor_pttl']}), {lib['floors_total_bytes'] / 1e6:.2f} MB in all, "
        f"{lib['floors_total_bytes'] / max(lib['floor_keys'], 1):.0f} B each (`MEMORY USAGE` "
        f"{lib['floor_memory_usage']}); at 16,384 about {16384 * lib['floors_total_bytes'] / max(lib['floor_keys'], 1) / 1e6:.1f} MB. "
        f"Idle library / module: {fmt_ratio(m['ratio_idle_library_module'])}; held library / string: "
        f"{fmt_ratio(m['ratio_held_library_string'])}.",
    ]
    return out


def criterion_estimates(target: Path) -> dict:
    out = {}
    for f in (target / "criterion").glob("*/*/new/estimates.json"):
        try:
            out[(f.parts[-4], f.parts[-3])] = json.loads(f.read_text())["median"]["point_estimate"]
        except (OSError, ValueError, KeyError):
            pass
    return out


def load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    target_default = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    if not target_default.is_absolute():
        target_default = ROOT / target_default
    ap.add_argument("--target", default=str(target_default))
    ap.add_argument("--results", default=None)
    ap.add_argument("--valkey", default=os.environ.get("FENCEDLOCK_VALKEY_SERVER", str(ROOT / ".cache/valkey/valkey-server")))
    ap.add_argument("--out", default=str(ROOT / "benches" / "RESULTS.md"))
    ap.add_argument("--section", choices=["growth"], help="print only this section (from <results>/growth.json)")
    opts = ap.parse_args()
    target = Path(opts.target)
    results = Path(opts.results) if opts.results else target / "bench-results"
    server = load(results / "server.json")
    paired = load(results / "client_paired.json")
    contention = load(results / "contention.json")
    profile = load(results / "profile.json")
    memory = load(results / "memory.json")
    functions = load(results / "functions.json")
    growth = load(results / "growth.json")
    redlock_scale = load(results / "redlock_scale.json")
    guard = load(results / "guard.json")
    session = load(results / "session.json")
    if opts.section == "growth":
        print("\n".join(growth_section(growth, redlock_scale)))
        return
    estimates = criterion_estimates(target)
    load_before = ""
    try:
        load_before = (results / "load-before.txt").read_text().strip()
    except OSError:
        pass

    lines = [
        "# fencedlock benchmarks",
        "",
        f"Written by `benches/run-all` on {time.strftime('%Y-%m-%d %H:%M %Z')}. "
        "Every comparison ran on the same machine in the same run; see benches/README.md for the method.",
        "",
        *machine(opts.valkey, load_before),
        "",
    ]
    if server:
        lines += server_section(server) + memory_section(server)
    else:
        lines += ["(no server results: run benches/server.py)"]
    lines += memory_over_time_section(memory)
    if server:
        lines += instructions_section(profile)
    lines += client_section(paired, estimates)
    lines += contention_section(contention, estimates)
    lines += session_section(session)
    lines += functions_section(functions)
    lines += growth_section(growth, redlock_scale)
    lines += guard_section(guard)
    lines += go_section(load(results / "go_locks.json"))
    lines.append("")
    Path(opts.out).write_text("\n".join(lines))
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
