"""Locks shared by the replicas (cache_server/index/locks.py), on the session's real Redis."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import AsyncIterator

import pytest

from cache_server.index.client import connect
from cache_server.index.locks import LockBusy, RedisLock

pytestmark = pytest.mark.anyio


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator:
    client = connect(redis_url)
    yield client
    await client.aclose()


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


async def test_a_lock_left_by_a_killed_process_of_this_host_is_taken_at_once(redis) -> None:
    """A server killed while holding a digest's lock (kill -9 mid-store) left it for its
    whole ttl: the restarted server's first read of that object waited ~30 s."""
    import socket

    key = f"test-lock-{uuid.uuid4().hex}"
    await redis.set(key, f"{socket.gethostname()}:{dead_pid()}:{uuid.uuid4().hex}", px=30_000)
    async with RedisLock(redis, key, ttl=30).hold(wait=2) as holder:
        assert (await redis.get(key)) in (holder, holder.encode())


async def test_a_live_or_foreign_holder_keeps_its_lock(redis) -> None:
    import os
    import socket

    for holder in (f"{socket.gethostname()}:{os.getppid()}:{uuid.uuid4().hex}",  # alive
                   f"another-host:{dead_pid()}:{uuid.uuid4().hex}",  # not ours to judge
                   uuid.uuid4().hex):  # an id of the old form
        key = f"test-lock-{uuid.uuid4().hex}"
        await redis.set(key, holder, px=30_000)
        with pytest.raises(LockBusy):
            async with RedisLock(redis, key, ttl=30).hold(wait=0.3):
                pass
        assert (await redis.get(key)) in (holder, holder.encode())


async def test_many_digests_are_locked_together_and_wait_for_one_held_elsewhere(redis) -> None:
    """A batch store takes its digests' locks in one round trip when all are free; when a
    replica holds one of them it waits for it (one by one, in order) and holds all after."""
    import asyncio

    from cache_server.index.keyspace import Keyspace
    from cache_server.service.locks import DigestLocks

    keys = Keyspace(f"test-{uuid.uuid4().hex}:")
    mine, other = DigestLocks(redis, keys, ttl=30), DigestLocks(redis, keys, ttl=30)
    names = sorted(uuid.uuid4().hex for _ in range(50))

    async def held(name: str) -> bool:
        return await redis.exists(keys.digest_lock(name)) == 1

    async with mine.hold_many(names):
        assert all([await held(n) for n in names])
        with pytest.raises(TimeoutError):  # another replica cannot take one meanwhile
            async with asyncio.timeout(0.3), other.hold(names[7]):
                pass
    assert not any([await held(n) for n in names])  # all released together

    order: list[str] = []

    async def batch() -> None:
        async with mine.hold_many(names):
            order.append("batch")
            assert all([await held(n) for n in names])

    async with other.hold(names[30]):
        waiting = asyncio.create_task(batch())
        await asyncio.sleep(0.3)
        # It waits at the busy one, holding those before it (the order every holder keeps).
        assert not order and await held(names[29]) and not await held(names[31])
        order.append("other")
    await waiting
    assert order == ["other", "batch"]
    assert not any([await held(n) for n in names])
