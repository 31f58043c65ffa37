"""Measure 2, cold overhead: ``cached_compute`` against ``dask.compute`` with an empty cache.

Trivial graphs of about 1k, 10k and 100k tasks (``bench/_graphs.py``: a wide delayed
fan-in and a chunked dask.array), threaded scheduler, a new namespace per run (so nothing
is cached), default ``"auto"`` policy. Graphs are built outside the timed region.

Baselines, measured in the same run: ``dask.compute(x)`` and, for the delayed fan-in,
``dask.compute(x, optimize_graph=False)``: Dask's delayed optimisation is quadratic on wide
graphs (docs/design/dask-facts.md, Facts about Dask that shape the code) and ``cached_compute``
skips it (it culls during the rewrite), so that is the fair baseline for delayed; the
default is reported beside it (and not run at 100k tasks, where it takes minutes). The
overhead is broken down per phase in microseconds per task: materialise, hash, lookup,
rewrite, and the run phase's excess over the baseline (store wrappers and store
decisions). Target: <= 1.1x for each graph (issue 26). The warm-up runs each
graph once at 200 tasks, so the timed runs know what their functions cost (a session's
later runs: client_lib/policy/costs.py); ``--fresh`` also times, interleaved, a run that knows
nothing about them (as the first run in a process: all wrapped and leased).

    python bench/cold_overhead.py [--repeat 3] [--sizes 1000,10000,100000] [--smoke]
"""

from __future__ import annotations

import gc
import statistics
import time
import uuid

import dask
from _graphs import GRAPHS, build
from _harness import Ratio, cache_server, finish, parse_args

from client_lib import CacheClient, cached_compute, last_report
from client_lib.policy import costs

PHASES = ("materialize", "hash", "lookup", "rewrite", "lease", "run", "store")
DEFAULT_OPTIMIZE_LIMIT = 10_000  # dask.compute's default on a wider delayed graph: minutes


def _sizes(parser) -> None:
    parser.add_argument("--sizes", default="1000,10000,100000",
                        help="approximate task counts, comma separated")
    parser.add_argument("--graphs", default=",".join(GRAPHS))
    parser.add_argument("--fresh", action="store_true",
                        help="also time runs that know nothing about the graphs' functions "
                             "(as the first run in a process; imports paid outside it)")


def dask_tasks(x) -> int:
    """How many tasks Dask itself would schedule for ``x`` (fused, optimised)."""
    from dask.base import collections_to_expr

    return len(collections_to_expr([x]).optimize().__dask_graph__())


def warm_up(cache: CacheClient) -> None:
    """Import and first-call costs are paid once per process, not per figure."""
    for kind in GRAPHS:
        x = build(kind, 200)
        dask.compute(x, scheduler="threads")
        cached_compute(x, cache=cache, namespace=uuid.uuid4().hex, scheduler="threads")


class GcClock:
    """Seconds the cyclic garbage collector ran, summed (``gc.callbacks``): a full
    collection in one run and not the next moves a 1 s run by 50-150 ms on these
    machines, as much as the per-task work measured here (BENCHMARKS.md, section 19)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start


GC = GcClock()


def timed(fn, gc_seconds: list[float] | None = None) -> float:
    """Wall seconds of ``fn()``; appends the collector's share to ``gc_seconds``."""
    collected = GC.seconds
    start = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - start
    if gc_seconds is not None:
        gc_seconds.append(GC.seconds - collected)
    return elapsed


def measure(kind: str, n: int, cache: CacheClient, repeat: int,
            fresh: bool = False) -> tuple[dict, dict, int, dict]:
    """Median seconds of each way to compute the graph, of each cached_compute phase, the
    task count, and the median seconds the garbage collector ran in each way."""
    x = build(kind, n)
    runs: dict[str, list[float]] = {"dask": [], "dask_noopt": [], "cached": []}
    gcs: dict[str, list[float]] = {k: [] for k in runs}
    phases: dict[str, list[float]] = {p: [] for p in PHASES}
    nodes = 0
    with dask.config.set(scheduler="threads"):
        for _ in range(repeat):
            if kind != "fanin" or n <= DEFAULT_OPTIMIZE_LIMIT:
                runs["dask"].append(timed(lambda: dask.compute(x), gcs["dask"]))
            if kind == "fanin":
                runs["dask_noopt"].append(timed(lambda: dask.compute(x, optimize_graph=False),
                                                gcs["dask_noopt"]))
            if fresh:
                namespace = uuid.uuid4().hex
                costs.forget()
                runs.setdefault("cached_fresh", []).append(
                    timed(lambda: cached_compute(x, cache=cache, namespace=namespace)))  # noqa: B023
            namespace = uuid.uuid4().hex
            runs["cached"].append(
                timed(lambda: cached_compute(x, cache=cache, namespace=namespace),  # noqa: B023
                      gcs["cached"]))
            report = last_report()
            assert report is not None and report.hits == 0 and not report.fallback
            nodes = report.tasks
            for p in PHASES:
                phases[p].append(report.seconds.get(p, 0.0))
    seconds = {k: statistics.median(v) for k, v in runs.items() if v}
    phase_seconds = {p: statistics.median(v) for p, v in phases.items()}
    gc_seconds = {k: statistics.median(v) for k, v in gcs.items() if v}
    return seconds, phase_seconds, nodes, gc_seconds


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], repeat=3, extra=_sizes)
    sizes = [200] if args.smoke else [int(s) for s in args.sizes.split(",")]
    ratios, details = [], {}
    with cache_server() as server:
        cache = CacheClient(server.url)
        warm_up(cache)
        for kind in args.graphs.split(","):
            for n in sizes:
                tasks = dask_tasks(build(kind, n))
                med, phases, nodes, gcs = measure(kind, n, cache, args.repeat, args.fresh)
                base_key = "dask_noopt" if kind == "fanin" else "dask"
                base = med[base_key]
                us = {p: v / tasks * 1e6 for p, v in phases.items()}
                us["run_excess"] = (phases["run"] - base) / tasks * 1e6
                label = f"{kind}[{n}]"
                print(f"{label:14s} {tasks:7d} tasks ({nodes} unfused)  "
                      + "  ".join(f"{k} {v:.3f} s" for k, v in med.items())
                      + "\n               us/task: "
                      + "  ".join(f"{p} {v:.1f}" for p, v in us.items())
                      + f"  (baseline {base / tasks * 1e6:.1f} us/task)")
                print("               garbage collector (median per run): "
                      + "  ".join(f"{k} {v * 1e3:.1f} ms" for k, v in gcs.items()))
                if "dask" in med and base_key != "dask":
                    print(f"               vs dask.compute default: "
                          f"{med['cached'] / med['dask']:.3f}x")
                details[label] = {"tasks": tasks, "unfused_nodes": nodes, "seconds": med,
                                  "us_per_task": us, "gc_seconds": gcs}
                target = 1.1  # issue 26: the fan-in and the groupby; the array keeps it
                ratios.append(Ratio(f"cold_vs_{base_key}[{label}]", med["cached"] / base,
                                    target))
                if "cached_fresh" in med:
                    ratios.append(Ratio(f"fresh_vs_{base_key}[{label}]",
                                        med["cached_fresh"] / base, None))
    finish("cold_overhead", ratios, args, **details)


if __name__ == "__main__":
    main()
