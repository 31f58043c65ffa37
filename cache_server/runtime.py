"""Opening a data directory for use: its lock, its Redis, its storage, one :class:`ResultCache`.

The server's lifespan and the maintenance commands open a cache the same way; only how long
they wait for the data directory's lock differs (a restarting server waits for its
predecessor, ``gc`` refuses at once). The lock is taken only with the embedded Redis (which
lives in the data directory): with a shared Redis, any number of replicas and maintenance
commands use one cache, coordinated by locks in Redis (docs/design/replicas.md, "Replicas").
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

from anyio import to_thread
from redis.exceptions import RedisError

from cache_server.data_lock import DataDirLock
from cache_server.index.client import connect
from cache_server.index.embedded import EmbeddedRedis
from cache_server.index.redis_index import RedisIndex
from cache_server.metrics import Metrics
from cache_server.service.cache import ResultCache
from cache_server.service.leases import LeaseBounds
from cache_server.settings import Settings
from storage import open_storage

__all__ = ["open_cache"]

logger = logging.getLogger("cache_server")


async def _warn_if_evicting(client: Any) -> None:
    """Say so at start when the (external) Redis may evict keys at its maxmemory: it would
    drop index entries silently. ``noeviction`` refuses writes instead (answered 507)."""
    with suppress(RedisError, OSError, KeyError, TypeError):
        policy = (await client.config_get("maxmemory-policy"))["maxmemory-policy"]
        if str(policy) != "noeviction":
            logger.warning("Redis's maxmemory-policy is %s: at its maxmemory it evicts keys, "
                           "index entries and leases among them, without a word; set "
                           "maxmemory-policy noeviction (then full means 507)", policy)


@asynccontextmanager
async def open_cache(
    settings: Settings, metrics: Metrics | None = None, *, lock_wait: float = 0.0
) -> AsyncIterator[ResultCache]:
    """The cache of ``settings.data_dir``: with the embedded Redis (``settings.redis_url``
    is None, started here) under the data directory's lock; undoes everything on exit.
    Raises :class:`~cache_server.data_lock.DataDirBusy` if another server or maintenance
    command keeps the directory for more than ``lock_wait`` seconds.
    """
    data_dir = settings.data_dir.resolve()
    replica = settings.redis_url is not None
    lock = DataDirLock(data_dir)
    if not replica:  # a replica keeps nothing in the data directory (objects: storage URL)
        data_dir.mkdir(parents=True, exist_ok=True)
        await to_thread.run_sync(lock.acquire, lock_wait)
    embedded: EmbeddedRedis | None = None
    client = index = None
    try:
        redis_url = settings.redis_url
        if redis_url is None:
            embedded = EmbeddedRedis(data_dir / "redis", settings.redis_max_memory)
            redis_url = await to_thread.run_sync(embedded.start)
        client = connect(redis_url)
        if embedded is None:
            await _warn_if_evicting(client)
        index = RedisIndex(
            client,
            prefix=settings.redis_prefix,
            events_maxlen=settings.events_maxlen,
            eviction_half_life=settings.eviction_half_life,
            min_replicas=settings.redis_min_replicas,
            replica_timeout=settings.redis_replica_timeout,
        )
        yield ResultCache(
            index,
            open_storage(settings.objects_url()),
            metrics or Metrics(),
            settings.max_body_bytes,
            settings.max_bytes,
            settings.max_lease_hashes,
            settings.max_uploads,
            settings.body_timeout,
            settings.max_body_memory,
            settings.zero_copy_min_bytes,
            lease_bounds=LeaseBounds(settings.max_lease_ttl, settings.max_lease_estimate,
                                     settings.max_leases, settings.max_client_leases),
            max_run_bytes=settings.max_run_bytes,
            max_runs_bytes=settings.max_runs_bytes,
        )
    finally:
        if index is not None:
            with suppress(RedisError, OSError):
                await index.close()  # the lookups counted in this process
        if client is not None:
            await client.aclose()
        if embedded is not None:
            await to_thread.run_sync(embedded.stop)
        lock.release()
