"""Measure 3, warm run: the graphs of measure 2, fully cached, computed in a fresh process.

For each graph (``bench/_graphs.py``; about 1k, 10k and 100k tasks) one ``cached_compute``
fills the cache (default ``"auto"`` policy: the output is stored). Then, ``--repeat`` times,
a fresh process builds the same graph and runs ``cached_compute`` (it loads the output and
culls everything upstream), and another fresh process runs ``dask.compute`` (the
baseline; ``optimize_graph=False`` for the delayed fan-in, as in measure 2). The figure is
the time around the call; interpreter start, imports and graph construction are reported
separately (``process``: the child's whole wall time). Target: <= 0.5x.

    python bench/warm_run.py [--repeat 3] [--sizes 1000,10000,100000] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid

from _graphs import GRAPHS, build, checksum
from _harness import Ratio, cache_server, finish, parse_args, run_python


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--graphs", default=",".join(GRAPHS))
    parser.add_argument("--child", choices=["cached", "dask"], help=argparse.SUPPRESS)
    parser.add_argument("--graph", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--namespace", help=argparse.SUPPRESS)


def child(args: argparse.Namespace) -> None:
    """One fresh-process run; prints JSON with the seconds around the compute call."""
    import dask
    import dask.threaded  # noqa: F401  (imports are process start, not the compute call)

    from client_lib import cached_compute, last_report

    x = build(args.graph, args.n)
    with dask.config.set(scheduler="threads"):
        start = time.perf_counter()
        if args.child == "cached":
            (value,) = cached_compute(x, cache=args.cache, namespace=args.namespace)
            seconds = time.perf_counter() - start
            report = last_report()
            info = {"loaded": report.loaded, "computed": report.computed,
                    "fallback": report.fallback,
                    "phases": {k: round(v, 5) for k, v in report.seconds.items()}}
        else:
            (value,) = dask.compute(x, optimize_graph=args.graph != "fanin")
            seconds = time.perf_counter() - start
            info = {}
    print(json.dumps({"seconds": seconds, "value": checksum(value), **info}))


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], repeat=3, extra=_options)
    if args.child:
        child(args)
        return
    from client_lib import cached_compute

    sizes = [200] if args.smoke else [int(s) for s in args.sizes.split(",")]
    ratios, details = [], {}
    with cache_server() as server:
        for kind in args.graphs.split(","):
            for n in sizes:
                namespace = uuid.uuid4().hex
                (expected,) = cached_compute(build(kind, n), cache=server.url,
                                             namespace=namespace, scheduler="threads")
                common = ["bench/warm_run.py", "--graph", kind, "--n", str(n)]
                runs: dict[str, list[float]] = {"cached": [], "dask": [],
                                                 "cached_process": [], "dask_process": []}
                phases: list[dict[str, float]] = []
                for _ in range(args.repeat):
                    warm, wall = run_python(*common, "--child", "cached", "--cache",
                                            server.url, "--namespace", namespace)
                    if warm["loaded"] != 1 or warm["computed"] != 0 or warm["fallback"]:
                        raise RuntimeError(f"warm run did not load the cached output: {warm}")
                    assert warm["value"] == checksum(expected)
                    runs["cached"].append(warm["seconds"])
                    runs["cached_process"].append(wall)
                    phases.append(warm["phases"])
                    plain, wall = run_python(*common, "--child", "dask")
                    assert plain["value"] == checksum(expected)
                    runs["dask"].append(plain["seconds"])
                    runs["dask_process"].append(wall)
                med = {k: statistics.median(v) for k, v in runs.items()}
                phase_med = {p: statistics.median(ph.get(p, 0.0) for ph in phases)
                             for p in phases[0]}
                label = f"{kind}[{n}]"
                print(f"{label:14s} cached {med['cached']:.3f} s  dask {med['dask']:.3f} s  "
                      f"(whole process: {med['cached_process']:.2f} s vs "
                      f"{med['dask_process']:.2f} s)\n               phases ms: "
                      + "  ".join(f"{p} {v * 1e3:.1f}" for p, v in phase_med.items()))
                details[label] = {"seconds": med, "phases": phase_med, "runs": runs}
                ratios.append(Ratio(f"warm_vs_dask[{label}]", med["cached"] / med["dask"], 0.5))
    finish("warm_run", ratios, args, **details)


if __name__ == "__main__":
    main()
