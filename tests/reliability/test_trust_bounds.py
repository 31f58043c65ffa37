"""Bounds on what a writer can make the server and other clients hold (issue 29, rows 5-9).

Each test is one attack of RELIABILITY.md's campaigns 16-20, against a real server on a real
Redis: a writer's lease claims (ttl 3600 s, estimate 1e7 s) no longer keep a victim waiting;
a refresh no longer breaks a download in progress nor gets the new entry removed; batches
are held to the body budget; run reports and the leases outstanding are bounded.
"""

from __future__ import annotations

import secrets
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dask
import httpx
import numpy as np
import pytest
import redis
import xxhash

from cache_server.index.embedded import EmbeddedRedis
from client_lib import cached_compute, last_report, task_hashes
from client_lib.execution.leases import lease_wait
from tests._servers import RedisProcess
from tests.conftest import FreshServer
from tests.server.wire import batch_body, encode_array, encode_pickle, new_hash, put
from tests.stress.memory import store_random_array
from tests.stress.strangers import peak_rss, reset_peak_rss

pytestmark = pytest.mark.slow


def tripled(x: int) -> int:
    return x * 3


@pytest.mark.timeout(120)  # the victim's wait is bounded by its config, not the holder
def test_a_writers_lease_claims_are_bounded(fresh_server: FreshServer) -> None:
    server = fresh_server(max_lease_ttl=120, max_lease_estimate=600)
    namespace = uuid.uuid4().hex
    task = dask.delayed(tripled)(7)
    (task_hash,) = [h for h in task_hashes(task, namespace=namespace).values() if h]
    with httpx.Client(base_url=server.url, timeout=30) as client:
        granted = client.post("/v1/leases", json={"holder": "writer", "ttl": 3600,
                                                  "hashes": [task_hash]})
        assert granted.status_code == 200 and granted.json()["granted"] == [task_hash]
        renewed = client.post("/v1/leases/renew", json={
            "holder": "writer", "ttl": 3600, "hashes": [task_hash],
            "estimates": {task_hash: 1e7}})
        assert renewed.json()["renewed"] == [task_hash]
        status = client.get(f"/v1/leases/{task_hash}").json()
        # The server records its bounds, not the writer's word.
        assert status["leased"] and 0 < status["ttl"] <= 120
        assert status["estimate"] == 600
    # By default a victim waits a bounded time whatever the holder estimates (it used to
    # be None: the holder's estimate + 30 s, here 1e7 s).
    assert lease_wait() == 60
    with dask.config.set({"result-cache.lease-wait": 1}):
        (value,) = cached_compute(task, cache=server.url, namespace=namespace,
                                  scheduler="sync")
    report = last_report()
    assert value == 21
    assert report.waited == 1 and report.computed == 1 and report.loaded == 0


def test_outstanding_leases_are_bounded_per_client_and_in_all(
        fresh_server: FreshServer, tmp_path: Path) -> None:
    own = RedisProcess(tmp_path / "redis")  # its memory is this server's alone
    try:
        _lease_flood(fresh_server, own.url)
    finally:
        own.stop()


def _lease_flood(fresh_server: FreshServer, redis_url: str) -> None:
    token_a, token_b = secrets.token_hex(24), secrets.token_hex(24)
    server = fresh_server(redis=redis_url, max_leases=30_000, max_client_leases=20_000,
                          tokens=f"write:{token_a},write:{token_b}")
    db = redis.Redis.from_url(redis_url)
    before = db.info("memory")["used_memory"]

    def lease(client: httpx.Client, holder: str, n: int = 5_000) -> tuple[int, list[str]]:
        hashes = [uuid.uuid4().hex for _ in range(n)]
        answer = client.post("/v1/leases", json={"holder": holder, "ttl": 3600,
                                                  "hashes": hashes})
        return answer.status_code, hashes

    a = httpx.Client(base_url=server.url, timeout=60,
                     headers={"Authorization": f"Bearer {token_a}"})
    b = httpx.Client(base_url=server.url, timeout=60,
                     headers={"Authorization": f"Bearer {token_b}"})
    with a, b:
        # One client (one token), ten holder names: the quota is the client's, not a
        # holder's (a holder name is the client's own choice). It used to grant them all.
        answers = [lease(a, f"h{i}") for i in range(10)]
        assert [status for status, _ in answers] == [200] * 4 + [429] * 6
        refused = a.post("/v1/leases", json={"holder": "h0", "ttl": 60,
                                              "hashes": [uuid.uuid4().hex]})
        assert refused.status_code == 429 and "max_client_leases" in refused.json()["detail"]
        assert int(refused.headers["Retry-After"]) >= 1
        packed = a.post("/v1/leases/packed", params={"holder": "p", "ttl": 60},
                        content="".join(new_hash() for _ in range(10)).encode(),
                        headers={"Content-Type": "application/octet-stream"})
        assert packed.status_code == 429  # the packed route counts in the same quota
        # Releasing gives quota back.
        released = a.post("/v1/leases/release", json={"holder": "h0",
                                                       "hashes": answers[0][1]})
        assert released.json()["released"] == 5_000
        assert lease(a, "h0")[0] == 200
        # Another client has its own quota, up to the bound in all (30k).
        assert [lease(b, f"o{i}")[0] for i in range(2)] == [200, 200]
        total = b.post("/v1/leases", json={"holder": "o9", "ttl": 60,
                                           "hashes": [uuid.uuid4().hex for _ in range(5)]})
        assert total.status_code == 429 and "max_leases" in total.json()["detail"]
        assert a.get("/healthz").status_code == 200
    fields = sum(db.hlen(k) for k in db.scan_iter(match="*leases", count=1000))
    assert fields == 30_000
    # ~150 bytes of Redis per lease: 30k of them at most, never the 50k+ asked for.
    assert db.info("memory")["used_memory"] - before < 30_000 * 400


