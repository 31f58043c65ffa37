"""Measure 5, array throughput: store and load a 1 GiB float64 array through the service
(``CacheClient.put`` / ``CacheClient.get``: encode and digest, HTTP streaming, the server's
digest check, Zarr write with fsync and atomic rename; on load the server's chunk-by-chunk
read and check against the chunk digests, HTTP, the client's digest check) against
``np.save`` (+ fsync) and ``np.load`` of the same array on the same disk (the server's data
directory is beside the raw file).

Two arrays: random values (incompressible) and a compressible one (runs of equal values).
Loads read from the page cache on both sides (each store is followed by its load). The
entry is deleted after each run so the next store writes again. Ratios are throughput
ratios, service / raw (higher is better). Targets (issue 12): store >= 0.5x, load over HTTP
>= 0.25x (the server streams from storage chunk by chunk; direct reads: bench/direct_read.py).

    python bench/array_throughput.py [--repeat 3] [--mib 1024] [--smoke]
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import dask
import numpy as np
from _harness import Ratio, cache_server, finish, parse_args, process_cpu_seconds

from client_lib import CacheClient


def _options(parser) -> None:
    parser.add_argument("--mib", type=int, default=1024, help="array size in MiB")


def arrays(nbytes: int) -> dict[str, np.ndarray]:
    n = nbytes // 8
    return {
        "random": np.random.default_rng(0).random(n),
        "compressible": np.repeat(np.arange(n // 4096 + 1, dtype="float64"), 4096)[:n],
    }


def save_raw(path: Path, value: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, value)
        f.flush()
        os.fsync(f.fileno())


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], repeat=3, extra=_options)
    # Over HTTP: this machine sees the server's storage, where loads would read in place
    # (measured by bench/direct_read.py).
    dask.config.set({"result-cache.direct-read": "never"})
    mib = 8 if args.smoke else args.mib
    ratios, details = [], {}
    with tempfile.TemporaryDirectory(prefix="rc-bench-raw-", dir=os.getcwd()) as raw_dir:
        raw_path = Path(raw_dir) / "array.npy"
        with cache_server(data_dir=raw_dir) as server:
            client = CacheClient(server.url)
            client.stats()
            for kind, value in arrays(mib * 2**20).items():
                gb = value.nbytes / 1e9
                t: dict[str, list[float]] = {"save": [], "np_load": [], "put": [], "get": []}
                cpu = {"server_put": 0.0, "server_get": 0.0}
                for _ in range(args.repeat):
                    start = time.perf_counter()
                    save_raw(raw_path, value)
                    t["save"].append(time.perf_counter() - start)
                    start = time.perf_counter()
                    loaded = np.load(raw_path)
                    t["np_load"].append(time.perf_counter() - start)
                    del loaded
                    raw_path.unlink()

                    task_hash = uuid.uuid4().hex
                    server_cpu = process_cpu_seconds(server.pid)
                    start = time.perf_counter()
                    assert client.put(task_hash, value, 1.0, "array-throughput")
                    t["put"].append(time.perf_counter() - start)
                    middle = process_cpu_seconds(server.pid)
                    start = time.perf_counter()
                    back = client.get(task_hash)
                    t["get"].append(time.perf_counter() - start)
                    cpu["server_put"] += (middle - server_cpu) / args.repeat
                    cpu["server_get"] += (process_cpu_seconds(server.pid) - middle) / args.repeat
                    if not np.array_equal(back, value):
                        raise RuntimeError("the loaded array differs from the stored one")
                    del back
                    client.delete(task_hash)
                med = {k: statistics.median(v) for k, v in t.items()}
                print(f"{kind:13s} {gb:.2f} GB  np.save+fsync {gb / med['save']:.2f} GB/s  "
                      f"put {gb / med['put']:.2f} GB/s  |  np.load {gb / med['np_load']:.2f} GB/s"
                      f"  get {gb / med['get']:.2f} GB/s  (server CPU s: put "
                      f"{cpu['server_put']:.2f}, get {cpu['server_get']:.2f})")
                details[kind] = {"gb": gb, "seconds": med, "runs": t, "server_cpu": cpu,
                                 "gb_per_s": {k: gb / v for k, v in med.items()}}
                ratios.append(Ratio(f"store_vs_np_save[{kind}]", med["save"] / med["put"], 0.5,
                                    higher_is_better=True))
                ratios.append(Ratio(f"load_vs_np_load[{kind}]", med["np_load"] / med["get"],
                                    0.25, higher_is_better=True))
    finish("array_throughput", ratios, args, mib=mib, **details)


if __name__ == "__main__":
    main()
