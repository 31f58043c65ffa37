"""Measure 5, array throughput (issue 25): store and load a large float64 array through the
cache against the raw disk, in the same process and run (``bench/_baseline.py``: ``np.save``
+ fsync, and a hot ``np.load`` into a fresh array after a warm-up).

Rows, for random (incompressible) and compressible (runs of 4096 equal values) arrays of
each size:

- store over HTTP (``CacheClient.put``, ``result-cache.direct-write: never``: encode and
  digest, the upload, the server's digest check, chunk files fsynced, atomic rename,
  index), target >= 0.5x of ``np.save`` + fsync;
- store with a direct write (``direct-write: auto``: the worker writes the chunk files into
  the storage's staging area, the server verifies them where they lie and publishes),
  target >= 0.8x;
- load over HTTP (``direct-read: never``), target >= 0.3x of the hot ``np.load``;
- direct read (``direct-read: auto``: the chunk files read in place, verified), target
  >= 0.8x.

Each store writes a new entry and a new object (one element changed: the same bytes again
would be deduplicated, the body checked and dropped), deleted after the next store;
loads are hot (after one untimed load). The shared disk's speed swings within minutes, so
each timed store follows a timed ``np.save`` + fsync, and each timed load a hot ``np.load``
(``_baseline.RawDisk``): every ratio compares medians of neighbouring runs. The server's CPU
seconds per GiB are reported for each row (``/proc``; steadier than wall time on a shared
machine), and the 1-minute load average with every figure.

    python bench/array_throughput.py [--repeat 3] [--sizes 1024,4096] [--smoke]
"""

from __future__ import annotations

import os
import statistics
import tempfile
import uuid
from collections.abc import Callable

import dask
import numpy as np
from _baseline import RawDisk, timed
from _harness import Ratio, cache_server, finish, parse_args, process_cpu_seconds

from client_lib import CacheClient

#: (row, config, target ratio against the baseline's save or load)
STORES = (("store_http", {"result-cache.direct-write": "never"}, 0.5),
          ("store_direct", {"result-cache.direct-write": "auto"}, 0.8))
LOADS = (("load_http", {"result-cache.direct-read": "never"}, 0.3),
         ("load_direct", {"result-cache.direct-read": "auto"}, 0.8))


def _options(parser) -> None:
    parser.add_argument("--sizes", default="1024,4096",
                        help="array sizes in MiB, comma-separated (default 1024,4096)")
    parser.add_argument("--kinds", default="random,compressible")


def make_array(kind: str, nbytes: int) -> np.ndarray:
    n = nbytes // 8
    if kind == "random":
        return np.random.default_rng(0).random(n)
    return np.repeat(np.arange(n // 4096 + 1, dtype="float64"), 4096)[:n]


class Meter:
    """Wall time, server CPU and the load average of one measured call."""

    def __init__(self, server_pid: int) -> None:
        self.pid = server_pid
        self.cpu: list[float] = []
        self.load: list[float] = []

    def __call__(self, run: Callable[[], object]) -> float:
        before = process_cpu_seconds(self.pid)
        seconds = timed(run)
        self.cpu.append(process_cpu_seconds(self.pid) - before)
        self.load.append(os.getloadavg()[0])
        return seconds


def measure_stores(client: CacheClient, value: np.ndarray, meter: Meter, raw: RawDisk,
                   repeat: int) -> tuple[list[float], list[float]]:
    """(store seconds, the np.save + fsync seconds right before each)."""
    def store() -> None:
        # A new object each time: the same bytes under a new task hash would be a
        # deduplicated store (the body checked, then dropped for the object kept).
        value.flat[0] = len(stored) + 0.5
        task_hash = uuid.uuid4().hex
        if not client.put(task_hash, value, 1.0, "array-throughput"):
            raise RuntimeError("the server did not store the array")
        stored.append(task_hash)

    stored: list[str] = []
    store()  # warm-up: connections, imports, the staging area
    meter.cpu.clear()
    meter.load.clear()
    times, saves = [], []
    for _ in range(repeat):
        saves.append(raw.save())
        times.append(meter(store))
        client.delete(stored.pop())
    client.delete(stored.pop())
    return times, saves


def measure_loads(client: CacheClient, task_hash: str, value: np.ndarray, meter: Meter,
                  raw: RawDisk, repeat: int) -> tuple[list[float], list[float]]:
    """(hot load seconds, the hot np.load seconds right before each)."""
    back = client.get(task_hash)  # warm-up, and the check
    if not np.array_equal(back, value):
        raise RuntimeError("the loaded array differs from the stored one")
    del back
    times, loads = [], []
    for _ in range(repeat):
        loads.append(raw.load())
        times.append(meter(lambda: client.get(task_hash)))
    return times, loads


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], repeat=3, extra=_options)
    sizes = [8] if args.smoke else [int(s) for s in args.sizes.split(",")]
    kinds = args.kinds.split(",")
    ratios, details = [], {}
    with tempfile.TemporaryDirectory(prefix="rc-bench-raw-", dir=os.getcwd()) as raw_dir, \
            cache_server(data_dir=raw_dir) as server:
        client = CacheClient(server.url)
        client.stats()
        for mib in sizes:
            for kind in kinds:
                value = make_array(kind, mib * 2**20)
                gib = value.nbytes / 2**30
                raw = RawDisk(value, raw_dir)
                row: dict[str, dict] = {}
                for name, config, target in STORES:
                    meter = Meter(server.pid)
                    with dask.config.set(config):
                        times, saves = measure_stores(client, value, meter, raw, args.repeat)
                    row[name] = _row(times, meter, gib, saves)
                    ratios.append(Ratio(f"{name}[{kind},{mib}MiB]", row[name]["ratio"],
                                        target, higher_is_better=True))
                task_hash = uuid.uuid4().hex
                assert client.put(task_hash, value, 1.0, "array-throughput")
                for name, config, target in LOADS:
                    meter = Meter(server.pid)
                    with dask.config.set(config):
                        times, loads = measure_loads(client, task_hash, value, meter, raw,
                                                     args.repeat)
                    row[name] = _row(times, meter, gib, loads)
                    ratios.append(Ratio(f"{name}[{kind},{mib}MiB]", row[name]["ratio"],
                                        target, higher_is_better=True))
                client.delete(task_hash)
                base = raw.baseline()
                raw.close()
                row["baseline"] = base.to_json()
                del value
                print(f"{kind} {mib} MiB: {base.line()}")
                for name in ("store_http", "store_direct", "load_http", "load_direct"):
                    r = row[name]
                    print(f"  {name:12s} {r['gb_per_s']:.2f} GB/s = {r['ratio']:.2f}x "
                          f"(baseline {r['baseline_gb_per_s']:.2f} GB/s), server "
                          f"{r['server_cpu_s_per_gib']:.2f} CPU-s/GiB (load "
                          f"{r['load_avg']:.1f})")
                details[f"{kind},{mib}MiB"] = row
    finish("array_throughput", ratios, args, sizes=sizes, **details)


def _row(times: list[float], meter: Meter, gib: float, baseline: list[float]) -> dict:
    seconds, base = statistics.median(times), statistics.median(baseline)
    return {"seconds": seconds, "runs": times, "gb_per_s": gib * 2**30 / 1e9 / seconds,
            "baseline_seconds": baseline, "baseline_gb_per_s": gib * 2**30 / 1e9 / base,
            "ratio": base / seconds,
            "server_cpu_s_per_gib": statistics.median(meter.cpu) / gib,
            "load_avg": statistics.median(meter.load)}


if __name__ == "__main__":
    main()
