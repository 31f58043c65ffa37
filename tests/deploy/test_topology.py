"""The docker-compose stack as local processes, started with the compose file's own commands
(see _compose.py for the few substitutions): Redis with append-only persistence, the cache
server on it, a Dask scheduler and two workers. Then the README's "Run with Docker" steps:
the branch example twice from the host, in separate processes, then ``dask-cache stats``.

As on a Docker host, the clients reach the cache through the published port while the
workers use the service name: the test checks that no worker process ever used the host's
address (their loads and stores went to their own ``DASK_RESULT_CACHE__URL``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import numpy as np
import psutil
import pytest

from tests._servers import free_port
from tests.deploy._compose import ROOT, LocalStack, PortForwarder, compose_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def wait_for_workers(dashboard: str, n: int, stack: LocalStack) -> None:
    deadline = time.monotonic() + 90
    while httpx.get(f"{dashboard}/json/counts.json").json()["workers"] < n:
        assert time.monotonic() < deadline, "workers never arrived:\n" + stack.log_tail("worker")
        for process in stack.processes["worker"]:
            assert process.poll() is None, stack.log_tail("worker")
        time.sleep(0.2)


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def test_compose_topology_as_local_processes(tmp_path):
    ports = {name: str(free_port()) for name in
             ("REDIS_PORT", "CACHE_PORT", "SCHEDULER_PORT", "DASHBOARD_PORT")}
    config = compose_config({**ports, "WORKERS": "2"})
    with LocalStack(config, tmp_path) as stack:
        stack.start_in_order()
        assert len(stack.processes["worker"]) == 2
        stack.wait_healthy("cache-server")
        dashboard = f"http://127.0.0.1:{ports['DASHBOARD_PORT']}"
        wait_for_workers(dashboard, 2, stack)

        # The host's address of the cache: the published port, not the workers' one.
        published = PortForwarder(("127.0.0.1", int(ports["CACHE_PORT"])))
        try:
            host_url = f"http://127.0.0.1:{published.port}"
            env = {**os.environ, "DASK_RESULT_CACHE__URL": host_url, "BRANCHES_SLEEP": "0.2"}
            scheduler = f"tcp://127.0.0.1:{ports['SCHEDULER_PORT']}"
            example = [sys.executable, "examples/branches.py"]
            a = json.loads(run([*example, "a", "--scheduler", scheduler], env).stdout
                           .splitlines()[-1])
            b = json.loads(run([*example, "b", "--scheduler", scheduler], env).stdout
                           .splitlines()[-1])
            stats_cli = [sys.executable, "-m", "cache_server", "stats", "--url", host_url,
                         "--json"]
            stats = json.loads(run(stats_cli, env).stdout)
            raw = httpx.get(f"{host_url}/v1/stats").json()  # what curl shows
            worker_pids = stack.pids("worker")
        finally:
            published.close()

        assert (a["hits"], a["loaded"], a["computed"], a["fallback"]) == (0, 0, 3, None)
        # process B finds step_1 and step_2 (every link that pays is stored:
        # docs/design/rewrite-and-policy.md, The run's byte bound), loads step_2, culls
        # step_1 and computes step_3b
        assert (b["hits"], b["loaded"], b["computed"], b["fallback"]) == (2, 1, 1, None)
        x = np.sqrt(np.arange(100_000, dtype="float64")) * 2.0
        assert a["result"] == pytest.approx(float(x.sum()))
        assert b["result"] == pytest.approx(float(x.mean()))
        assert stats["hits"] >= 1 and stats["stores"] >= 3
        assert (raw["hits"], raw["stores"]) == (stats["hits"], stats["stores"])
        # Loads and stores ran on the workers, through the service-name URL only.
        assert published.owners and None not in published.owners
        assert not worker_pids & set(published.owners), "a worker used the host's URL"

        # Redis persisted the index in its append-only file on the redis volume.
        aof = [p for p in (tmp_path / "volumes").rglob("*appendonly*") if p.is_file()]
        assert aof and sum(p.stat().st_size for p in aof) > 0
        pids = set().union(*(stack.pids(name) for name in stack.processes))

    # every process the stack started, and every child of theirs, is gone
    assert len(pids) >= 5 + 2  # five services' main processes and the workers' nanny children
    assert not [pid for pid in pids if running(pid)]
