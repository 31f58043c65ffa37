"""Acknowledged means replicated: after a write, ``WAIT`` for replicas (:class:`Durability`).

A primary killed before any replica has a write loses it when a replica takes over (Sentinel
or Cluster failover). So the index confirms a store only once the primary has it and, when
the primary has replicas, once ``WAIT`` says ``min_replicas`` of them have it too.

``WAIT`` counts the writes made on the connection it is sent on, and a transaction's
connection goes back to the pool when it ends. So the wait writes once more, on a connection
of its own: it increments the shard's ``durable`` counter and waits in the same pipeline.
That covers every write the primary made before it (replication keeps the primary's order).

``min_replicas`` None (the default): wait for one replica when the primary has any (its
``ROLE``, read again every ``ROLE_SECONDS``, and at once when a wait falls short: after a
failover the new primary may have none), else not at all, so one Redis without replicas
pays nothing. A number: wait for that many (0: never wait). A wait that does not get its
replicas within ``timeout`` raises :class:`NotReplicated` (the API answers 503 with
``Retry-After``; the entry is on the primary, and the client's next try waits again).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Iterable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from cache_server.index.keyspace import Shard
from cache_server.index.topology import Topology

__all__ = ["ROLE_SECONDS", "Durability", "NotReplicated"]

#: How long a primary's count of replicas is trusted.
ROLE_SECONDS = 5.0


class NotReplicated(RedisError):
    """A write reached the primary but not enough replicas in time."""


class Durability:
    """Wait until writes of some shards are on ``min_replicas`` replicas (module docstring).
    Coroutine-safe."""

    def __init__(self, topology: Topology, min_replicas: int | None = None,
                 timeout: float = 1.0) -> None:
        if min_replicas is not None and min_replicas < 0:
            raise ValueError(f"min_replicas must be >= 0, not {min_replicas}")
        self.topology = topology
        self.min_replicas = min_replicas
        self.timeout_ms = max(1, int(timeout * 1000))
        self._replicas: dict[int, tuple[float, int]] = {}  # id(client) -> (read at, count)

    async def confirm(self, shards: Iterable[Shard]) -> None:
        """Return once everything written to ``shards`` so far is replicated as asked;
        :class:`NotReplicated` if it is not within the timeout."""
        if self.min_replicas == 0:
            return
        by_node: dict[int, Shard] = {}
        for shard in shards:
            client = await self.topology.client_for(shard.prefix)
            by_node.setdefault(id(client), shard)
        await asyncio.gather(*(self.topology.on_node_of(
            shard.prefix, functools.partial(self._confirm, shard=shard))
            for shard in by_node.values()))

    async def _confirm(self, client: aioredis.Redis, shard: Shard) -> None:
        wanted = await self._wanted(client, fresh=False)
        if not wanted:
            return
        async with client.pipeline(transaction=False) as pipe:
            pipe.incr(shard.durable)
            pipe.execute_command("WAIT", wanted, self.timeout_ms)
            _, acked = await pipe.execute()
        if int(acked) >= wanted:
            return
        if self.min_replicas is None and not await self._wanted(client, fresh=True):
            return  # the replicas are gone (this primary was promoted): nothing to wait for
        raise NotReplicated(f"the write reached the primary but {acked} of {wanted} "
                            f"replica(s) within {self.timeout_ms} ms")

    async def _wanted(self, client: aioredis.Redis, *, fresh: bool) -> int:
        if self.min_replicas is not None:
            return self.min_replicas
        read_at, count = self._replicas.get(id(client), (0.0, 0))
        if fresh or time.monotonic() - read_at > ROLE_SECONDS:
            role: Any = await client.execute_command("ROLE")
            count = len(role[2]) if role and role[0] == "master" else 0
            self._replicas[id(client)] = (time.monotonic(), count)
        return min(1, count)
