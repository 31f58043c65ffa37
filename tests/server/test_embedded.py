"""The embedded default (no redis_url), restarts, and the command line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from cache_server.launch import RunningServer, start_server
from tests.conftest import FreshServer
from tests.server.wire import encode_array, encode_pickle, new_hash, put

pytestmark = pytest.mark.slow


def redis_pids(data_dir: Path) -> list[int]:
    """The embedded Redis processes of ``data_dir``: its guard and the guard's redis-server.

    (redis-server rewrites its own command line, so it is found through its parent.)"""
    ps = ["ps", "-ww", "-eo", "pid=,ppid=,args="]
    out = subprocess.run(ps, capture_output=True, text=True).stdout
    rows = [line.split(None, 2) for line in out.splitlines()]
    lock = str(data_dir.resolve() / "redis" / "lock")
    guards = {row[0] for row in rows if "cache_server.index.guard" in row[2] and lock in row[2]}
    return sorted(int(row[0]) for row in rows if row[0] in guards or row[1] in guards)


def wait_until(condition, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_restart_on_the_same_data_dir_keeps_entries_and_stats(
    fresh_server: FreshServer, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    stored = {new_hash(): encode_array(np.arange(n + 1.0)) for n in range(3)}
    server = fresh_server(embedded=True, data_dir=data_dir)
    assert len(redis_pids(data_dir)) == 2
    with httpx.Client(base_url=server.url) as client:
        for task_hash, encoded in stored.items():
            assert put(client, task_hash, encoded).status_code == 201
        client.get(f"/v1/objects/{next(iter(stored))}")
        client.post("/v1/lookup", json={"hashes": [new_hash()]})
        stats_before = client.get("/v1/stats").json()
    assert (data_dir / "redis" / "appendonly.aof").is_file()
    server.stop()
    assert redis_pids(data_dir) == []  # the embedded Redis stopped with the server

    again = fresh_server(embedded=True, data_dir=data_dir)
    with httpx.Client(base_url=again.url) as client:
        assert client.get("/v1/stats").json() == stats_before
        found = client.post("/v1/lookup", json={"hashes": list(stored)}).json()["found"]
        assert found == list(stored)
        for task_hash, encoded in stored.items():
            assert client.get(f"/v1/objects/{task_hash}").content == encoded.body


def test_embedded_redis_stops_when_the_server_is_killed(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    server = start_server(data_dir)
    try:
        with httpx.Client(base_url=server.url) as client:
            task_hash = new_hash()
            assert put(client, task_hash, encode_pickle([1, 2])).status_code == 201
        assert len(redis_pids(data_dir)) == 2
        os.kill(server.pid, signal.SIGKILL)
        server.process.wait()
        assert wait_until(lambda: redis_pids(data_dir) == [])
    finally:
        server.stop()
    with start_server(data_dir) as restarted, httpx.Client(base_url=restarted.url) as client:
        assert client.get(f"/v1/entries/{task_hash}").status_code == 200


def test_two_servers_cannot_share_an_embedded_redis(tmp_path: Path) -> None:
    with start_server(tmp_path / "data") as first:
        try:
            second = start_server(tmp_path / "data", timeout=60)
        except RuntimeError as exc:
            assert "exited" in str(exc)
        else:
            second.stop()
            raise AssertionError("a second server started on a busy data dir")
        assert httpx.get(f"{first.url}/healthz").status_code == 200


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cache_server", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_stats_command(cache_server: RunningServer) -> None:
    result = run_cli("stats", "--url", cache_server.url)
    assert result.returncode == 0, result.stderr
    names = [line.split()[0] for line in result.stdout.splitlines()]
    assert {"hits", "misses", "stores", "entries", "bytes", "hit_rate", "saved_seconds"} <= set(
        names
    )
    from_env = run_cli("stats", "--json", env={"RESULT_CACHE_URL": cache_server.url})
    assert from_env.returncode == 0 and '"hit_rate"' in from_env.stdout
    down = run_cli("stats", "--url", "http://127.0.0.1:9")
    assert down.returncode != 0 and "cannot read stats" in down.stderr


def test_cli_entry_points() -> None:
    help_text = run_cli("--help")
    assert help_text.returncode == 0
    assert "serve" in help_text.stdout and "stats" in help_text.stdout
    serve_help = run_cli("serve", "--help").stdout
    for flag in ("--host", "--port", "--data-dir", "--redis-url"):
        assert flag in serve_help
    dask_cli = subprocess.run(
        [sys.executable, "-c", "from dask.cli import run_cli; run_cli()", "cache", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dask_cli.returncode == 0, dask_cli.stderr
    assert "serve" in dask_cli.stdout


def test_redis_outage_is_503_with_a_message(tmp_path: Path) -> None:
    from tests._servers import RedisProcess

    redis_process = RedisProcess(tmp_path / "redis")
    with start_server(tmp_path / "data", redis_url=redis_process.url) as server:
        redis_process.stop()
        with httpx.Client(base_url=server.url) as client:
            for response in (
                client.get("/healthz"),
                client.post("/v1/lookup", json={"hashes": [new_hash()]}),
                client.get("/v1/stats"),
            ):
                assert response.status_code == 503
                assert "Redis" in response.json()["detail"]
