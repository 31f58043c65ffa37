"""Issue 24's table in fresh processes, default ``auto`` policy: a branch started in a new
session reuses what the first session computed (client_lib/policy/modes.py), its stores
are durable when ``cached_compute`` returns (client_lib/execution/store_queue.py), and task
costs are learned per function by code, not by name (client_lib/policy/costs.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(server, namespace: str, case: str, scheduler: str = "threads",
         path: Path | None = None) -> list[dict]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    spec = {"url": server.url, "namespace": namespace, "case": case, "scheduler": scheduler}
    done = subprocess.run([sys.executable, "-m", "tests.client._reuse_child", json.dumps(spec)],
                          cwd=ROOT, env=env, check=True, timeout=300, capture_output=True,
                          text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])["runs"]


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["threads", "cluster"])
def test_a_branch_of_an_array_loads_the_blocks_the_first_session_stored(cache_server,
                                                                        scheduler):
    """Row 1: ``y = x.map_blocks(f)``; A ``y.mean(axis=0)``, then, in a process started
    right after A returned, B ``(y ** 2).sum()`` loads the 16 blocks of ``y``."""
    ns = uuid.uuid4().hex
    (a,) = _run(cache_server, ns, "array-a", scheduler)
    assert a["functions"]["f"]["stored"][0] == 16  # reported stored: durable now
    (b,) = _run(cache_server, ns, "array-b", scheduler)
    assert b["loaded"] == 16 and "f" not in b["computed_labels"]


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["threads", "cluster"])
def test_a_branch_leaving_a_chain_in_the_middle_computes_only_its_own_steps(cache_server,
                                                                            scheduler):
    """Row 2: ``s1 -> s2 -> s3 -> s4a``, then ``s2 -> s3b -> s4b`` in a new process:
    B loads ``s2`` and computes only ``s3b`` and ``s4b``."""
    ns = uuid.uuid4().hex
    (a,) = _run(cache_server, ns, "chain-a", scheduler)
    assert a["stored"] in (4, None) and a["value"] == ((1 * 3 + 1) * 3 + 2) * 9 + 3 * 3 + 4
    (b,) = _run(cache_server, ns, "chain-b", scheduler)
    assert (b["loaded"], b["computed_labels"]) == (1, ["s", "s"])
    assert b["value"] == (((1 * 3 + 1) * 3 + 2) * 3 + 30) * 3 + 40


@pytest.mark.slow
def test_two_functions_of_one_name_keep_their_own_costs(cache_server, tmp_path):
    """Row 3: a sum of 300 cheap tasks of ``cheap.work``, then one of 100 of ``slow.work``
    in the same process: the slow ones stay wrapped (their cost is not ``cheap.work``'s)
    and are stored; a new process summing 80 of them loads all 80."""
    (tmp_path / "cheap.py").write_text("def work(i):\n    return i + 1\n")
    (tmp_path / "slow.py").write_text(
        "import time\n\n\ndef work(i):\n    time.sleep(0.01)\n    return i * 2\n")
    ns = uuid.uuid4().hex
    _, slow = _run(cache_server, ns, "costs-a", path=tmp_path)
    assert slow["functions"]["work"]["stored"][0] == 100
    (again,) = _run(cache_server, ns, "costs-b", path=tmp_path)
    assert again["loaded"] == 80 and again["value"] == 2 * sum(range(80))
