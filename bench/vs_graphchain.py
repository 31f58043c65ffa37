"""Measure 6, against graphchain: the same old-style tuple graph of 1000 chained cheap tasks
(``bench/_chain_child.py``) through graphchain and through our cache, each in its own
environment, on Dask's synchronous scheduler.

graphchain does not run on current Dask, so this script creates a virtual environment of
its own (default ``bench/.venv-graphchain``, git-ignored; created once, reused after) with
graphchain 1.3.0 and ``dask<=2024.8`` from PyPI: the newest pair that works together on
Python 3.11. graphchain caches on local disk (a temporary directory beside this checkout);
ours goes through a real cache server (embedded Redis, data on the same disk).

Per-task figures, each side against its own plain ``dask.get`` of the graph measured in the
same process: cold overhead = (cold run - plain run) / tasks, with an empty cache; warm
cost = warm run / tasks, right after the cold run. Two settings: each tool's default
(``auto``: graphchain stores a task when it expects loading to beat recomputing; ours stores
the outputs and what is expensive) and ``all`` (both store every task). Target: ours
<= 0.3x graphchain's.

    python bench/vs_graphchain.py [--repeat 3] [--n 1000] [--venv DIR] [--smoke]
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

from _harness import BENCH_DIR, Ratio, cache_server, finish, parse_args, run_python

REQUIREMENTS = ["graphchain==1.3.0", "dask<=2024.8"]
CHILD = BENCH_DIR / "_chain_child.py"


def _options(parser) -> None:
    parser.add_argument("--n", type=int, default=1000, help="tasks in the chain")
    parser.add_argument("--venv", type=Path, default=BENCH_DIR / ".venv-graphchain",
                        help="graphchain's virtual environment (created if missing)")


def graphchain_python(directory: Path) -> Path:
    """The interpreter of a virtual environment holding ``REQUIREMENTS``; creates it (from
    PyPI, ~1 min) unless a previous run completed it. A half-made one is rebuilt."""
    python = directory / "bin" / "python"
    stamp = directory / "requirements.done"
    wanted = hashlib.sha256("\n".join(REQUIREMENTS).encode()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    print(f"creating {directory} with {' '.join(REQUIREMENTS)} ...", file=sys.stderr)
    venv.EnvBuilder(clear=True, with_pip=True).create(directory)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    *REQUIREMENTS], check=True)
    stamp.write_text(wanted)
    return python


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], repeat=3, extra=_options)
    n = 20 if args.smoke else args.n
    python = graphchain_python(args.venv)
    ratios, details = [], {}
    with tempfile.TemporaryDirectory(prefix="rc-bench-graphchain-", dir=os.getcwd()) as tmp:
        with cache_server() as server:
            for mode in ("auto", "all"):
                common = ["--n", str(n), "--repeat", str(args.repeat), "--mode", mode]
                theirs = subprocess.run([str(python), str(CHILD), "graphchain", *common,
                                         "--dir", tmp], capture_output=True, text=True)
                if theirs.returncode != 0:
                    raise RuntimeError(f"graphchain side failed:\n{theirs.stderr[-3000:]}")
                gc = __import__("json").loads(theirs.stdout.strip().splitlines()[-1])
                ours, _ = run_python(str(CHILD), "ours", *common, "--cache", server.url)
                per_task = {}
                for side, result in (("graphchain", gc), ("ours", ours)):
                    med = result["median"]
                    per_task[side] = {
                        "plain_us": med["plain"] / n * 1e6,
                        "cold_overhead_us": (med["cold"] - med["plain"]) / n * 1e6,
                        "warm_us": med["warm"] / n * 1e6,
                        "dask": result["dask"],
                    }
                    print(f"{mode:4s} {side:10s} (dask {result['dask']}): plain "
                          f"{per_task[side]['plain_us']:7.1f} us/task  cold overhead "
                          f"{per_task[side]['cold_overhead_us']:8.1f} us/task  warm "
                          f"{per_task[side]['warm_us']:7.1f} us/task")
                details[mode] = {"per_task": per_task, "graphchain": gc, "ours": ours}
                for phase, key in (("cold", "cold_overhead_us"), ("warm", "warm_us")):
                    ratios.append(Ratio(f"ours_vs_graphchain[{mode},{phase}]",
                                        per_task["ours"][key] / per_task["graphchain"][key],
                                        0.3))
    finish("vs_graphchain", ratios, args, n=n, requirements=REQUIREMENTS, **details)


if __name__ == "__main__":
    main()
