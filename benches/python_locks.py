#!/usr/bin/env python3
"""The Python package against redis-py's Lock and python-redis-lock, side by side in one run
on one Redis 7.0 with the module (issue 31) and one without it (issue 44: the managed path,
where the locker loads the Functions library itself, as on a managed service):

1. a lease (acquire + release) against redis-py's Lock, python-redis-lock's, and the two raw
   commands redis-py's sends (SET NX PX + EVALSHA), on each server, in alternating rounds: the
   median of per-round time ratios;
2. a hot key: 32 threads each taking the lock, holding it ~1 ms and releasing it, for each
   library in turn (alternating rounds): grants/s, their ratio to redis-py's Lock, and the
   fewest grants any thread got (fairness: 0 is a starved thread).

Run with the Python venv of scripts/setup:
    .cache/python-venv/bin/python benches/python_locks.py [--quick] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python" / "src"))

import redis  # noqa: E402
import redis_lock  # noqa: E402

import fencedlock  # noqa: E402

PORT = 21990
MODULE = Path(os.environ.get("FENCEDLOCK_MODULE", REPO / "target/release/libfencedlock_module.so"))


def start_server(workdir: str, port: int, module: bool) -> subprocess.Popen:
    load = ["--loadmodule", str(MODULE)] if module else []
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", workdir, *load],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    for _ in range(500):
        try:
            client.ping()
            return proc
        except redis.ConnectionError:
            time.sleep(0.01)
    proc.kill()
    raise SystemExit("redis-server did not start")


def timed(n: int, one: Callable[[int], None]) -> float:
    started = time.perf_counter()
    for i in range(n):
        one(i)
    return (time.perf_counter() - started) / n


def lease_round(client: redis.Redis, n: int) -> Dict[str, float]:
    locker = fencedlock.Locker(client, ttl=30)
    release = client.register_script(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end")

    def ours(i: int) -> None:
        lease = locker.acquire("bench:ours")
        assert lease is not None
        lease.release()

    def redis_py(i: int) -> None:
        lock = client.lock("bench:redis-py", timeout=30)
        assert lock.acquire(blocking=False)
        lock.release()

    def python_redis_lock(i: int) -> None:
        lock = redis_lock.Lock(client, "bench:python-redis-lock", expire=30)
        assert lock.acquire(blocking=False)
        lock.release()

    def raw(i: int) -> None:
        token = os.urandom(16)
        assert client.set("bench:raw", token, nx=True, px=30000)
        release(keys=["bench:raw"], args=[token])

    return {"fencedlock": timed(n, ours), "redis_py_lock": timed(n, redis_py),
            "python_redis_lock": timed(n, python_redis_lock), "raw_commands": timed(n, raw)}


def summary(per_round: List[Dict[str, float]]) -> Dict[str, float]:
    """Each lease's median per-round time ratio to redis-py's Lock, and its median time (us)."""
    out: Dict[str, float] = {}
    for name in per_round[0]:
        out[f"{name}_vs_redis_py_lock"] = statistics.median(t[name] / t["redis_py_lock"] for t in per_round)
        out[f"{name}_us"] = statistics.median(t[name] for t in per_round) * 1e6
    return out


def hot_key(take: Callable[[], Callable[[], None]], threads: int, seconds: float) -> List[int]:
    """Grants per thread while each takes the lock, holds ~1 ms and gives it back."""
    grants = [0] * threads
    stop = time.monotonic() + seconds

    def worker(i: int) -> None:
        while time.monotonic() < stop:
            release = take()
            time.sleep(0.001)
            release()
            grants[i] += 1

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return grants


def contenders(client: redis.Redis) -> Dict[str, Callable[[], Callable[[], None]]]:
    locker = fencedlock.Locker(client, ttl=10)

    def ours() -> Callable[[], None]:
        while True:
            lease = locker.acquire("hot:ours", wait=10)
            if lease is not None:
                return lease.release

    def redis_py() -> Callable[[], None]:
        lock = client.lock("hot:redis-py", timeout=10)
        lock.acquire(blocking=True)
        return lock.release

    def python_redis_lock() -> Callable[[], None]:
        lock = redis_lock.Lock(client, "hot:python-redis-lock", expire=10)
        lock.acquire(blocking=True)
        return lock.release

    return {"fencedlock": ours, "redis_py_lock": redis_py, "python_redis_lock": python_redis_lock}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    rounds, n, seconds = (3, 500, 1.0) if args.quick else (7, 2000, 3.0)
    workdir = tempfile.mkdtemp(prefix="fencedlock-pybench-")
    server = start_server(workdir, PORT, module=True)
    managed = start_server(workdir, PORT + 1, module=False)
    try:
        client = redis.Redis(port=PORT, max_connections=64)
        bare = redis.Redis(port=PORT + 1, max_connections=64)
        for warm in (client, bare):  # connections, scripts, the library's load
            lease_round(warm, 200)
        # The two servers alternate round by round, so both see the same drift in the load.
        with_module: List[Dict[str, float]] = []
        without: List[Dict[str, float]] = []
        for _ in range(rounds):
            with_module.append(lease_round(client, n))
            without.append(lease_round(bare, n))
        hot: Dict[str, List[List[int]]] = {}
        libs = contenders(client)
        for _ in range(max(rounds // 2, 2)):
            for name, take in libs.items():
                hot.setdefault(name, []).append(hot_key(take, 32, seconds))
        rates = {name: statistics.median(sum(g) / seconds for g in runs) for name, runs in hot.items()}
        fewest = {name: min(min(g) for g in runs) for name, runs in hot.items()}
        module_side = summary(with_module)
        result = {
            "lease_vs_redis_py_lock": module_side["fencedlock_vs_redis_py_lock"],
            "raw_commands_vs_redis_py_lock": module_side["raw_commands_vs_redis_py_lock"],
            "python_redis_lock_vs_redis_py_lock": module_side["python_redis_lock_vs_redis_py_lock"],
            "lease_us": module_side["fencedlock_us"],
            "redis_py_lock_us": module_side["redis_py_lock_us"],
            "managed": summary(without),
            "hot_key_grants_per_s": rates,
            "hot_key_vs_redis_py_lock": {k: v / rates["redis_py_lock"] for k, v in rates.items()},
            "hot_key_fewest_grants_per_thread": fewest,
            "rounds": rounds, "leases_per_round": n, "hot_key_seconds": seconds, "threads": 32,
            "redis_py": redis.__version__,
        }
    finally:
        for proc in (server, managed):
            proc.kill()
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"lease (acquire + release) / redis-py Lock: {result['lease_vs_redis_py_lock']:.2f}x "
          f"({result['lease_us']:.0f} vs {result['redis_py_lock_us']:.0f} us); the two raw commands: "
          f"{result['raw_commands_vs_redis_py_lock']:.2f}x; python-redis-lock "
          f"{result['python_redis_lock_vs_redis_py_lock']:.2f}x")
    bare = result["managed"]
    print(f"without the module (the Functions library): lease / redis-py Lock "
          f"{bare['fencedlock_vs_redis_py_lock']:.2f}x ({bare['fencedlock_us']:.0f} vs "
          f"{bare['redis_py_lock_us']:.0f} us); python-redis-lock {bare['python_redis_lock_vs_redis_py_lock']:.2f}x; "
          f"the two raw commands {bare['raw_commands_vs_redis_py_lock']:.2f}x")
    for name in rates:
        print(f"hot key, 32 threads ~1 ms each, {name}: {rates[name]:.0f} grants/s "
              f"({result['hot_key_vs_redis_py_lock'][name]:.2f}x redis-py Lock), fewest per thread {fewest[name]}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
