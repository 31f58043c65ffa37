"""The compose file's ``scale`` profile as local processes, started with its own commands
(tests/deploy/_compose.py): Redis with its append-only file, MinIO (moto's S3 server in its
place), two cache-server replicas on the bucket, the scheduler and the profile's workers,
which list both replicas. A client on the host uses the two published ports; one replica is
killed and the next run still loads everything through the other."""

from __future__ import annotations

import os
import signal
import time
import uuid

import dask
import httpx
import numpy as np
import pytest
from distributed import Client

from client_lib import cached_compute, last_report
from tests._servers import free_port
from tests.deploy._compose import LocalStack, compose_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SECRETS = {"MINIO_ROOT_USER": "scale-test", "MINIO_ROOT_PASSWORD": "scale-test-secret",
           "AWS_ACCESS_KEY_ID": "scale-test", "AWS_SECRET_ACCESS_KEY": "scale-test-secret"}


def _blocks(n: int):
    return [dask.delayed(np.full, pure=True)(50_000, float(i), dask_key_name=f"b{i}")
            for i in range(n)]


def test_scale_profile_as_local_processes(tmp_path, monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    ports = {name: str(free_port()) for name in ("REDIS_PORT", "CACHE_PORT", "SCHEDULER_PORT",
                                                 "DASHBOARD_PORT", "MINIO_PORT",
                                                 "SCALE_PORT_A", "SCALE_PORT_B")}
    config = compose_config({**ports, "WORKERS": "2"})
    with LocalStack(config, tmp_path, profiles=("scale",)) as stack:
        stack.start_in_order("scale-worker")  # with what it depends on, as `up scale-worker`
        assert "cache-server" not in stack.processes  # not needed by the profile's workers
        dashboard = f"http://127.0.0.1:{ports['DASHBOARD_PORT']}"
        deadline = time.monotonic() + 90
        while httpx.get(f"{dashboard}/json/counts.json").json()["workers"] < 2:
            assert time.monotonic() < deadline, stack.log_tail("scale-worker")
            time.sleep(0.2)
        urls = f"http://127.0.0.1:{ports['SCALE_PORT_A']},http://127.0.0.1:{ports['SCALE_PORT_B']}"
        ns = uuid.uuid4().hex
        with Client(f"tcp://127.0.0.1:{ports['SCHEDULER_PORT']}") as client, \
                dask.config.set({"result-cache.url": urls}):
            cold = cached_compute(*_blocks(4), namespace=ns, policy="all", scheduler=client)
            assert last_report().fallback is None
            warm = cached_compute(*_blocks(4), namespace=ns, scheduler=client)
            assert last_report().loaded == 4
            a = stack.processes["cache-a"][0]
            os.killpg(a.pid, signal.SIGKILL)
            a.wait()
            after = cached_compute(*_blocks(4), namespace=ns, scheduler=client)
            report = last_report()
            assert report.fallback is None and report.loaded == 4
        for got in (warm, after):
            for block, expected in zip(got, cold, strict=True):
                np.testing.assert_array_equal(block, expected)
        # The objects are in the bucket of the MinIO service; the index in Redis's AOF.
        bucket = config["services"]["cache-b"]["environment"]["RESULT_CACHE_STORAGE_URL"]
        import s3fs  # here, not at the top: importing it costs every collection ~0.7 s

        fs = s3fs.S3FileSystem(key=SECRETS["AWS_ACCESS_KEY_ID"],
                               secret=SECRETS["AWS_SECRET_ACCESS_KEY"],
                               endpoint_url=f"http://127.0.0.1:{ports['MINIO_PORT']}",
                               use_listings_cache=False)
        assert len(fs.glob(f"{bucket[len('s3://'):]}/??/*/sidecar.json")) == 4
        aof = [p for p in (tmp_path / "volumes").rglob("*appendonly*") if p.is_file()]
        assert aof and sum(p.stat().st_size for p in aof) > 0
