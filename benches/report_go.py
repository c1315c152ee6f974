"""The "Go client" section of RESULTS.md, from <results>/go_locks.json (benches/go, issue 45).

Standard library only; report.py imports it.
"""

from __future__ import annotations

COMMAND = "benches/go: `go run . [--quick]` (run-all builds it as target/go-locks)"

# Targets of issue 45: a lease ≤ 1.0× each incumbent's time with the module, ≤ 1.1× on the
# library; on the hot key ≥ 2× redsync's grants/s and no starved goroutine.
LEASE_TARGET = {"lease": 1.0, "managed": 1.1}
HOT_TARGET = 2.0

# The commands the libraries send (commandstats also counts those their scripts call inside).
CLIENT_COMMANDS = {"FENCEDLOCK.ACQUIRE", "FENCEDLOCK.RELEASE", "fcall", "evalsha", "set"}

NAMES = {
    "github.com/go-redsync/redsync/v4": "redsync",
    "github.com/bsm/redislock": "bsm/redislock",
    "github.com/redis/go-redis/v9": "go-redis",
}


def _ratio(x: float | None) -> str:
    return "–" if not x else f"{x:.2f}×"


def _verdict(ratio: float | None, target: float, higher_is_better: bool = False) -> str:
    if not ratio:
        return ""
    ok = ratio >= target if higher_is_better else ratio <= target
    return "met" if ok else "**missed**"


def go_section(g: dict | None) -> list[str]:
    if not g:
        return ["", "## Go client", "", "(no results: run benches/go, `go run .` there)"]
    versions = ", ".join(f"{NAMES.get(path, path)} {v}" for path, v in sorted(g.get("versions", {}).items()))
    out = [
        "",
        "## Go client",
        "",
        f"The Go package against redsync and bsm/redislock ({versions}; {g['go']}, GOMAXPROCS "
        f"{g['gomaxprocs']}), on {g['redis']} with the module and on a second server without it "
        f"(the locker loads the Functions library). {COMMAND}. A lease: {g['rounds']} rounds of "
        f"{g['leases_per_round']} leases each, in alternating turns of 50, one key reused per "
        "library; the ratio is the median of per-round ratios, client CPU is this process's per "
        "lease.",
        "",
    ]
    for side, title in (("lease", "with the module"), ("managed", "without the module (the Functions library)")):
        s = g[side]
        target = LEASE_TARGET[side]
        out += [
            f"| one lease (acquire + release), {title}, load {s['load'][0]:.1f}–{s['load'][1]:.1f} "
            f"| µs per lease | client CPU µs | ÷ redsync | ÷ bsm/redislock | target (≤ {target:.1f}× each) |",
            "| --- | ---: | ---: | ---: | ---: | --- |",
        ]
        for name, r in sorted(s["rows"].items(), key=lambda kv: kv[1]["us_per_lease"]):
            verdict = ""
            if name == "fencedlock":
                verdicts = {_verdict(r["ratio_to_redsync"], target), _verdict(r["ratio_to_redislock"], target)}
                verdict = "**missed**" if "**missed**" in verdicts else "met"
            out.append(
                f"| {name} | {r['us_per_lease']:.0f} | {r['client_cpu_us_per_lease']:.0f} | "
                f"{_ratio(r['ratio_to_redsync'])} | {_ratio(r['ratio_to_redislock'])} | {verdict} |"
            )
        calls = {k: v for k, v in s.get("server_usec_per_call", {}).items() if k in CLIENT_COMMANDS}
        if calls:
            out += ["", "Server µs per call (INFO commandstats over the rounds, the commands the clients send): " + ", ".join(
                f"`{k}` {v['usec_per_call']:.1f}" for k, v in sorted(calls.items())) + "."]
        out.append("")
    out += [
        f"| hot key: {g['holders']} goroutines holding ~1 ms, {g['hot_seconds']:.0f} s × {g['hot_rounds']} "
        f"rounds, load {g['hot_load'][0]:.1f}–{g['hot_load'][1]:.1f} | grants/s | ÷ redsync | fewest grants "
        f"of a goroutine | most | longest wait (ms) | errors | target (≥ {HOT_TARGET:.0f}×, none starved) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, h in sorted(g["hot"].items(), key=lambda kv: -kv[1]["grants_per_s"]):
        verdict = ""
        if name.startswith("fencedlock"):
            ok = h["ratio_to_redsync"] >= HOT_TARGET and h["fewest_grants"] > 0
            verdict = "met" if ok else "**missed**"
        out.append(
            f"| {name} | {h['grants_per_s']:.0f} | {_ratio(h['ratio_to_redsync'])} | {h['fewest_grants']} | "
            f"{h['most_grants']} | {h['longest_wait_ms']:.0f} | {h['errors']} | {verdict} |"
        )
    out += [
        "",
        f"One holder at a time allows 1 / ({g['hold_ms']:.2f} ms measured hold + one round trip) ≈ "
        f"{g['limit_grants_per_s']:.0f} grants/s; see docs/performance.md, \"The Go client\".",
    ]
    return out
