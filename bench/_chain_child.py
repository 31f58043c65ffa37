"""One side of measure 6, run by ``bench/vs_graphchain.py`` in its own environment.

    python _chain_child.py graphchain --n 1000 --repeat 3 --dir DIR --mode auto|all
    python _chain_child.py ours --n 1000 --repeat 3 --cache URL --mode auto|all

Both build the same old-style tuple graph, ``t0 = (inc, 0)``, ``t{i} = (inc, t{i-1})``,
and time, in this process and on Dask's synchronous scheduler: the plain ``dask.get`` of
the graph (the baseline), a cold run with an empty cache (a new directory or namespace per
repetition) and a warm run right after it. ``--mode all`` makes both store every task
(graphchain ``write_to_cache=True``, our ``policy="all"``); ``auto`` is each tool's
default. Prints one JSON line. Imports only the standard library at the top: the
graphchain side runs on Dask 2024.8 without this project installed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid


def inc(x: int) -> int:
    return x + 1


def chain(n: int) -> dict:
    dsk: dict = {"t0": (inc, 0)}
    for i in range(1, n):
        dsk[f"t{i}"] = (inc, f"t{i - 1}")
    return dsk


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def run_graphchain(args: argparse.Namespace, dsk: dict, key: str) -> dict:
    import dask
    import graphchain

    def get(location: str):
        cached = graphchain.optimize(dsk, key, location=location)
        if args.mode == "all":
            for task in cached.values():  # (CachedComputation, *dependencies)
                task[0].write_to_cache = True
        return dask.get(cached, key)

    cold, warm = [], []
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        for i in range(args.repeat):
            location = f"{root}/cache-{i}"
            seconds, value = timed(lambda location=location: get(location))
            assert value == args.n, value
            cold.append(seconds)
            seconds, value = timed(lambda location=location: get(location))
            assert value == args.n, value
            warm.append(seconds)
    return {"cold": cold, "warm": warm, "dask": dask.__version__}


def run_ours(args: argparse.Namespace, dsk: dict, key: str) -> dict:
    import dask
    from dask.delayed import Delayed

    from client_lib import CacheClient, cached_compute, last_report

    cache = CacheClient(args.cache)
    policy = "all" if args.mode == "all" else None
    x = Delayed(key, dsk)
    cached_compute(Delayed("t0", {"t0": (inc, 0)}), cache=cache,
                   namespace=uuid.uuid4().hex, scheduler="sync")  # connect, warm imports
    cold, warm, loaded = [], [], []
    for _ in range(args.repeat):
        namespace = uuid.uuid4().hex
        run = lambda namespace=namespace: cached_compute(  # noqa: E731
            x, cache=cache, namespace=namespace, scheduler="sync", policy=policy)[0]
        seconds, value = timed(run)
        assert value == args.n and last_report().hits == 0, value
        cold.append(seconds)
        seconds, value = timed(run)
        assert value == args.n and not last_report().fallback, value
        warm.append(seconds)
        loaded.append(last_report().loaded)
    return {"cold": cold, "warm": warm, "loaded": loaded, "dask": dask.__version__}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("side", choices=["graphchain", "ours"])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mode", choices=["auto", "all"], default="auto")
    parser.add_argument("--dir", default=None, help="graphchain: where its caches go")
    parser.add_argument("--cache", help="ours: the cache server URL")
    args = parser.parse_args()
    # graphchain hashes a task by recursing through its dependencies: a 1000-deep chain
    # needs more than Python's default 1000 frames.
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20 * args.n))
    import dask

    dsk, key = chain(args.n), f"t{args.n - 1}"
    # The baseline at its best: a first dask.get pays one-off costs (imports, caches), and
    # a slow baseline made graphchain's cold overhead negative at --smoke sizes (20 tasks).
    dask.get(dsk, key)
    plain = []
    for _ in range(args.repeat):
        seconds, value = timed(lambda: dask.get(dsk, key))
        assert value == args.n
        plain.append(seconds)
    runner = run_graphchain if args.side == "graphchain" else run_ours
    result = runner(args, dsk, key)
    result["plain"] = plain
    result["median"] = {k: statistics.median(v) for k, v in result.items()
                        if k in ("plain", "cold", "warm")}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
