"""Measure 11, the array branch (issue 24): ``y = x.map_blocks(f)``, 16 blocks of 8 MiB,
``f`` 0.2 s per block; process A computes ``y.mean(axis=0)``, a fresh process B then
``(y ** 2).sum()``, both with the default ``auto`` policy.

- ``cold``: A's ``cached_compute`` (an empty cache: a new namespace each run) against
  plain ``dask.compute`` of the same expression, in interleaved pairs in this process;
  A must store the 16 blocks of ``y`` (the write-behind uploads them while the graph goes
  on). Target <= 1.10x.
- ``branch``: B, in a fresh process started right after A returned, against A's own time
  (the time around the call): B loads the 16 blocks and computes only its last steps.
  Target B/A <= 0.5.

    python bench/array_branch.py [--repeat 5] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid

from _harness import Ratio, cache_server, finish, parse_args, run_python


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--blocks", type=int, default=16)
    parser.add_argument("--rows", type=int, default=1024)  # x 1024 float64: 8 MiB a block
    parser.add_argument("--sleep", type=float, default=0.2)
    parser.add_argument("--child", choices=["a", "b"], help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--namespace", help=argparse.SUPPRESS)


def expression(args: argparse.Namespace, branch: str):
    import dask.array as da

    x = da.random.default_rng(11).random((args.blocks * args.rows, 1024),
                                         chunks=(args.rows, 1024))
    sleep = args.sleep

    def f(block):
        time.sleep(sleep)
        return block * 2.0 + 1.0

    y = x.map_blocks(f, dtype="f8")
    return y.mean(axis=0) if branch == "a" else (y ** 2).sum()


def child(args: argparse.Namespace) -> None:
    """One fresh-process run of branch ``args.child``; prints JSON."""
    import dask.threaded  # noqa: F401  (imports are process start, not the compute call)

    from client_lib import cached_compute, last_report

    expr = expression(args, args.child)
    start = time.perf_counter()
    cached_compute(expr, cache=args.cache, namespace=args.namespace, scheduler="threads")
    seconds = time.perf_counter() - start
    report = last_report()
    print(json.dumps({"seconds": seconds, "loaded": report.loaded,
                      "computed": report.computed, "fallback": report.fallback,
                      "stored_f": report.functions.get("f", {}).get("stored", [0, 0])[0]}))


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], repeat=5, extra=_options)
    if args.smoke:
        args.rows, args.sleep = 16, 0.02
    if args.child:
        child(args)
        return
    import dask

    from client_lib import cached_compute, last_report

    common = ["bench/array_branch.py", "--blocks", str(args.blocks), "--rows",
              str(args.rows), "--sleep", str(args.sleep)]
    runs: dict[str, list[float]] = {k: [] for k in ("dask", "cold", "a", "b")}
    stored, wait = [], []
    with cache_server() as server:
        # Untimed: imports, thread pools and the first connection are not the run's cost.
        dask.compute(expression(args, "a"), scheduler="threads")
        cached_compute(expression(args, "a"), cache=server.url, namespace=uuid.uuid4().hex,
                       scheduler="threads")
        for _ in range(args.repeat):  # interleaved pairs: dask, then cached, same process
            start = time.perf_counter()
            dask.compute(expression(args, "a"), scheduler="threads")
            runs["dask"].append(time.perf_counter() - start)
            start = time.perf_counter()
            cached_compute(expression(args, "a"), cache=server.url,
                           namespace=uuid.uuid4().hex, scheduler="threads")
            runs["cold"].append(time.perf_counter() - start)
            report = last_report()
            stored.append(report.functions.get("f", {}).get("stored", [0, 0])[0])
            wait.append(report.seconds.get("store wait", 0.0))
            namespace = uuid.uuid4().hex
            a, _ = run_python(*common, "--child", "a", "--cache", server.url,
                              "--namespace", namespace)
            b, _ = run_python(*common, "--child", "b", "--cache", server.url,
                              "--namespace", namespace)
            if a["stored_f"] != args.blocks or b["loaded"] < args.blocks or b["fallback"]:
                raise RuntimeError(f"B did not load A's {args.blocks} blocks: A {a}, B {b}")
            runs["a"].append(a["seconds"])
            runs["b"].append(b["seconds"])
    if min(stored) != args.blocks:
        raise RuntimeError(f"the cold runs stored {stored} blocks of f, not {args.blocks}")
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(f"{args.blocks} blocks of {args.rows * 1024 * 8 / 2**20:.1f} MiB, f {args.sleep} s;"
          f" cold stored {stored} blocks, store wait {[round(w, 3) for w in wait]} s")
    print(f"cold: cached {med['cold']:.3f} s  dask {med['dask']:.3f} s;  "
          f"branch: A {med['a']:.3f} s  B {med['b']:.3f} s")
    ratios = [Ratio("cold_vs_dask", med["cold"] / med["dask"], 1.10),
              Ratio("branch_b_vs_a", med["b"] / med["a"], 0.5)]
    finish("array_branch", ratios, args, seconds=med, runs=runs, stored=stored,
           store_wait=wait)


if __name__ == "__main__":
    main()
