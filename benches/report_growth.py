"""RESULTS.md rows for benches/growth.py (issue 24): how the cost grows, as ratios beside targets.

Kept apart from report.py so each bench's rendering stays next to its own numbers; report.py
calls `growth_section` with the parsed growth.json (or None). Standard library only.
"""

from __future__ import annotations

# The targets, defined once: (ratio key, target, higher is better).
TARGETS = {
    "memory_per_waiter": (2.0, False),
    "handoff_chain": (0.9, True),
    "ping_p99": (2.0, False),
    "acquire_fresh": (0.9, True),
    "acquire_busy": (0.9, True),
    "memory_per_key": (1.3, False),
}
# The waiter count the chain and PING targets are set at.
TARGET_WAITERS = 10_000
COMMAND = "python3 benches/growth.py"


def ratio(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}×"


def judged(name: str, x: float | None, applies: bool = True) -> tuple[str, str]:
    """The target column and the verdict for ratio `name` (no verdict where it does not apply)."""
    target, higher = TARGETS[name]
    shown = f"{'≥' if higher else '≤'} {target}×"
    if x is None or not applies:
        return shown, ""
    x = round(x, 2)  # judged as shown
    if (x >= target) if higher else (x <= target):
        return shown, "met"
    # How far off: a bound exceeded N times, or a floor reached to a share.
    return shown, f"**missed** ({x / target:.2f}× the bound)" if not higher else f"**missed** ({x / target:.0%} of it)"


def waiters_rows(rounds: list[dict]) -> list[str]:
    out = [
        "| waiters on one key | bytes per waiter: fencedlock / `BLPOP` / idle connection | memory ratio | target | "
        "handoff chain, handoffs/s: fencedlock / `BLPOP` | chain ratio | target | PING p99 with / without waiters "
        "(fencedlock; `BLPOP`) | target |",
        "| ---: | ---: | ---: | --- | ---: | ---: | --- | ---: | --- |",
    ]
    for r in rounds:
        n, f, b, i, q = r["waiters"], r["fencedlock"], r["blpop"], r["idle"], r["ratios"]
        at_target = n >= TARGET_WAITERS
        mt, mv = judged("memory_per_waiter", q["memory_per_waiter"])
        ct, cv = judged("handoff_chain", q["handoff_chain"], at_target)
        pt, pv = judged("ping_p99", q["ping_p99_during_vs_before"], at_target)
        out.append(
            f"| {n:,} | {f['bytes_per_conn']:,.0f} / {b['bytes_per_conn']:,.0f} / {i['bytes_per_conn']:,.0f} | "
            f"{ratio(q['memory_per_waiter'])} | {mt}: {mv} | {f['handoffs_per_s']:,.0f} / {b['handoffs_per_s']:,.0f} | "
            f"{ratio(q['handoff_chain'])} | {ct}{': ' + cv if cv else ''} | "
            f"{ratio(q['ping_p99_during_vs_before'])} ({f['ping_p99_us_during']:,.0f} / {f['ping_p99_us_before']:,.0f} µs); "
            f"{ratio(q['blpop_ping_p99_during_vs_before'])} | {pt}{': ' + pv if pv else ''} |"
        )
    return out


