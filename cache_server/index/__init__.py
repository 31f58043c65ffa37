"""The Redis side of the server.

- :mod:`.redis_index`: :class:`~.redis_index.RedisIndex`, the entries: task hash ->
  manifest, with the access and eviction order, pins, hit counts, byte totals, expiries;
  its reads in :mod:`.queries`.
- :mod:`.telemetry`: the counters and the events stream; lookups counted per replica and
  flushed to Redis in one pipeline.
- :mod:`.transactions`: the WATCH/MULTI/EXEC retry loop the index's writes share.
- :mod:`.client`: async clients of one Redis, a Sentinel's primary or a Redis Cluster (the
  ``RESULT_CACHE_REDIS_URL`` schemes), packing large commands with hiredis.
- :mod:`.keyspace`: where keys live (one prefix, or 16 shards over a Cluster's masters);
  :mod:`.topology`: which client holds them, transactions per shard, lookups per master;
  :mod:`.durability`: a store acknowledged once replicas have it (``WAIT``).
- :mod:`.eviction`: the eviction score and its time-free rank (pure functions).
- :mod:`.embedded`: the embedded default, a private ``redis-server`` under the data dir,
  run under :mod:`.guard`, which stops it when the server dies.

Nothing is imported here: ``python -m cache_server.index.guard`` runs beside every embedded
Redis and must stay cheap to start. Import from the modules.
"""

__all__: list[str] = []
