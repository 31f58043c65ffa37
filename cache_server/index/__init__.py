"""The Redis side of the server.

- :mod:`.redis_index`: :class:`~.redis_index.RedisIndex`, every key the server keeps in
  Redis (task hash -> manifest, counters, eviction order, events).
- :mod:`.transactions`: the WATCH/MULTI/EXEC retry loop the index's writes share.
- :mod:`.client`: async Redis clients that pack large commands with hiredis.
- :mod:`.eviction`: the eviction score and its time-free rank (pure functions).
- :mod:`.embedded`: the embedded default, a private ``redis-server`` under the data dir,
  run under :mod:`.guard`, which stops it when the server dies.

Nothing is imported here: ``python -m cache_server.index.guard`` runs beside every embedded
Redis and must stay cheap to start. Import from the modules.
"""

__all__: list[str] = []