def accounting_rows(rounds: list[dict]) -> list[str]:
    out = [
        "",
        "Where a fencedlock waiter's memory goes (bytes per waiter): Redis's `moduleBlockClient` takes two "
        "temporary clients per module-blocked client (`reply_client`, `thread_safe_ctx_client`), each with its "
        "own 16 KB reply buffer that `clientsCron` never shrinks, and pools them when the client is unblocked. "
        "Their size is read from the pool left after the waiters closed (÷ 2N) and from the rate `modulesCron` "
        "trims it (÷ 500/s); the module's share is what remains above a `BLPOP` waiter:",
        "",
        "| waiters | above an idle connection: fencedlock / `BLPOP` | one temporary client: by pool / by trim rate | "
        "two temporary clients | module's share (queue entry, handle) | pool drained after |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rounds:
        f, q = r["fencedlock"], r["ratios"]
        trim = f.get("temp_client_bytes_by_trim")
        out.append(
            f"| {r['waiters']:,} | {q['above_connection_fencedlock']:,.0f} / {q['above_connection_blpop']:,.0f} | "
            f"{f['temp_client_bytes_by_pool']:,.0f} / {'–' if trim is None else f'{trim:,.0f}'} | "
            f"{q['temp_clients_per_waiter_bytes']:,.0f} | {q['module_share_per_waiter']:,.0f} | {f['drain_s']:.1f} s |"
        )
    return out


def keys_rows(rounds: list[dict]) -> list[str]:
    out = [
        "",
        "| held lock keys (and as many strings) | bytes per key: lock / string | memory ratio | target | "
        "`ACQUIRE` / `SET NX PX`, fresh key (ops/s) | ratio | target | busy key (ops/s) | ratio | target |",
        "| ---: | ---: | ---: | --- | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    for r in rounds:
        q = r["ratios"]
        mt, mv = judged("memory_per_key", q["memory_per_key"])
        ft, fv = judged("acquire_fresh", q["acquire_fresh"])
        bt, bv = judged("acquire_busy", q["acquire_busy"])
        out.append(
            f"| {r['keys']:,} | {r['bytes_per_lock_key']:.0f} / {r['bytes_per_string_key']:.0f} | "
            f"{ratio(q['memory_per_key'])} | {mt}: {mv} | {r['acquire_fresh']:,.0f} / {r['set_fresh']:,.0f} | "
            f"{ratio(q['acquire_fresh'])} | {ft}: {fv} | {r['acquire_busy']:,.0f} / {r['set_busy']:,.0f} | "
            f"{ratio(q['acquire_busy'])} | {bt}: {bv} |"
        )
    reclaimed = [r for r in rounds if "reclaim" in r]
    if reclaimed:
        out += [
            "",
            "Ending them all at once: the lock keys released and reclaimed by the module's sweep "
            "(`reclaim-after-ms 0`), the strings expired by Redis's active expiry (`PEXPIRE … 1`), with a PING "
            "prober running (its longest round trip = the longest event-loop stall it saw):",
            "",
            "| keys | reclaim / expiry (keys/s) | ratio | longest PING: reclaim / expiry | PING p99: reclaim / expiry | "
            "`LATENCY LATEST` (ms) |",
            "| ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for r in reclaimed:
            rc, ex = r["reclaim"], r["expiry"]
            lat = ", ".join(f"{k} {v}" for k, v in sorted({**rc["latency_latest_ms"], **ex["latency_latest_ms"]}.items()))
            out.append(
                f"| {r['keys']:,} | {rc['keys_per_s']:,.0f} / {ex['keys_per_s']:,.0f} | {ratio(r['ratios']['reclaim_rate'])} | "
                f"{rc['ping_max_us'] / 1000:.1f} / {ex['ping_max_us'] / 1000:.1f} ms | "
                f"{rc['ping_p99_us']:.0f} / {ex['ping_p99_us']:.0f} µs | {lat} |"
            )
    return out


def redlock_rows(r: dict | None) -> list[str]:
    """`cargo bench --bench redlock_scale`: Redlock over 3/5/7/9 masters vs rslock, paired."""
    if not r:
        return []
    out = [
        "",
        "Redlock over more masters (`cargo bench --bench redlock_scale`, paired: alternating ~25 ms blocks, "
        "median of the per-round time ratios; plain `Redlock`, no raise step, vs `rslock` on the same masters):",
        "",
        "| masters | µs per lease: `Redlock` / `rslock` (medians) | time ratio (lower = fencedlock faster) | rounds |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for m in sorted(r, key=int):
        ours, theirs = r[m].get("fencedlock_redlock_plain", []), r[m].get("rslock", [])
        if not ours or not theirs:
            continue
        per_round = sorted(a / b for a, b in zip(ours, theirs))
        med = per_round[len(per_round) // 2]
        out.append(
            f"| {m} | {sorted(ours)[len(ours) // 2]:,.0f} / {sorted(theirs)[len(theirs) // 2]:,.0f} | "
            f"{ratio(med)} | {len(per_round)} |"
        )
    return out


def growth_section(g: dict | None, redlock: dict | None = None) -> list[str]:
    out = ["", "## How the cost grows (issue 24): waiters on one key, lock keys", ""]
    if g is None:
        return out + [f"(no growth results: run {COMMAND})"] + redlock_rows(redlock)
    out += [
        f"`{COMMAND}` on one {g.get('server', 'redis-server')} {g.get('server_version') or ''} "
        f"({g.get('seconds', 0):.0f} s). Waiters: N connections blocked on one key "
        "(`ACQUIRE … BLOCK 0` behind a holder; `BLPOP k 0`; idle after a PING), `used_memory` growth per "
        "connection after the reply buffers' peak reset; the chain: the holder lets go and each served waiter "
        "passes it on at once (`RELEASE`; `LPUSH`), N handoffs, served in FIFO order with rising fences "
        f"(checked), the median of {len(g['waiters'][0]['fencedlock'].get('handoffs_per_s_runs', [0])) if g.get('waiters') else 0} "
        f"chains with the server and the client on CPU {g.get('chain_cpu')} (see growth.py's `Pinned`); "
        "PING p99 on another connection with the waiters blocked vs before they connected.",
        "",
    ]
    if g.get("waiters"):
        out += waiters_rows(g["waiters"]) + accounting_rows(g["waiters"])
    if g.get("keys"):
        out += keys_rows(g["keys"])
    return out + redlock_rows(redlock)
