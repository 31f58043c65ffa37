"""Measure 1, branch reuse: the branch scenario of ``examples/branches.py``.

    step_1 -> step_2 -> {step_3a, step_3b}        (each step sleeps BRANCHES_SLEEP, 1 s)

Process A computes branch ``a`` (3 steps); a fresh process B then computes branch ``b``,
which loads step_2 from the cache and runs only step_3b. The figure is B's wall time around
``cached_compute`` (process start and cluster start excluded, as ``branches.py`` measures)
against the sleep of its own last step, for the threaded scheduler and a LocalCluster.
Each repetition uses a new namespace, so A always starts cold. Targets (issue 17): B <=
1.03x (threads), <= 1.05x (LocalCluster). B's whole process (interpreter, imports, cluster
start and stop included) is reported beside it: a cut that only moves work out of the call
shows there.

    python bench/branch_reuse.py [--repeat 5] [--smoke]
"""

from __future__ import annotations

import statistics
import uuid

from _harness import Ratio, cache_server, finish, parse_args, run_python


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], repeat=5)
    sleep = 0.05 if args.smoke else 1.0
    schedulers = ["threads"] if args.smoke else ["threads", "local-cluster"]
    ratios, details = [], {}
    with cache_server() as server:
        for scheduler in schedulers:
            a_times, b_times, b_walls = [], [], []
            for _ in range(args.repeat):
                env = {"BRANCHES_SLEEP": str(sleep),
                       "DASK_RESULT_CACHE__NAMESPACE": uuid.uuid4().hex}
                argv = ["examples/branches.py", "--cache", server.url, "--scheduler", scheduler]
                a, _ = run_python(*argv[:1], "a", *argv[1:], env=env)
                b, b_wall = run_python(*argv[:1], "b", *argv[1:], env=env)
                if b["loaded"] != 1 or b["computed"] != 1 or b["fallback"]:
                    raise RuntimeError(f"process B did not reuse step_2: {b}")
                a_times.append(a["seconds"])
                b_times.append(b["seconds"])
                b_walls.append(b_wall)
            a_med, b_med = statistics.median(a_times), statistics.median(b_times)
            wall = statistics.median(b_walls)
            print(f"{scheduler:14s} A {a_med:.3f} s  B {b_med:.3f} s  (runs B: "
                  + ", ".join(f"{t:.3f}" for t in b_times) + f"); B's process {wall:.3f} s")
            details[scheduler] = {"a_seconds": a_med, "b_seconds": b_med, "b_runs": b_times,
                                  "b_process_seconds": wall, "b_process_runs": b_walls}
            target = 1.03 if scheduler == "threads" else 1.05
            ratios.append(Ratio(f"branch_b_vs_last_step[{scheduler}]", b_med / sleep, target,
                                note=f"B {b_med:.3f} s vs sleep {sleep:g} s"))
            ratios.append(Ratio(f"branch_b_process_vs_last_step[{scheduler}]", wall / sleep,
                                None, note=f"B's whole process {wall:.3f} s"))
    finish("branch_reuse", ratios, args, sleep=sleep, **details)


if __name__ == "__main__":
    main()
