"""Direct reads and lazy reopening (issue 12, parts 2 and 3): load a cached 1 GiB float64
array in place (``CacheClient.get`` with ``result-cache.direct-read: auto``: the location
request, parallel chunk reads into one buffer, the digest check) against the shared
baseline (``bench/_baseline.py``: a hot ``np.load`` of the same array from the same disk,
after a warm-up), both hot; over HTTP for reference. Then open a
cached 10 GiB array (zeros, stored compressed by streaming them to the server) with
``open_cached`` and compare the time with the 0.2 s budget; ``da.from_zarr`` of the same
store is the baseline.

Targets: direct read >= 0.8x ``np.load`` (issue 25); lazy open <= 0.2 s (ratio to 0.2 s <= 1).

    python bench/direct_read.py [--repeat 5] [--mib 1024] [--lazy-gib 10] [--smoke]
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid

import dask
import dask.array as da
import httpx
import numpy as np
import xxhash
from _baseline import disk_baseline, hot_seconds
from _harness import Ratio, cache_server, finish, parse_args

from client_lib import CacheClient, open_cached, task_hashes

PIECE = 16 * 2**20


def _options(parser) -> None:
    parser.add_argument("--mib", type=int, default=1024, help="loaded array, MiB")
    parser.add_argument("--lazy-gib", type=float, default=10.0, help="lazily opened array, GiB")


def hot(run, repeat: int) -> float:
    return hot_seconds(run, repeat)[0]


def store_zeros(url: str, task_hash: str, n: int) -> None:
    """PUT ``np.zeros(n)`` streamed in pieces: never all of it in memory."""
    shape = f"[{n}]"
    hasher = xxhash.xxh3_128(f"ndarray\n<f8\n{shape}\n".encode())
    zeros = bytes(PIECE)
    sizes = [min(PIECE, n * 8 - start) for start in range(0, n * 8, PIECE)]
    for size in sizes:
        hasher.update(memoryview(zeros)[:size])
    headers = {"X-Result-Kind": "ndarray", "X-Result-Dtype": "<f8", "X-Result-Shape": shape,
               "X-Result-Digest": hasher.hexdigest(), "X-Result-Compute-Seconds": "60",
               "X-Result-Label": "zeros", "Content-Length": str(n * 8)}
    body = (memoryview(zeros)[:size] for size in sizes)
    response = httpx.put(f"{url}/v1/objects/{task_hash}", content=body, headers=headers,
                         timeout=600)
    response.raise_for_status()


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], repeat=5, extra=_options)
    mib = 8 if args.smoke else args.mib
    lazy_gib = 0.05 if args.smoke else args.lazy_gib
    ratios, details = [], {}
    with tempfile.TemporaryDirectory(prefix="rc-bench-raw-", dir=os.getcwd()) as raw_dir:
        with cache_server(data_dir=raw_dir) as server:
            client = CacheClient(server.url)
            value = np.random.default_rng(0).random(mib * 2**20 // 8)
            task_hash = uuid.uuid4().hex
            assert client.put(task_hash, value, 60.0, "random")
            gb = value.nbytes / 1e9
            baseline = disk_baseline(value, raw_dir, args.repeat)
            t_np = baseline.load
            t_direct = hot(lambda: client.get(task_hash), args.repeat)
            with dask.config.set({"result-cache.direct-read": "never"}):
                t_http = hot(lambda: client.get(task_hash), max(1, args.repeat // 2))
            if not np.array_equal(client.get(task_hash), value):
                raise RuntimeError("the directly read array differs from the stored one")
            print(f"load {gb:.2f} GB: np.load {gb / t_np:.2f} GB/s, direct read "
                  f"{gb / t_direct:.2f} GB/s, HTTP {gb / t_http:.2f} GB/s")
            details["load"] = {"gb": gb, "seconds": {"np_load": t_np, "direct": t_direct,
                                                     "http": t_http},
                               "baseline": baseline.to_json(),
                               "load_avg": os.getloadavg()[0]}
            ratios.append(Ratio("direct_read_vs_np_load", t_np / t_direct, 0.8,
                                higher_is_better=True))
            ratios.append(Ratio("http_load_vs_np_load", t_np / t_http, None))

            n = int(lazy_gib * 2**30) // 8
            x = da.zeros(n, chunks=2**24)
            (output,) = [h for k, h in task_hashes(x).items()
                         if str(k).startswith("finalize-")]
            start = time.perf_counter()
            store_zeros(server.url, output, n)
            stored = time.perf_counter() - start
            t_open = hot(lambda: open_cached(x, cache=server.url), args.repeat)
            lazy = open_cached(x, cache=server.url)
            if lazy.shape != (n,) or lazy[-5:].sum().compute() != 0:
                raise RuntimeError("the lazily opened array is not the stored one")
            zarr_dir = client.locate(output).path
            t_zarr = hot(lambda: da.from_zarr(str(zarr_dir)), args.repeat)
            print(f"lazy open of {n * 8 / 2**30:.1f} GiB ({lazy.npartitions} chunks): "
                  f"open_cached {t_open * 1e3:.1f} ms, da.from_zarr {t_zarr * 1e3:.1f} ms "
                  f"(stored in {stored:.1f} s)")
            details["lazy_open"] = {"gib": n * 8 / 2**30, "chunks": lazy.npartitions,
                                    "seconds": {"open_cached": t_open, "from_zarr": t_zarr,
                                                "store": stored}}
            ratios.append(Ratio("lazy_open_vs_budget_0.2s", t_open / 0.2, 1.0))
            ratios.append(Ratio("lazy_open_vs_from_zarr", t_open / t_zarr, None))
    finish("direct_read", ratios, args, mib=mib, **details)


if __name__ == "__main__":
    main()
