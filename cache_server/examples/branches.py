"""The branch scenario dask-result-cache exists for.

    step_1 -> step_2 -> {step_3a, step_3b}        (each step sleeps 1 s)

Run branch ``a`` in one process (about 3 s), then branch ``b`` in a *fresh* process: it
loads step_2's result from the cache, skips step_1 entirely and runs only step_3b
(about 1 s). The functions are plain, non-pure ``@dask.delayed``, so Dask's own keys are
random in every process; the cache matches them by content.

``--persist`` is the same scenario in the "persist the shared upstream" style: each
session persists ``step_2`` with ``cached_persist`` (session a computes and stores it,
session b loads it from the cache) and then computes its own branch from the persisted
value.

It starts nothing itself: the cache URL comes from Dask's config
(``DASK_RESULT_CACHE__URL=http://127.0.0.1:8780``) or ``--cache``. In a source checkout
``examples/branches.py`` is this file; from an installed package it is
``python -m cache_server.examples.branches`` (what ``dask-cache demo`` runs).

    python examples/branches.py a
    python examples/branches.py b --scheduler local-cluster
    python examples/branches.py b --scheduler tcp://127.0.0.1:8786
    python examples/branches.py a --persist; python examples/branches.py b --persist

The last line printed is JSON (branch, seconds, result, hits, loaded, computed) for
scripts and tests.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import dask
import numpy as np

from client_lib import cached_compute, cached_persist, last_report

__all__ = ["build", "main"]

SLEEP = float(os.environ.get("BRANCHES_SLEEP", "1.0"))


@dask.delayed
def step_1():
    time.sleep(SLEEP)
    return np.arange(100_000, dtype="float64")


@dask.delayed
def step_2(x):
    time.sleep(SLEEP)
    return np.sqrt(x) * 2.0


@dask.delayed
def step_3a(x):
    time.sleep(SLEEP)
    return float(x.sum())


@dask.delayed
def step_3b(x):
    time.sleep(SLEEP)
    return float(x.mean())


def build(branch: str, shared=None):
    if shared is None:
        shared = step_2(step_1())
    return step_3a(shared) if branch == "a" else step_3b(shared)


def run(branch: str, cache: str | None, scheduler: object, explain: bool,
        persist: bool) -> tuple[float, object]:
    """The branch's result and the cache report of its last step."""
    if not persist:
        (result,) = cached_compute(build(branch), cache=cache, scheduler=scheduler,
                                   explain=explain)
        return result, last_report()
    (shared,) = cached_persist(step_2(step_1()), cache=cache, scheduler=scheduler,
                               explain=explain)
    upstream = last_report()
    (result,) = cached_compute(build(branch, shared), cache=cache, scheduler=scheduler,
                               explain=explain)
    report = last_report()
    if upstream is not None and report is not None:  # one report for the session
        report.hits += upstream.hits
        report.loaded += upstream.loaded
        report.computed += upstream.computed
    return result, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("branch", choices=["a", "b"])
    parser.add_argument("--scheduler", default="threads",
                        help="threads | processes | sync | local-cluster | tcp://host:port")
    parser.add_argument("--cache", default=None, help="cache URL (default: dask config)")
    parser.add_argument("--explain", action="store_true")
    parser.add_argument("--persist", action="store_true",
                        help="persist step_2 (cached_persist), then compute the branch")
    args = parser.parse_args(argv)

    client = None
    scheduler: object = args.scheduler
    if args.scheduler == "local-cluster" or args.scheduler.startswith("tcp://"):
        from distributed import Client, LocalCluster

        if args.scheduler == "local-cluster":
            cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0")
            client = Client(cluster)
        else:
            client = Client(args.scheduler)
        scheduler = client

    start = time.perf_counter()
    result, report = run(args.branch, args.cache, scheduler, args.explain, args.persist)
    seconds = time.perf_counter() - start
    if client is not None:
        client.close()
    print(f"branch {args.branch}: {seconds:.2f} s, result {result:.6g}", file=sys.stderr)
    print(json.dumps({
        "branch": args.branch, "scheduler": args.scheduler, "persist": args.persist,
        "seconds": round(seconds, 4),
        "result": result, "hits": report.hits if report else None,
        "loaded": report.loaded if report else None,
        "computed": report.computed if report else None,
        "fallback": report.fallback if report else None,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
