"""Several servers over one Redis and one storage serve one cache: any replica answers,
stats are shared, eviction runs on one replica at a time and never touches a pinned entry
or one being read, and a replica killed mid-run costs the client nothing but a retry.
docs/design/replicas.md, "Replicas"."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import anyio
import dask
import httpx
import numpy as np
import psutil
import pytest

from cache_server.index.client import connect
from cache_server.index.redis_index import RedisIndex
from cache_server.launch import start_server
from cache_server.metrics import Metrics
from cache_server.service.cache import ResultCache
from client_lib import CacheClient, cached_compute, last_report
from storage import LocalStorage
from tests.server.test_service import store
from tests.server.wire import encode_array, new_hash, put


def _replicas(tmp_path: Path, redis_url: str, n: int = 2, **env: str):
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    settings = {f"RESULT_CACHE_{k.upper()}": v for k, v in env.items()}
    return [start_server(tmp_path / "shared", redis_url=redis_url, redis_prefix=prefix,
                         env=settings) for _ in range(n)]


def _square(i: float) -> float:
    time.sleep(0.05)
    return np.full(8, i * i)


def _graph(n: int):
    parts = [dask.delayed(_square, pure=True)(float(i), dask_key_name=f"sq{i}")
             for i in range(n)]
    return parts, dask.delayed(sum, pure=True)(parts, dask_key_name="total")


@pytest.mark.slow
def test_two_replicas_serve_one_cache_and_survive_a_kill(tmp_path, redis_url):
    first, second = _replicas(tmp_path, redis_url)
    try:
        ns = uuid.uuid4().hex
        parts, total = _graph(20)
        # A stores half the parts through replica 1; B, on replica 2, finds all of them.
        cached_compute(*parts[:10], cache=first.url, namespace=ns, policy="all",
                       scheduler="threads")
        assert last_report().stored == 10
        cached_compute(*parts[:10], cache=second.url, namespace=ns, scheduler="threads")
        report = last_report()
        assert report.loaded == 10 and report.computed == 0
        assert CacheClient(first.url).stats() == CacheClient(second.url).stats()
        # C runs the whole graph over both; replica 1 dies in the middle of it.
        killer = threading.Timer(0.3, os.kill, (first.pid, signal.SIGKILL))
        killer.start()
        (value,) = cached_compute(total, cache=f"{first.url},{second.url}", namespace=ns,
                                  policy="all", scheduler="threads", num_workers=2)
        killer.join()
        assert first.process.wait(timeout=10) == -signal.SIGKILL
        np.testing.assert_array_equal(value, np.full(8, float(sum(i * i for i in range(20)))))
        report = last_report()
        assert report.fallback is None and report.loaded == 10 and report.computed == 11
        (again,) = cached_compute(total, cache=second.url, namespace=ns, scheduler="threads")
        np.testing.assert_array_equal(again, value)
        assert last_report().loaded == 1
    finally:
        first.stop()
        second.stop()


@pytest.mark.slow
def test_concurrent_eviction_on_two_replicas_keeps_pinned_entries(tmp_path, redis_url):
    replicas = _replicas(tmp_path, redis_url, max_bytes="200KB")
    try:
        clients = [httpx.Client(base_url=r.url, timeout=60) for r in replicas]
        pinned = new_hash()
        value = encode_array(np.arange(2000.0))  # 16 kB each
        assert put(clients[0], pinned, value).status_code == 201
        assert clients[1].post(f"/v1/entries/{pinned}/pin").status_code == 200

        def fill(client: httpx.Client, seed: int) -> None:
            for n in range(30):
                encoded = encode_array(np.full(2000, float(seed * 1000 + n)))
                assert put(client, new_hash(), encoded).status_code in (201, 507)

        threads = [threading.Thread(target=fill, args=(c, s)) for s, c in enumerate(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        stats = clients[0].get("/v1/stats").json()
        assert stats["evictions"] >= 40 and stats["stored_bytes"] <= 200_000
        for client in clients:
            response = client.get(f"/v1/objects/{pinned}")
            assert response.status_code == 200 and response.content == value.body
    finally:
        for replica in replicas:
            replica.stop()


@pytest.mark.anyio
async def test_eviction_on_any_replica_leaves_an_object_being_read(redis_url, tmp_path):
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    redis = connect(redis_url)
    try:
        one, other = (ResultCache(RedisIndex(redis, prefix=prefix), LocalStorage(tmp_path),
                                  Metrics(), 2**30, max_bytes=100_000) for _ in range(2))
        read = encode_array(np.arange(2000.0))
        read_entry, _ = await store(one, read, compute_seconds=0.001)  # evicted first
        async with other.locks.reading(read.digest):
            for n in range(12):  # 12 x 16 kB > 100 kB: evictions on both replicas
                cache = (one, other)[n % 2]
                await store(cache, encode_array(np.full(2000, float(n))), compute_seconds=9.0)
            assert await one.index.manifest(read_entry.hash) is not None
            assert one.storage.exists(read.digest)
        with anyio.fail_after(10):  # once read, it goes first
            await store(one, encode_array(np.full(2000, 99.0)), compute_seconds=9.0)
        assert await one.index.manifest(read_entry.hash) is None
        assert not one.storage.exists(read.digest)
    finally:
        await redis.aclose()


@pytest.mark.slow
def test_serve_with_two_workers_answers_on_one_port_and_replaces_a_dead_one(tmp_path):
    with start_server(tmp_path / "data", workers=2) as server:
        replicas = _replica_pids(server.pid)
        assert len(replicas) == 2
        client = CacheClient(server.url)
        task_hash = new_hash()
        assert client.put(task_hash, np.arange(5.0), 1.0, "x")
        os.kill(replicas[0], signal.SIGKILL)
        for _ in range(20):  # every connection lands on the live one (or its successor)
            np.testing.assert_array_equal(CacheClient(server.url).get(task_hash),
                                          np.arange(5.0))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            alive = [pid for pid in _replica_pids(server.pid) if pid != replicas[0]]
            if len(alive) == 2:
                break
            time.sleep(0.2)
        assert len(alive) == 2


def _replica_pids(parent: int) -> list[int]:
    """The live ``serve --fd`` children of ``parent``."""
    pids = []
    for child in psutil.Process(parent).children():
        try:
            if "--fd" in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE:
                pids.append(child.pid)
        except psutil.Error:
            continue  # exited meanwhile
    return pids
