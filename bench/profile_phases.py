"""Where a cold ``cached_compute`` spends its time, phase by phase (issue 17).

Runs the steps of a run (``client_lib.plan.run.Run``) one by one on a graph from
``bench/_graphs.py`` (materialise, unfuse, hash, lookup, rewrite, lease, run with the store
wrappers and the wait for batched stores; docs/architecture.md, What flows where), each
under ``cProfile`` (the graph phases without cyclic GC, as a run does), against a real
cache server with an empty namespace, and prints each phase's seconds, microseconds per
Dask task and top functions by own time. A second, unprofiled pass gives the figures (the
profiler slows Python code by ~2x). The baseline is ``dask.compute`` of the same graph in
the same run (``optimize_graph=False`` for the delayed fan-in, as in bench/cold_overhead.py).

    python bench/profile_phases.py [--graphs fanin,array,groupby] [--sizes 10000,100000]
                                   [--top 12] [--policy auto|all] [--smoke]
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time
import uuid

import dask
from _graphs import GRAPHS, build
from _harness import Ratio, cache_server, finish, parse_args

from client_lib import CacheClient, cached_compute
from client_lib.execution.leases import lease_ttl, take_leases
from client_lib.execution.specs import StoreRun
from client_lib.execution.store import flush_stores
from client_lib.plan.hashed import hash_materialized
from client_lib.plan.materialize import materialize, paused_gc
from client_lib.plan.rewrite import cacheable_keys, rewrite
from client_lib.policy.modes import resolve_policy

PHASES = ("materialize", "hash", "lookup", "rewrite", "lease", "run")


def _options(parser) -> None:
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--graphs", default=",".join(GRAPHS))
    parser.add_argument("--top", type=int, default=12, help="functions shown per phase")
    parser.add_argument("--policy", default="auto")
    parser.add_argument("--no-profile", action="store_true",
                        help="only the unprofiled figures (1M-task graphs)")


def phases(x, cache: CacheClient, policy: str, profile: bool) -> tuple[dict, dict, int]:
    """Seconds per phase, the profile text per phase, and the task count Dask schedules."""
    seconds: dict[str, float] = {}
    profiles: dict[str, str] = {}
    state: dict = {}

    def step(name, fn, paused=True):
        prof = cProfile.Profile() if profile else None
        start = time.perf_counter()
        if prof:
            prof.enable()
        if paused:  # as a run does for the graph phases
            with paused_gc():
                out = fn()
        else:
            out = fn()
        if prof:
            prof.disable()
        seconds[name] = time.perf_counter() - start
        if prof:
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(state["top"])
            profiles[name] = text.getvalue()
        return out

    state["top"] = 12
    namespace = uuid.uuid4().hex
    fused = step("materialize", lambda: materialize([x]))
    hashed = step("hash", lambda: hash_materialized(fused, namespace, cache.signing_key))
    m, order, hashes = hashed.m, hashed.order, hashed.hashes
    cacheable = cacheable_keys(m, hashes)
    hits = step("lookup", lambda: cache.lookup(set(cacheable.values())), paused=False)
    run = StoreRun(cache, resolve_policy(policy), uuid.uuid4().hex, lease_ttl=lease_ttl(),
                   batch=True)
    out = step("rewrite", lambda: rewrite(m, order, hashes, cacheable, hits, run))
    step("lease", lambda: take_leases(run, out.specs.values(), hits))

    def execute():
        result = dask.threaded.get(out.graph, m.keys)
        flush_stores(run.run_id)
        return result

    step("run", execute, paused=False)
    return seconds, profiles, len(fused.graph)


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], repeat=1, extra=_options)
    sizes = [200] if args.smoke else [int(s) for s in args.sizes.split(",")]
    ratios, details = [], {}
    with cache_server() as server:
        cache = CacheClient(server.url)
        for kind in args.graphs.split(","):
            cached_compute(build(kind, 200), cache=cache, namespace=uuid.uuid4().hex,
                           scheduler="threads")  # imports and first calls
            for n in sizes:
                x = build(kind, n)
                dask.compute(x, optimize_graph=kind != "fanin", scheduler="threads")
                start = time.perf_counter()
                dask.compute(x, optimize_graph=kind != "fanin", scheduler="threads")
                base = time.perf_counter() - start
                plain, _, tasks = phases(x, cache, args.policy, profile=False)
                total = sum(plain.values())
                label = f"{kind}[{n}]"
                print(f"== {label}: {tasks} tasks; dask.compute {base:.3f} s; "
                      f"phases {total:.3f} s ({total / base:.2f}x)")
                for p in PHASES:
                    print(f"   {p:12s} {plain[p]:8.3f} s  {plain[p] / tasks * 1e6:8.1f} us/task")
                if not args.no_profile:
                    _, profiles, _ = phases(x, cache, args.policy, profile=True)
                    for p in PHASES:
                        body = profiles[p].split("\n\n")
                        print(f"-- {label} {p} (profiled)")
                        print("\n".join(line for line in "\n".join(body[2:]).splitlines()
                                        if line.strip())[:3000])
                details[label] = {"tasks": tasks, "baseline": base, "seconds": plain}
                ratios.append(Ratio(f"phases_vs_dask[{label}]", total / base, None))
    finish("profile_phases", ratios, args, **details)


if __name__ == "__main__":
    main()
