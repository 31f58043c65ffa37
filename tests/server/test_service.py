"""ResultCache in process, on a real Redis and a real data directory: the domain operations
and their errors, without HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import numpy as np
import pytest

from cache_server.index.client import connect
from cache_server.index.redis_index import RedisIndex
from cache_server.metrics import Metrics
from cache_server.models import Manifest
from cache_server.service.cache import ResultCache
from cache_server.service.errors import (
    BodyTooLarge,
    EntryNotFound,
    IndexUnavailable,
    InvalidUpload,
    NoRoom,
)
from cache_server.service.upload import Upload
from storage import DigestMismatch, LocalStorage, ObjectHeader
from tests._servers import free_port
from tests.server.wire import Encoded, encode_array, encode_pickle, new_hash

pytestmark = pytest.mark.anyio

MakeCache = Callable[..., ResultCache]  # the make_cache fixture


def upload(encoded: Encoded, task_hash: str | None = None, *, label: str = "step",
           compute_seconds: float = 1.0, length: bool = True, **fields) -> Upload:
    values = {
        "task_hash": task_hash or new_hash(),
        "header": ObjectHeader.from_wire(encoded.kind, encoded.dtype or None,
                                         encoded.shape or None),
        "digest": encoded.digest,
        "compute_seconds": compute_seconds,
        "label": label,
        "type_name": None,
        "content_length": len(encoded.body) if length else None,
    }
    return Upload(**{**values, **fields})


async def chunks(body: bytes, size: int = 4096) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


async def store(cache: ResultCache, encoded: Encoded, task_hash: str | None = None, **kwargs):
    return await cache.store(upload(encoded, task_hash, **kwargs), chunks(encoded.body))


async def load(cache: ResultCache, task_hash: str) -> tuple[Manifest, bytes]:
    """An entry's manifest and its whole body, as the GET route streams it."""
    manifest, pieces = await cache.stream(task_hash)
    return manifest, b"".join([bytes(piece) async for piece in pieces])


def stored_digests(cache: ResultCache) -> list[str]:
    return sorted(cache.storage.digests())


async def test_store_load_delete(make_cache: MakeCache) -> None:
    cache = make_cache()
    value = np.arange(1000, dtype="<f8")
    encoded = encode_array(value)
    manifest, created = await store(cache, encoded, label="grid", compute_seconds=2.5)
    assert created and (manifest.kind, manifest.nbytes, manifest.label) == ("ndarray", 8000,
                                                                             "grid")
    again, created = await store(cache, encoded, manifest.hash)
    assert not created and again.digest == manifest.digest
    loaded, body = await load(cache, manifest.hash)
    assert body == encoded.body and loaded.hash == manifest.hash
    stats = await cache.stats()
    assert (stats.stores, stats.served, stats.saved_seconds) == (1, 1, 2.5)
    assert stats.found == stats.hits == 0  # nothing was looked up
    assert cache.metrics.registry.get_sample_value("result_cache_served_total") == 1
    await cache.delete(manifest.hash)
    with pytest.raises(EntryNotFound):
        await load(cache, manifest.hash)
    assert stored_digests(cache) == []


async def test_the_object_goes_with_its_last_entry(make_cache: MakeCache) -> None:
    cache = make_cache()
    encoded = encode_pickle({"same": "value"})
    first, _ = await store(cache, encoded)
    second, created = await store(cache, encoded)
    assert created and first.digest == second.digest
    await cache.delete(first.hash)
    assert stored_digests(cache) == [encoded.digest]
    assert (await cache.head(second.hash)).hash == second.hash
    await cache.delete(second.hash)
    assert stored_digests(cache) == []


async def test_bad_uploads_leave_nothing(make_cache: MakeCache) -> None:
    cache = make_cache(max_body_bytes=1000)
    encoded = encode_pickle(b"x" * 5000)
    with pytest.raises(BodyTooLarge, match="max_body_bytes"):
        await store(cache, encoded)  # announced too large: refused before reading
    with pytest.raises(BodyTooLarge):
        await store(cache, encoded, length=False)  # streamed: cut off while reading
    small = encode_pickle("small")
    with pytest.raises(DigestMismatch):
        await cache.store(upload(small, digest=new_hash()), chunks(small.body))
    for bad in ({"digest": "XYZ"}, {"compute_seconds": float("nan")}, {"label": "x" * 2000}):
        with pytest.raises(InvalidUpload):
            upload(small, **bad)
    stats = await cache.stats()
    assert (stats.entries, stats.stores) == (0, 0) and stored_digests(cache) == []


async def test_a_corrupt_object_is_dropped_and_reads_as_not_found(
    make_cache: MakeCache,
) -> None:
    cache = make_cache()
    encoded = encode_pickle(list(range(100)))
    manifest, _ = await store(cache, encoded)
    blob = cache.storage.root / "blob" / encoded.digest[:2] / encoded.digest / "blob"
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    with pytest.raises(EntryNotFound):
        await load(cache, manifest.hash)
    assert (await cache.stats()).corrupt == 1
    with pytest.raises(EntryNotFound):
        await cache.manifest(manifest.hash)
    assert stored_digests(cache) == []


async def test_the_cap_evicts_the_cheapest_and_never_pinned_entries(
    make_cache: MakeCache,
) -> None:
    cache = make_cache(max_bytes=2500)
    first, _ = await store(cache, encode_pickle(b"1" * 900), compute_seconds=100.0)
    cheap, _ = await store(cache, encode_pickle(b"2" * 900), compute_seconds=0.001)
    await cache.set_pinned(first.hash, True)
    third, _ = await store(cache, encode_pickle(b"3" * 900), compute_seconds=10.0)
    with pytest.raises(EntryNotFound):
        await cache.manifest(cheap.hash)
    stats = await cache.stats()
    assert stats.evictions == 1 and stats.stored_bytes <= 2500 and stats.max_bytes == 2500
    with pytest.raises(NoRoom, match="larger than the cache"):
        await store(cache, encode_pickle(b"4" * 3000))
    await cache.set_pinned(third.hash, True)
    with pytest.raises(NoRoom, match="pinned"):
        await store(cache, encode_pickle(b"5" * 900))
    assert {m.hash for m in (await cache.entries(label=None, limit=10, cursor=None))[0]} == {
        first.hash, third.hash}


async def test_an_unreachable_index_is_reported(tmp_path) -> None:
    redis = connect(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    try:
        cache = ResultCache(RedisIndex(redis), LocalStorage(tmp_path), Metrics(), 1000)
        with pytest.raises(IndexUnavailable, match="unreachable"):
            await cache.check_health()
    finally:
        await redis.aclose()


async def test_a_batch_on_one_redis_and_on_a_cluster(make_cache: MakeCache) -> None:
    """A batch locks its digests in one pipelined round trip (in a Cluster they fall in
    different slots) and indexes its entries in one transaction per shard."""
    from cache_server.api.routers.objects import parse_batch
    from tests.server.wire import batch_body

    cache = make_cache()
    values = [encode_pickle(i) for i in range(40)] + [encode_array(np.arange(8.0))]
    items = [(new_hash(), v) for v in values] + [(new_hash(), values[0])]  # one shared
    uploads, outcomes = await cache.store_batch(chunks(batch_body(items)), 2**20,
                                                parse_batch)
    assert [o[1] for o in outcomes] == [True] * len(items)
    for task_hash, encoded in items:
        assert (await load(cache, task_hash))[1] == encoded.body
    assert len(uploads) == len(items)
