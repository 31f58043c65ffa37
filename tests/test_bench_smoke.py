"""Every benchmark script runs at a tiny size (``--smoke``) and prints its ratios, so the
benchmarks cannot rot. Speed is not asserted here: that is what bench/ itself reports."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p.name for p in (REPO / "bench").glob("*.py") if not p.name.startswith("_"))


def test_one_script_per_measure() -> None:
    assert SCRIPTS == [
        "array_branch.py", "array_throughput.py", "batch_lookup.py", "branch_reuse.py",
        "cluster_lookup.py", "cold_overhead.py",
        "concurrent_lookups.py", "dashboard_costs.py", "direct_read.py", "memory_per_task.py",
        "profile_phases.py", "recipe_cost.py",
        "replicas.py", "s3_throughput.py", "seed_reduction.py", "vs_graphchain.py",
        "warm_run.py", "xarray_workflow.py",
    ]


@pytest.fixture(scope="module")
def smoke_runs(request: pytest.FixtureRequest
               ) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """The ``--smoke`` runs of the selected scripts, two at a time: they share nothing
    (each has its own servers, ports and directories, and no ratio is asserted), and one
    alone mostly leaves the second core idle (the script and its server take turns)."""
    selected = [item.callspec.params["script"] for item in request.session.items
                if getattr(item, "originalname", None) == "test_script_runs_and_prints_its_ratios"
                and item.module is request.module]
    with ThreadPoolExecutor(2) as pool:
        runs = {script: pool.submit(_smoke, script) for script in selected}
        try:
            yield runs
        finally:
            for run in runs.values():
                run.cancel()


_SPAWN = threading.Lock()


def _smoke(script: str) -> subprocess.CompletedProcess[str]:
    """``bench/SCRIPT --smoke``, started one at a time: two threads spawning at once once
    failed the exec with EFAULT ('Bad address', CI), so only the waits overlap."""
    with _SPAWN:
        process = subprocess.Popen([sys.executable, f"bench/{script}", "--smoke"], cwd=REPO,
                                   env=dict(os.environ), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_runs_and_prints_its_ratios(
        script: str, smoke_runs: dict[str, Future[subprocess.CompletedProcess[str]]]) -> None:
    done = smoke_runs[script].result()
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["bench"] == script.removesuffix(".py") and result["smoke"] is True
    assert result["ratios"], "no ratio reported"
    for name, value in result["ratios"].items():
        assert isinstance(value, float | int) and math.isfinite(value) and value >= 0, name
        assert any(line.startswith(f"ratio {name}: ") for line in lines), name
