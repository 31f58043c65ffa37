"""Bounds on what a writer can make the server and other clients hold (issue 29, rows 5-9).

Each test is one attack of RELIABILITY.md's campaigns 16-20, against a real server on a real
Redis: a writer's lease claims (ttl 3600 s, estimate 1e7 s) no longer keep a victim waiting;
a refresh no longer breaks a download in progress nor gets the new entry removed; batches
are held to the body budget; run reports and the leases outstanding are bounded.
"""

from __future__ import annotations

import secrets
import uuid
from pathlib import Path

import dask
import httpx
import pytest
import redis

from client_lib import cached_compute, last_report, task_hashes
from client_lib.execution.leases import lease_wait
from tests._servers import RedisProcess
from tests.conftest import FreshServer

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
