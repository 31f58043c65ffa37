"""A fresh process using ``CachedClient``, ``cached_compute`` or ``cached_persist`` for the
futures, lease and refresh tests. Prints one JSON line: the results, the report's counts,
the time the work finished (``time.time()``).

    python -m tests.client._futures_child SCENARIO CACHE_URL NAMESPACE [--scheduler ADDR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import dask

from client_lib import CachedClient, cached_compute, last_report


def first(x):
    return x + 1


def second(x):
    return x * 10


def last_v1(x):
    return x - 1


def last_v2(x):
    return x - 2


def slow(x):
    """Sleeps ``SLOW_SECONDS`` (read at run time: not part of the hash); touches
    ``SLOW_MARKER`` when it starts."""
    marker = os.environ.get("SLOW_MARKER")
    if marker:
        Path(marker).touch()
    time.sleep(float(os.environ.get("SLOW_SECONDS", "2")))
    return x * 3


def counter(x):
    """Returns x plus how many times it ran in this namespace (so a recompute shows)."""
    path = Path(os.environ["COUNTER_FILE"])
    n = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(n))
    return x + 1000 * n


def _report(report) -> dict:
    return {k: getattr(report, k) for k in ("hits", "loaded", "computed", "waited",
                                            "waited_loaded")}


def _compute(args: argparse.Namespace, scheduler: object) -> dict:
    if args.scenario == "overlap":  # one slow task per item, in the order given
        task = [dask.delayed(slow, pure=False)(int(i)) for i in args.items.split(",")]
    else:
        func = {"slow": slow, "counter": counter}[args.scenario]
        task = dask.delayed(func, pure=False)(7)
    if args.go:  # start the clock once the cluster is up
        while not Path(args.go).exists():
            time.sleep(0.005)
    (result,) = cached_compute(task, cache=args.cache, namespace=args.namespace,
                               scheduler=scheduler)
    return {"result": result, "report": _report(last_report())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario")
    parser.add_argument("cache")
    parser.add_argument("namespace")
    parser.add_argument("--scheduler", default=None)
    parser.add_argument("--go", default=None, help="wait until this file exists")
    parser.add_argument("--last", default="v1")
    parser.add_argument("--items", default="1,2,3")
    args = parser.parse_args()
    if args.go and args.scheduler != "local-cluster":
        while not Path(args.go).exists():
            time.sleep(0.005)
    started = time.time()
    out: dict = {}
    if args.scenario in ("submit", "chain"):
        from distributed import Client

        with Client(args.scheduler) as client:
            cc = CachedClient(client, cache=args.cache, namespace=args.namespace)
            if args.scenario == "submit":
                single = cc.submit(first, 41, pure=False)
                mapped = cc.map(second, range(5))
                out["result"] = [single.result(), cc.gather(mapped)]
            else:
                last = last_v1 if args.last == "v1" else last_v2
                a = cc.submit(first, 1)
                b = cc.submit(second, a)
                c = cc.submit(last, b)
                out["result"] = c.result()
            out["report"] = _report(cc.report)
    elif args.scheduler == "local-cluster":
        from distributed import Client, LocalCluster

        with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0") as cluster:
            with Client(cluster) as client:
                out.update(_compute(args, client))
    else:
        out.update(_compute(args, args.scheduler or "threads"))
    out["started"] = started
    out["finished"] = time.time()
    print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
