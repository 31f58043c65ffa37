"""The cost of recording recipes (issue 28, docs/design/hashing.md, "Recipes and why"): a
cold ``cached_compute`` of about 10k tasks with ``result-cache.recipes`` on, against the
same run with it off, in the same process and interleaved (a new namespace each time, so
nothing is cached). The recipes are made and posted by the poster thread once the run
has returned: the timed region ends when ``cached_compute`` returns, and the posts are
flushed between runs, outside it; the poster's CPU seconds for the recipes are reported
against the run too (``recipe_cpu_vs_run``: what they cost the machine, not the run).
``why`` is timed too (on the last namespace: every task cached), against ``plan`` of the
same graph. Target: recipes on <= 1.02x off.

    python bench/recipe_cost.py [--repeat 5] [--size 10000] [--graphs fanin,array] [--smoke]
"""

from __future__ import annotations

import statistics
import time
import uuid

import dask
from _graphs import build
from _harness import Ratio, cache_server, finish, parse_args

from client_lib import CacheClient, cached_compute, plan, why
from client_lib.plan.runs import RECIPE_SECONDS, flush_posts


def _options(parser) -> None:
    parser.add_argument("--size", type=int, default=10_000, help="approximate task count")
    parser.add_argument("--graphs", default="fanin,array")


def _cold(x, cache: CacheClient, recipes: bool) -> tuple[float, str]:
    namespace = uuid.uuid4().hex
    with dask.config.set({"result-cache.recipes": recipes}):
        start = time.perf_counter()
        cached_compute(x, cache=cache, namespace=namespace, scheduler="threads")
        seconds = time.perf_counter() - start
    flush_posts(60)
    return seconds, namespace


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], repeat=5, extra=_options)
    size = 200 if args.smoke else args.size
    ratios, details = [], {}
    with cache_server() as server:
        cache = CacheClient(server.url)
        for kind in args.graphs.split(","):
            x = build(kind, size)
            _cold(x, cache, True)  # imports and first calls paid outside the figures
            on, off, cpu = [], [], []
            namespace = ""
            for _ in range(args.repeat):
                off.append(_cold(x, cache, False)[0])
                before = RECIPE_SECONDS[0]
                seconds, namespace = _cold(x, cache, True)
                on.append(seconds)
                cpu.append(RECIPE_SECONDS[0] - before)
            start = time.perf_counter()
            found = why(x, cache=cache, namespace=namespace)
            why_seconds = time.perf_counter() - start
            start = time.perf_counter()
            plan(x, cache=cache, namespace=namespace)
            plan_seconds = time.perf_counter() - start
            assert {r.status for r in found} == {"cached"}, str(found)
            med_on, med_off = statistics.median(on), statistics.median(off)
            label = f"{kind}[{size}]"
            print(f"{label:14s} {len(found)} tasks  recipes off {med_off:.3f} s  on "
                  f"{med_on:.3f} s  why {why_seconds:.3f} s  plan {plan_seconds:.3f} s")
            details[label] = {"tasks": len(found), "off": med_off, "on": med_on,
                              "why": why_seconds, "plan": plan_seconds}
            ratios.append(Ratio(f"recipes_on_vs_off[{label}]", med_on / med_off, 1.02))
            ratios.append(Ratio(f"recipe_cpu_vs_run[{label}]", statistics.median(cpu) / med_off,
                                None))
            ratios.append(Ratio(f"why_vs_plan[{label}]", why_seconds / plan_seconds, None))
    finish("recipe_cost", ratios, args, **details)


if __name__ == "__main__":
    main()
