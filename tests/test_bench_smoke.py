"""Every benchmark script runs at a tiny size (``--smoke``) and prints its ratios, so the
benchmarks cannot rot. Speed is not asserted here: that is what bench/ itself reports."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p.name for p in (REPO / "bench").glob("*.py") if not p.name.startswith("_"))


def test_one_script_per_measure() -> None:
    assert SCRIPTS == [
        "array_throughput.py", "batch_lookup.py", "branch_reuse.py", "cluster_lookup.py",
        "cold_overhead.py",
        "concurrent_lookups.py", "dashboard_costs.py", "direct_read.py", "memory_per_task.py",
        "profile_phases.py",
        "replicas.py", "s3_throughput.py", "seed_reduction.py", "vs_graphchain.py",
        "warm_run.py", "xarray_workflow.py",
    ]


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_runs_and_prints_its_ratios(script: str) -> None:
    done = subprocess.run([sys.executable, f"bench/{script}", "--smoke"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["bench"] == script.removesuffix(".py") and result["smoke"] is True
    assert result["ratios"], "no ratio reported"
    for name, value in result["ratios"].items():
        assert isinstance(value, float | int) and math.isfinite(value) and value >= 0, name
        assert any(line.startswith(f"ratio {name}: ") for line in lines), name
