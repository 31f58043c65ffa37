"""Which Redis client serves which keys: :class:`Topology`.

One Redis, or a Sentinel's primary: one client for everything (what :func:`.client.connect`
returned). A Redis Cluster: single commands and scripts go through the cluster client,
which routes each by its key's slot; a transaction (``WATCH``/``MULTI``/``EXEC``) or a
pipeline of one shard runs on a plain client of the master that holds the shard's slot
(:meth:`.ClusterClient.node`), and a read over many shards (a lookup) sends each master one
pipeline with its shards' commands, all masters at once: one round trip each.

When a master dies and its replica takes over, commands sent to the old one fail
(connection refused, ``MOVED``, ``CLUSTERDOWN``): the topology is read again from the
cluster and the work is sent again, a few times (about a second in all); after that the
error goes up (the API answers 503 with ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ConnectionError,
    MasterDownError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    SlotNotCoveredError,
    TimeoutError,
    TryAgainError,
)

from cache_server.index.client import ClusterClient, IndexRedis
from cache_server.index.keyspace import Keyspace, Shard
from cache_server.index.transactions import watched

__all__ = ["TOPOLOGY_ERRORS", "UNAVAILABLE_ERRORS", "Queue", "Topology"]

T = TypeVar("T")
#: Queues a shard's commands on a pipeline (its answer is ignored).
Queue = Callable[..., object]

#: Errors that mean the cluster's shape changed (or is changing) under a command: read it
#: again and resend. (``MovedError`` is an ``AskError``.)
TOPOLOGY_ERRORS = (AskError, ClusterDownError, TryAgainError, SlotNotCoveredError,
                   ConnectionError, TimeoutError, MasterDownError, ReadOnlyError, OSError)
#: What the API answers with 503 and ``Retry-After``: the index cannot be reached, or is
#: failing over.
UNAVAILABLE_ERRORS = (ConnectionError, TimeoutError, ClusterDownError, TryAgainError,
                      AskError, SlotNotCoveredError, ReadOnlyError)
_ATTEMPTS = 4
_PAUSE = 0.25  # seconds between attempts: a promoted replica needs a moment to be told
_REFRESH_AT_MOST_EVERY = 0.2


class Topology:
    """The client(s) of one cache's Redis and its :class:`~.keyspace.Keyspace` (sharded
    for a Redis Cluster). Coroutine-safe."""

    def __init__(self, redis: IndexRedis, prefix: str) -> None:
        self.redis = redis
        self.cluster: ClusterClient | None = None
        if isinstance(redis, RedisCluster):
            if not isinstance(redis, ClusterClient):
                raise TypeError("a Redis Cluster index needs cache_server.index.client.connect()")
            self.cluster = redis
        self.keys = Keyspace(prefix, sharded=self.cluster is not None)
        self._refreshing = asyncio.Lock()
        self._refreshed = 0.0

    async def client_for(self, key: str) -> aioredis.Redis:
        """A plain client that holds ``key`` (a shard's prefix will do): the one client, or
        the master of ``key``'s slot."""
        if self.cluster is None:
            return self.redis  # type: ignore[return-value]
        await self.cluster.initialize()  # at once if it is
        node = self.cluster.nodes_manager.get_node_from_slot(self.cluster.keyslot(key))
        return self.cluster.node(node.host, int(node.port))

    async def transact(self, key: str, attempt: Callable[[Any], Awaitable[T]]) -> T:
        """:func:`~.transactions.watched` on the client that holds ``key`` (every key the
        attempt touches must share its slot)."""
        if self.cluster is None:
            return await watched(self.redis, attempt)  # type: ignore[arg-type]
        return await self._again(lambda client: watched(client, attempt), key)

    async def on_node_of(self, key: str, work: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
        """``work(client)`` on the client that holds ``key``, resent after a failover."""
        if self.cluster is None:
            return await work(self.redis)  # type: ignore[arg-type]
        return await self._again(work, key)

    async def per_shard(self, work: Sequence[tuple[Shard, Queue]]
                        ) -> list[list[Any]]:
        """For each ``(shard, queue)``, the answers of the commands ``queue(pipe)`` put on a
        pipeline of the shard's client, in order: one pipeline (one round trip) per master,
        all at once. ``queue`` may be called again (after a failover): it only queues.
        Errors raise (the first one)."""
        if not work:
            return []
        if self.cluster is None:
            async with self.redis.pipeline(transaction=False) as pipe:
                counts = [_queued(pipe, queue) for _, queue in work]
                return _split(await pipe.execute(), counts)
        for attempt in range(_ATTEMPTS):
            try:
                return await self._per_node(work)
            except TOPOLOGY_ERRORS:
                if attempt == _ATTEMPTS - 1:
                    raise
                await self._refresh_after_pause()
        raise AssertionError("unreachable")

    async def _per_node(self, work: Sequence[tuple[Shard, Queue]]
                        ) -> list[list[Any]]:
        by_client: dict[int, tuple[aioredis.Redis, list[int]]] = {}
        for i, (shard, _) in enumerate(work):
            client = await self.client_for(shard.prefix)
            by_client.setdefault(id(client), (client, []))[1].append(i)
        answers: list[list[Any]] = [[] for _ in work]

        async def one(client: aioredis.Redis, items: list[int]) -> None:
            async with client.pipeline(transaction=False) as pipe:
                counts = [_queued(pipe, work[i][1]) for i in items]
                for i, part in zip(items, _split(await pipe.execute(), counts), strict=True):
                    answers[i] = part

        await asyncio.gather(*(one(client, items) for client, items in by_client.values()))
        return answers

    async def _again(self, work: Callable[[aioredis.Redis], Awaitable[T]], key: str) -> T:
        for attempt in range(_ATTEMPTS):
            try:
                return await work(await self.client_for(key))
            except TOPOLOGY_ERRORS:
                if attempt == _ATTEMPTS - 1:
                    raise
                await self._refresh_after_pause()
        raise AssertionError("unreachable")

    async def _refresh_after_pause(self) -> None:
        """Wait a moment, then read the cluster's slots again (once for all the tasks that
        saw the same failure)."""
        assert self.cluster is not None
        await asyncio.sleep(_PAUSE)
        async with self._refreshing:
            if time.monotonic() - self._refreshed < _REFRESH_AT_MOST_EVERY:
                return
            try:
                await self.cluster.nodes_manager.initialize()
            except (RedisError, OSError, RedisClusterException):
                pass  # no node answers yet: the next attempt fails and says so
            finally:
                self._refreshed = time.monotonic()


def _queued(pipe: Any, queue: Queue) -> int:
    before = len(pipe)
    queue(pipe)
    return len(pipe) - before


def _split(answers: list[Any], counts: list[int]) -> list[list[Any]]:
    parts, start = [], 0
    for n in counts:
        parts.append(answers[start:start + n])
        start += n
    return parts
