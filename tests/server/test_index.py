"""RedisIndex in process, on a real Redis and on a real Redis Cluster (the ``index`` fixture
runs each test on both): entries, shared objects counted once, pins, pagination, recount,
and transactions that stay correct when they race."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from cache_server.index.redis_index import RedisIndex
from cache_server.index.telemetry import LOOKUP_FLUSH_SECONDS
from cache_server.index.transactions import watched
from cache_server.models import Manifest
from tests.server.wire import new_hash

pytestmark = pytest.mark.anyio


def manifest(digest: str | None = None, *, nbytes: int = 100, label: str = "step",
             pinned: bool = False) -> Manifest:
    return Manifest(hash=new_hash(), digest=digest or new_hash(), kind="pickle",
                    storage="blob", nbytes=nbytes, compute_seconds=1.0, label=label,
                    created=time.time(), pinned=pinned)


async def test_add_is_indexed_once(index: RedisIndex) -> None:
    entry = manifest()
    indexed, created = await index.add(entry)
    assert created and indexed.hash == entry.hash
    again, created = await index.add(entry.model_copy(update={"label": "x"}))
    assert not created and again.label == "step"
    assert await index.lookup([entry.hash, new_hash(), entry.hash]) == [entry.hash]
    assert await index.lookup_packed((entry.hash + new_hash()).encode()) == b"\x01\x00"
    stats = await index.stats()
    assert (stats.entries, stats.stores, stats.bytes, stats.stored_bytes) == (1, 1, 100, 100)
    assert (stats.lookups, stats.misses) == (4, 2)
    assert [e.kind for e in await index.events(10)] == ["lookup", "lookup", "store"]


async def test_a_shared_object_counts_once_until_its_last_reference_goes(
    index: RedisIndex,
) -> None:
    first = manifest(nbytes=1000)
    second = manifest(first.digest, nbytes=1000)
    await index.add(first)
    await index.add(second)
    assert await index.references(first.digest) == {first.hash, second.hash}
    assert (await index.stats()).stored_bytes == 1000
    assert (await index.stats()).bytes == 2000
    removed, remaining = await index.remove(first.hash)
    assert removed.hash == first.hash and remaining == 1
    assert (await index.stats()).stored_bytes == 1000
    _, remaining = await index.remove(second.hash, reason="evict")
    assert remaining == 0
    stats = await index.stats()
    assert (stats.entries, stats.bytes, stats.stored_bytes) == (0, 0, 0)
    assert (stats.deletes, stats.evictions) == (1, 1)
    assert await index.remove(second.hash) is None


async def test_pinned_entries_are_never_eviction_candidates(index: RedisIndex) -> None:
    pinned, loose = manifest(pinned=True), manifest()
    await index.add(pinned)
    await index.add(loose)
    assert await index.eviction_candidates(10) == [loose.hash]
    assert (await index.set_pinned(loose.hash, True)).pinned
    assert await index.eviction_candidates(10) == []
    assert not (await index.set_pinned(pinned.hash, False)).pinned
    assert await index.eviction_candidates(10) == [pinned.hash]
    assert await index.set_pinned(new_hash(), True) is None
    assert (await index.stats()).pinned == 1


async def test_hits_raise_an_entry_in_the_eviction_order(index: RedisIndex) -> None:
    old, new = manifest(), manifest()
    await index.add(old)
    await index.add(new)
    assert await index.eviction_candidates(1) == [old.hash]
    await index.record_hit(old, now=time.time() + 10 * index.eviction_half_life)
    assert await index.eviction_candidates(1) == [new.hash]
    assert (await index.manifest(old.hash)).hits == 1


async def test_pages_by_hash_and_by_label(index: RedisIndex) -> None:
    entries = [manifest(label="a" if n % 2 else "b") for n in range(7)]
    for entry in entries:
        await index.add(entry)
    seen, cursor = [], None
    while True:
        page, cursor = await index.page(label=None, limit=3, cursor=cursor)
        seen += [m.hash for m in page]
        if cursor is None:
            break
    assert seen == sorted(e.hash for e in entries)
    labelled, _ = await index.page(label="a", limit=100, cursor=None)
    assert sorted(m.hash for m in labelled) == sorted(e.hash for e in entries if e.label == "a")


async def test_recount_restores_the_byte_totals(index: RedisIndex) -> None:
    shared = manifest(nbytes=10)
    for entry in (shared, manifest(shared.digest, nbytes=10), manifest(nbytes=5)):
        await index.add(entry)
    for shard in index.keys.shards:
        client = await index.topology.client_for(shard.prefix)
        await client.hset(shard.stats, mapping={"bytes": 999, "stored_bytes": 1})
    assert await index.recount() == (25, 15)
    stats = await index.stats()
    assert (stats.bytes, stats.stored_bytes) == (25, 15)
    assert len(await index.eviction_candidates(10)) == 3


async def test_concurrent_adds_of_one_object_count_it_once(index: RedisIndex) -> None:
    # One Redis: the transactions alone keep the counts. A Cluster spreads the 20 entries
    # over shards, and the count of one digest's references elsewhere is exact only while
    # its writes take turns: under the digest's lock, as the service holds it.
    lock = asyncio.Lock() if index.keys.sharded else contextlib.nullcontext()

    async def locked(write):
        async with lock:
            return await write

    first = manifest(nbytes=64)
    entries = [first] + [manifest(first.digest, nbytes=64) for _ in range(19)]
    results = await asyncio.gather(*(locked(index.add(e)) for e in entries))
    assert all(created for _, created in results)
    if index.keys.sharded:
        assert len({index.keys.shard_of(e.hash) for e in entries}) > 1
    stats = await index.stats()
    assert (stats.entries, stats.bytes, stats.stored_bytes) == (20, 20 * 64, 64)
    removals = await asyncio.gather(*(locked(index.remove(e.hash)) for e in entries))
    assert sorted(remaining for _, remaining in removals) == list(range(20))
    stats = await index.stats()
    assert (stats.entries, stats.bytes, stats.stored_bytes) == (0, 0, 0)


async def test_concurrent_adds_of_one_hash_create_it_once(index: RedisIndex) -> None:
    entry = manifest()
    results = await asyncio.gather(*(index.add(entry.model_copy()) for _ in range(10)))
    assert sorted(created for _, created in results) == [False] * 9 + [True]
    assert (await index.stats()).entries == 1


async def test_watched_starts_over_when_a_watched_key_changes(index: RedisIndex) -> None:
    key = f"{index.keys.shards[0].prefix}watched-test"
    redis = await index.topology.client_for(key)  # one Redis, or the master of its slot
    await redis.set(key, "0")
    attempts = []

    async def increment(pipe) -> int:
        await pipe.watch(key)
        value = int(await pipe.get(key))
        attempts.append(value)
        if len(attempts) == 1:
            await redis.set(key, "10")  # another client writes between read and EXEC
        pipe.multi()
        pipe.set(key, value + 1)
        await pipe.execute()
        return value + 1

    assert await watched(redis, increment) == 11
    assert attempts == [0, 10]
    assert await redis.get(key) == "11"


async def test_lookup_counts_reach_redis_for_every_replica_and_in_order(
    index: RedisIndex,
) -> None:
    # Lookups are counted in the process and added to Redis in one round trip for many
    # (LOOKUP_FLUSH_SECONDS later, or before this replica writes another event).
    other = RedisIndex(index.redis, prefix=index.prefix)  # another replica's view
    entry = manifest()
    await index.add(entry)
    for _ in range(3):
        assert await index.lookup_packed((entry.hash + new_hash()).encode()) == b"\x01\x00"
    await index.record_hit(entry)  # the lookups' events go first
    assert [e.kind for e in await other.events(10)] == [
        "hit", "lookup", "lookup", "lookup", "store"]
    await index.lookup([entry.hash])
    await asyncio.sleep(LOOKUP_FLUSH_SECONDS * 3)
    stats = await other.stats()
    assert (stats.lookups, stats.found, stats.misses) == (7, 4, 3)
    await index.lookup([new_hash()])
    await index.close()  # a replica that stops adds what it counted
    assert (await other.stats()).misses == 4
