"""Stores acknowledged once replicated (cache_server/index/durability.py), on real
redis-server processes: a primary and its replica. A store waits (Redis ``WAIT``) for the
replica when the primary has one; while the replica does not answer, the store is not
acknowledged (``NotReplicated``; the API answers 503 with ``Retry-After``) and the same
store succeeds once it is back. Without replicas nothing waits, unless a number is asked."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from cache_server.index.client import connect
from cache_server.index.durability import NotReplicated
from cache_server.index.redis_index import RedisIndex
from cache_server.launch import start_server
from tests._servers import RedisProcess
from tests.server.test_index import manifest
from tests.server.wire import encode_pickle, new_hash, put

pytestmark = pytest.mark.slow


def _replicating(primary: RedisProcess, timeout: float = 30.0) -> None:
    client = redis.Redis(port=primary.port, decode_responses=True)
    deadline = time.monotonic() + timeout
    try:
        while not client.execute_command("ROLE")[2]:
            assert time.monotonic() < deadline, "the replica never connected"
            time.sleep(0.05)
    finally:
        client.close()


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[RedisProcess, RedisProcess]]:
    primary = RedisProcess(tmp_path / "primary")
    replica = RedisProcess(tmp_path / "replica", replica_of=primary.port)
    try:
        _replicating(primary)
        yield primary, replica
    finally:
        os.kill(replica.process.pid, signal.SIGCONT)
        replica.stop()
        primary.stop()


class Stopped:
    """The replica frozen (SIGSTOP): connected, answering nothing."""

    def __init__(self, replica: RedisProcess) -> None:
        self.pid = replica.process.pid

    def __enter__(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def __exit__(self, *exc_info: object) -> None:
        os.kill(self.pid, signal.SIGCONT)


def on_replica(replica: RedisProcess, key: str) -> bool:
    client = redis.Redis(port=replica.port)
    try:
        return bool(client.exists(key))
    finally:
        client.close()


@pytest.mark.anyio
async def test_a_store_is_acknowledged_once_the_replica_has_it(pair) -> None:
    primary, replica = pair
    index = RedisIndex(connect(primary.url), prefix=f"t{uuid.uuid4().hex[:6]}:",
                       replica_timeout=0.3)
    try:
        first, second = manifest(), manifest()
        assert (await index.add(first))[1]
        assert on_replica(replica, index.keys.shard_of(first.hash).manifest(first.hash))
        with Stopped(replica), pytest.raises(NotReplicated):
            await index.add(second)  # on the primary, not acknowledged
        indexed, created = await index.add(second)  # the client's retry: waits again
        assert not created and indexed.hash == second.hash
        assert on_replica(replica, index.keys.shard_of(second.hash).manifest(second.hash))
        with Stopped(replica), pytest.raises(NotReplicated):
            await index.set_pinned(first.hash, True)
    finally:
        await index.close()
        await index.redis.aclose()


@pytest.mark.anyio
async def test_zero_replicas_asked_never_waits(pair) -> None:
    primary, replica = pair
    index = RedisIndex(connect(primary.url), prefix=f"t{uuid.uuid4().hex[:6]}:",
                       min_replicas=0, replica_timeout=0.3)
    try:
        with Stopped(replica):
            assert (await index.add(manifest()))[1]
    finally:
        await index.close()
        await index.redis.aclose()


@pytest.mark.anyio
async def test_without_replicas_nothing_waits_unless_asked(redis_url: str) -> None:
    redis_client = connect(redis_url)
    prefix = f"t{uuid.uuid4().hex[:6]}:"
    try:
        assert (await RedisIndex(redis_client, prefix=prefix).add(manifest()))[1]
        asked = RedisIndex(redis_client, prefix=prefix, min_replicas=1, replica_timeout=0.1)
        with pytest.raises(NotReplicated, match="0 of 1 replica"):
            await asked.add(manifest())
    finally:
        await redis_client.aclose()


def test_the_api_answers_503_with_retry_after_until_the_replica_answers(pair, tmp_path):
    primary, replica = pair
    task_hash, value = new_hash(), encode_pickle({"x": 1})
    env = {"RESULT_CACHE_REDIS_REPLICA_TIMEOUT": "0.3"}
    with start_server(tmp_path / "data", redis_url=primary.url, redis_prefix="api:",
                      env=env) as server, httpx.Client(base_url=server.url) as client:
        assert put(client, new_hash(), encode_pickle(0)).status_code == 201
        with Stopped(replica):
            refused = put(client, task_hash, value)
        assert refused.status_code == 503
        assert refused.headers["Retry-After"] == "1"
        assert "replica" in refused.json()["detail"]
        again = put(client, task_hash, value)  # found stored: acknowledged once replicated
        assert again.status_code == 200
        assert client.get(f"/v1/objects/{task_hash}").content == value.body
    assert on_replica(replica, f"api:m:{task_hash}")