def _big_run(run_id: str, started: float, tasks: int = 600) -> dict:
    """A run report of ~``tasks`` x 3 KiB (each task's key, label and reason at their
    1024-character maximum)."""
    task = {"key": "k" * 1024, "label": "l" * 1024, "state": "computed", "reason": "r" * 1024}
    return {"run_id": run_id, "started": started, "tasks": tasks, "task_list": [task] * tasks}


def test_run_reports_and_redis_memory_are_bounded(fresh_server: FreshServer,
                                                   tmp_path: Path) -> None:
    own = RedisProcess(tmp_path / "redis")
    try:
        db = redis.Redis.from_url(own.url)
        db.config_set("maxmemory-policy", "allkeys-lru")  # would drop entries silently
        server = fresh_server(redis=own.url, max_run_bytes="2MiB", max_runs_bytes="8MiB")
        assert "maxmemory-policy is allkeys-lru" in server.log_path.read_text()
        with httpx.Client(base_url=server.url, timeout=60) as client:
            # One report of 5000 tasks (~15 MiB, the most the schema allows): refused,
            # nothing recorded. It used to take ~17 MB of Redis per run, 1000 runs kept.
            huge = client.post("/v1/runs", json=_big_run(uuid.uuid4().hex, 1.0, 5000))
            assert huge.status_code == 413 and "max_run_bytes" in huge.json()["detail"]
            assert client.get("/v1/runs").json()["runs"] == []
            # Twelve reports of ~1.8 MiB: the oldest go once 8 MiB are kept.
            before = db.info("memory")["used_memory"]
            ids = [uuid.uuid4().hex for _ in range(12)]
            for i, run_id in enumerate(ids):
                assert client.post("/v1/runs", json=_big_run(run_id, 1000.0 + i)).status_code \
                    == 200
            kept = [r["run_id"] for r in client.get("/v1/runs", params={"limit": 100}).json()[
                "runs"]]
            assert kept == ids[::-1][:len(kept)] and 3 <= len(kept) <= 4
            assert client.get(f"/v1/runs/{ids[0]}").status_code == 404
            assert client.get(f"/v1/runs/{ids[-1]}").status_code == 200
            assert db.info("memory")["used_memory"] - before < 12 * 2**20

            # Redis at its maxmemory under noeviction: writes are refused (507), and
            # nothing indexed is dropped to make room.
            hashes = [new_hash() for _ in range(20)]
            for task_hash in hashes:
                assert put(client, task_hash, encode_pickle(task_hash)).status_code == 201
            db.config_set("maxmemory-policy", "noeviction")
            db.config_set("maxmemory", str(db.info("memory")["used_memory"] // 2))
            flood = client.post("/v1/leases", json={
                "holder": "flood", "hashes": [new_hash() for _ in range(5000)]})
            assert flood.status_code == 507 and "maxmemory" in flood.json()["detail"]
            refused = put(client, new_hash(), encode_pickle("late"))
            assert refused.status_code == 507 and "maxmemory" in refused.json()["detail"]
            # ... and its object did not stay on disk as an orphan.
            assert len(list((server.data_dir / "objects").glob("blob/*/*"))) == 20
            found = client.post("/v1/lookup", json={"hashes": hashes}).json()["found"]
            assert sorted(found) == sorted(hashes)
            assert client.get("/healthz").status_code == 200
            db.config_set("maxmemory", "0")
    finally:
        own.stop()


def test_the_embedded_redis_never_evicts(tmp_path: Path) -> None:
    embedded = EmbeddedRedis(tmp_path / "redis", max_memory=64 * 2**20)
    url = embedded.start()
    try:
        db = redis.Redis.from_url(url)
        assert db.config_get("maxmemory")["maxmemory"] == str(64 * 2**20)
        assert db.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
        db.close()
    finally:
        embedded.stop()


def test_a_refresh_during_a_download_breaks_nothing(fresh_server: FreshServer) -> None:
    # Verified streams (read chunk by chunk from storage while sending).
    server = fresh_server(zero_copy_min_bytes="1GiB")
    task_hash, old_digest = store_random_array(server.url, 64)
    fresh = encode_array(np.arange(1000.0))
    with httpx.Client(base_url=server.url, timeout=120) as client:
        corrupt_before = client.get("/v1/stats").json()["corrupt"]
        prefix = f"ndarray\n<f8\n[{8 * 2**20}]\n".encode()
        hasher = xxhash.xxh3_128(prefix)
        received = 0
        with client.stream("GET", f"/v1/objects/{task_hash}") as download:
            assert download.status_code == 200
            pieces = download.iter_raw(2**20)
            first = next(pieces)
            hasher.update(first)
            received += len(first)
            # The refresh of the same hash, with another body, while the download is
            # paused: it used to delete the old object under the reader.
            refreshed = client.put(f"/v1/objects/{task_hash}", params={"overwrite": "true"},
                                   content=fresh.body, headers=fresh.headers())
            assert refreshed.status_code == 201
            for piece in pieces:
                hasher.update(piece)
                received += len(piece)
        # The old download completed, whole and matching its digest ...
        assert received == 64 * 2**20 and hasher.hexdigest() == old_digest
        # ... was not counted as corruption, and the new entry stays.
        assert client.get("/v1/stats").json()["corrupt"] == corrupt_before
        now = client.get(f"/v1/objects/{task_hash}")
        assert now.status_code == 200 and now.content == fresh.body
        assert now.headers["X-Result-Digest"] == fresh.digest

        # A DELETE does cut a download off (the user asked for it), and then a store of
        # the same hash: the broken download's corruption handling used to remove that
        # new entry; it removes only the digest it found missing.
        task_hash, _ = store_random_array(server.url, 64, seed=1)
        with client.stream("GET", f"/v1/objects/{task_hash}") as download:
            pieces = download.iter_raw(2**20)
            next(pieces)
            assert client.delete(f"/v1/entries/{task_hash}").status_code == 204
            assert put(client, task_hash, fresh).status_code == 201
            with pytest.raises(httpx.RemoteProtocolError):
                for _ in pieces:
                    pass
        assert client.get("/v1/stats").json()["corrupt"] == corrupt_before
        assert client.get(f"/v1/objects/{task_hash}").content == fresh.body


def test_concurrent_batches_are_held_to_the_body_budget(fresh_server: FreshServer) -> None:
    budget = 128 * 2**20
    server = fresh_server(max_body_memory=budget)
    rng = np.random.default_rng(5)
    items = [(new_hash(), encode_array(rng.integers(0, 255, 2**20 - 4096, dtype=np.uint8)))
             for _ in range(63)]
    body = batch_body(items)  # ~63 MiB, sent by all eight at once
    headers = {"Content-Type": "application/x-result-batch"}

    def post(_: int) -> httpx.Response:
        return httpx.post(f"{server.url}/v1/objects/batch", content=body, headers=headers,
                          timeout=300)

    before = reset_peak_rss(server.pid)
    with ThreadPoolExecutor(8) as pool:
        answers = pool.map(post, range(8))
        health = httpx.get(f"{server.url}/healthz", timeout=30)
        answers = list(answers)
    growth = peak_rss(server.pid) - before
    assert health.status_code == 200
    statuses = sorted(a.status_code for a in answers)
    # Each batch reserves its 63 MiB first: two fit the 128 MiB, the others come back later.
    assert set(statuses) <= {200, 503} and statuses.count(200) >= 1
    for answer in answers:
        if answer.status_code == 503:
            assert int(answer.headers["Retry-After"]) >= 1
            assert "max_body_memory" in answer.json()["detail"]
        else:
            assert {r["status"] for r in answer.json()["results"]} <= {200, 201}
    # It used to grow by ~1 GiB (a copy per item and a bytearray, per batch).
    print(f"peak RSS growth {growth / 2**20:.1f} MiB, statuses {statuses}")
    assert growth < budget + 96 * 2**20, growth / 2**20
    stored = post(0)
    assert stored.status_code == 200
    assert {r["status"] for r in stored.json()["results"]} == {200}  # all indexed once


def test_a_refused_lease_request_leases_nothing_in_a_cluster(
        fresh_server: FreshServer, redis_cluster_url: str) -> None:
    # A Cluster's index has 16 shards (by a hash's first hex digit); each checks its share
    # of the client's quota: 10 of 160.
    server = fresh_server(redis=redis_cluster_url, max_client_leases=160)

    def hashes(digit: str, n: int) -> list[str]:
        return [digit + new_hash()[1:] for _ in range(n)]

    with httpx.Client(base_url=server.url, timeout=60) as client:
        first = hashes("0", 10)  # shard 0 full
        assert client.post("/v1/leases", json={"holder": "a", "hashes": first}).json()[
            "granted"] == first
        second = hashes("0", 5) + hashes("1", 5)  # shard 1 has room, shard 0 none
        refused = client.post("/v1/leases", json={"holder": "a", "hashes": second})
        assert refused.status_code == 429
        leased = [client.get(f"/v1/leases/{h}").json()["leased"] for h in second]
        assert leased == [False] * 10  # not even on the shard that had room
        assert all(client.get(f"/v1/leases/{h}").json()["leased"] for h in first)
