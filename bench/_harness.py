"""What every benchmark script shares: arguments, repeated timing, a cache server of its own,
and the result lines the smoke test (``tests/test_bench_smoke.py``) reads.

Every script prints human-readable lines, then one ``ratio`` line per measure and, last, one
JSON line ``{"bench": ..., "ratios": {...}, ...}``. A ratio compares a figure with a baseline
measured in the same run (the machines are noisy): both are medians of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "BENCH_DIR",
    "REPO_ROOT",
    "Ratio",
    "cache_server",
    "finish",
    "median_seconds",
    "process_cpu_seconds",
    "parse_args",
    "own_redis",
    "run_python",
    "seed_index",
]

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent


def parse_args(description: str, *, repeat: int = 5,
               extra: Callable[[argparse.ArgumentParser], None] | None = None
               ) -> argparse.Namespace:
    """``--smoke`` (tiny sizes, one run: only proves the script works), ``--repeat N``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes and a single run (for the test suite)")
    parser.add_argument("--repeat", type=int, default=repeat,
                        help=f"runs per figure; the median is reported (default {repeat})")
    if extra is not None:
        extra(parser)
    args = parser.parse_args()
    # Stopped with SIGTERM, unwind (stop the cache server, remove temporary directories).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.smoke:
        args.repeat = 1
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def median_seconds(run: Callable[[], Any], repeat: int,
                   setup: Callable[[], Any] | None = None) -> tuple[float, list[float]]:
    """Median wall time of ``run()`` over ``repeat`` runs (``setup()`` before each, untimed)."""
    times = []
    for _ in range(repeat):
        if setup is not None:
            setup()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``; 10 ms ticks).
    On a shared machine CPU time is steadier than wall time: it shows where the work is."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def redis_cpu_seconds(r: Any) -> float:
    """User + system CPU seconds of the Redis server behind client ``r`` so far."""
    cpu = r.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


class Ratio:
    """One measured ratio against its target: ``value <= target`` (or ``>=`` with
    ``higher_is_better``); ``target=None``: reported, no target."""

    def __init__(self, name: str, value: float, target: float | None, *,
                 higher_is_better: bool = False, note: str = "") -> None:
        self.name, self.value = name, float(value)
        self.target = None if target is None else float(target)
        self.higher_is_better = higher_is_better
        self.note = note

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        if math.isnan(self.value):
            return False
        return self.value >= self.target if self.higher_is_better else self.value <= self.target

    def line(self) -> str:
        note = f"  ({self.note})" if self.note else ""
        if self.target is None:
            return f"ratio {self.name}: {self.value:.3f} (no target){note}"
        op = ">=" if self.higher_is_better else "<="
        verdict = "met" if self.met else "MISSED"
        return (f"ratio {self.name}: {self.value:.3f} (target {op} {self.target:g}, "
                f"{verdict}){note}")


def finish(bench: str, ratios: list[Ratio], args: argparse.Namespace,
           **details: Any) -> None:
    """Print the ratio lines and the closing JSON line."""
    for ratio in ratios:
        print(ratio.line())
    print(json.dumps({
        "bench": bench,
        "smoke": bool(args.smoke),
        "repeat": args.repeat,
        "machine": machine(),
        "ratios": {r.name: round(r.value, 4) for r in ratios},
        "met": {r.name: r.met for r in ratios},
        **details,
    }, default=str))
    sys.stdout.flush()


def machine() -> dict[str, Any]:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "load_1min": load}


@contextmanager
def cache_server(data_dir: str | os.PathLike[str] | None = None, *,
                 redis_url: str | None = None, redis_prefix: str | None = None,
                 env: dict[str, str] | None = None) -> Iterator[Any]:
    """A real cache server (``start_server``, embedded Redis unless ``redis_url``) on a
    temporary data directory, stopped and removed afterwards."""
    from cache_server.launch import start_server

    with tempfile.TemporaryDirectory(prefix="rc-bench-", dir=data_dir) as tmp:
        with start_server(Path(tmp) / "server", redis_url=redis_url,
                          redis_prefix=redis_prefix, env=env) as server:
            yield server


def run_python(*argv: str, env: dict[str, str] | None = None,
               timeout: float = 600) -> tuple[dict[str, Any], float]:
    """Run ``python argv...`` in a fresh process; (its last stdout line as JSON, wall
    seconds including interpreter start)."""
    import subprocess

    start = time.perf_counter()
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, cwd=REPO_ROOT)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{argv} exited with {done.returncode}:\n{done.stderr[-3000:]}")
    lines = done.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(f"{argv} printed nothing:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1]), wall


@contextmanager
def own_redis() -> Iterator[Any]:
    """A private redis-server (the embedded one's binary and settings, unix socket) for
    benchmarks that compare with raw Redis; yields a ``redis.Redis`` with ``.url``."""
    import redis

    from cache_server.index.embedded import EmbeddedRedis

    with tempfile.TemporaryDirectory(prefix="rc-bench-redis-") as tmp:
        embedded = EmbeddedRedis(Path(tmp) / "redis")
        url = embedded.start()
        try:
            client = redis.Redis.from_url(url)
            client.url = url
            yield client
        finally:
            embedded.stop()


def seed_index(r: Any, hashes: list[str], prefix: str = "rc:") -> None:
    """Index every other hash straight in Redis (the server's membership set and manifest
    keys): storing that many objects through HTTP would only slow the setup down."""
    indexed = hashes[::2]
    with r.pipeline(transaction=False) as pipe:
        for start in range(0, len(indexed), 10_000):
            part = indexed[start:start + 10_000]
            pipe.sadd(f"{prefix}members", *part)
            pipe.mset({f"{prefix}m:{h}": "{}" for h in part})
        pipe.execute()
