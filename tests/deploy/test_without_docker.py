"""README "Run without Docker": ``dask-cache demo``, the embedded default (a cache server with
its own redis-server on a temporary directory, the branch example in two processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.deploy._compose import ROOT

pytestmark = pytest.mark.slow


def test_dask_cache_demo_runs_the_branches_and_leaves_nothing_running(tmp_path):
    script = Path(sys.executable).parent / "dask-cache"
    # TMPDIR puts the demo's data directory (and its embedded Redis) under tmp_path.
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env = {k: v for k, v in env.items() if not k.startswith(("DASK_RESULT_CACHE__",
                                                             "RESULT_CACHE_"))}
    out = subprocess.run([str(script), "demo", "--sleep", "0.2"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert any("process A, branch 3a" in line and "computed 3 tasks" in line for line in lines)
    assert any("process B, branch 3b" in line and "found 2, loaded 1, computed 1" in line
               for line in lines)
    stats = json.loads(lines[-1].removeprefix("server stats: "))
    # The server counts what the report says: B found 2 (step_1 and step_2: every link that
    # pays is stored) of 6 hashes asked in all, and served the 1 it loaded.
    assert (stats["hits"], stats["found"], stats["served"]) == (2, 2, 1)
    assert stats["misses"] == 4 and stats["hit_rate"] == pytest.approx(2 / 6)
    assert stats["stores"] >= 3
    # the server and its embedded redis-server are gone, and so is their data directory
    running = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if (str(tmp_path) in " ".join(process.info["cmdline"] or [])
                and process.info["status"] != psutil.STATUS_ZOMBIE):
            running.append(process.pid)
    assert not running
    assert not list(tmp_path.glob("dask-cache-demo-*"))
