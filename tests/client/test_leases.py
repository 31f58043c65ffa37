"""In-flight deduplication between fresh processes: one computes, the other waits and
loads; a holder that dies lets the waiter compute once its lease expires."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def start(scenario: str, server, namespace: str, go: Path, scheduler: str, *extra: str,
          **env: str) -> subprocess.Popen:
    """A fresh process that computes once ``go`` exists (its cluster started before)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.client._futures_child", scenario, server.url, namespace,
         "--go", str(go), "--scheduler", scheduler, *extra], cwd=ROOT,
        stdout=subprocess.PIPE, text=True, env={**os.environ, **env},
        start_new_session=True)


def result(process: subprocess.Popen) -> dict:
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 0
    return json.loads(out.strip().splitlines()[-1])


def wait_for(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


@pytest.mark.parametrize("scheduler", ["threads", "local-cluster"])
def test_two_processes_starting_one_task_compute_it_once(fresh_server, tmp_path, scheduler):
    server = fresh_server()
    ns = uuid.uuid4().hex
    marker = tmp_path / "started"
    env = {"SLOW_SECONDS": "2", "SLOW_MARKER": str(marker)}
    first = start("slow", server, ns, tmp_path / "go-a", scheduler, **env)
    second = start("slow", server, ns, tmp_path / "go-b", scheduler, **env)
    (tmp_path / "go-a").touch()
    wait_for(marker)  # the first holds the lease and computes
    time.sleep(0.3)
    (tmp_path / "go-b").touch()
    a, b = result(first), result(second)
    assert a["result"] == b["result"] == 21
    assert (a["report"]["computed"], a["report"]["loaded"]) == (1, 0)
    assert b["report"]["waited"] == 1 and b["report"]["waited_loaded"] == 1
    assert (b["report"]["computed"], b["report"]["loaded"]) == (0, 1)
    stats = httpx.get(f"{server.url}/v1/stats").json()
    assert stats["stores"] == 1 and stats["served"] == 1 and stats["found"] == 0
    gap = b["finished"] - a["finished"]
    print(f"finish gap {gap:.3f} s")
    assert gap < 1.5  # the second loaded right after the store: it did not compute 2 s


@pytest.mark.parametrize("scheduler", ["threads", "local-cluster"])
def test_killing_the_holder_lets_the_waiter_compute_after_lease_expiry(fresh_server,
                                                                      tmp_path, scheduler):
    server = fresh_server()
    ns = uuid.uuid4().hex
    marker = tmp_path / "started"
    short = {"DASK_RESULT_CACHE__LEASE_TTL": "2", "SLOW_MARKER": str(marker)}
    holder = start("slow", server, ns, tmp_path / "go-a", scheduler, SLOW_SECONDS="600",
                   **short)
    waiter = start("slow", server, ns, tmp_path / "go-b", scheduler, SLOW_SECONDS="0.2",
                   **short)
    (tmp_path / "go-a").touch()
    wait_for(marker)
    (tmp_path / "go-b").touch()
    time.sleep(0.5)
    os.killpg(holder.pid, signal.SIGKILL)  # mid-task: its lease is no longer renewed
    holder.wait()
    b = result(waiter)
    assert b["result"] == 21
    assert b["report"]["waited"] == 1 and b["report"]["waited_loaded"] == 0
    assert b["report"]["computed"] == 1
    stats = httpx.get(f"{server.url}/v1/stats").json()
    assert stats["stores"] == 1 and stats["hits"] == 0


def test_overlapping_sets_in_opposite_orders_finish_and_compute_each_task_once(
        fresh_server, tmp_path):
    """A leases 1..4 and B 4..1 at (nearly) the same moment, each on one thread: whichever
    leases second waits only for the first, which never waits for it, so both finish."""
    server = fresh_server()
    ns = uuid.uuid4().hex
    env = {"SLOW_SECONDS": "0.5", "DASK_NUM_WORKERS": "1"}
    go = tmp_path / "go"
    a = start("overlap", server, ns, go, "sync", "--items", "1,2,3,4", **env)
    b = start("overlap", server, ns, go, "sync", "--items", "4,3,2,1,5", **env)
    time.sleep(1.0)  # both imported and polling for go
    go.touch()
    ra, rb = result(a), result(b)
    assert ra["result"] == [3, 6, 9, 12] and rb["result"] == [12, 9, 6, 3, 15]
    computed = ra["report"]["computed"] + rb["report"]["computed"]
    loaded = ra["report"]["loaded"] + rb["report"]["loaded"]
    assert computed == 5 and loaded == 4  # every task computed once, by one of them
    assert httpx.get(f"{server.url}/v1/stats").json()["stores"] == 5
