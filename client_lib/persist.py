"""``cached_persist``: ``dask.persist`` whose cached parts come from the cache.

The cross-session form of "persist the shared upstream": one session persists ``step_2``
while it works on ``step_3a``; another, days later, persists the same ``step_2`` and gets
it from the cache. On a ``distributed.Client`` the persisted collections hold futures
(cached parts are loaded on the workers, the others computed and stored there, in the
background, as ``Client.persist`` does); on the local schedulers they hold the values in
memory, as ``dask.persist`` does. Either way a later computation on a persisted collection
hashes as one on the collection it persisted: futures by the digests the run remembers
(:mod:`client_lib.plan.known`), values as :class:`~client_lib.hashing.graph.HashedData`.
"""

from __future__ import annotations

from typing import Any

from dask._task_spec import GraphNode, TaskRef
from dask.base import is_dask_collection
from dask.core import flatten

from .hashing.graph import HashedData
from .plan.run import Run
from .plan.schedulers import Scheduler
from .plan.settings import RunSettings
from .transport.client import CacheClient

__all__ = ["cached_persist"]


def cached_persist(
    *args: Any,
    cache: str | CacheClient | None = None,
    policy: Any = None,
    namespace: str | None = None,
    scheduler: Any = None,
    explain: bool = False,
    optimize_graph: bool = True,
    refresh: bool | None = None,
    **compute_kwargs: Any,
) -> tuple:
    """Persist dask collections like ``dask.persist``, loading cached parts.

    Returns what ``dask.persist(*args)`` returns (non-collections pass through). The
    keyword arguments are those of :func:`~client_lib.cached_compute`; on a
    ``distributed`` client the run does not wait for the results (``Client.persist``).
    """
    positions = [i for i, a in enumerate(args) if is_dask_collection(a)]
    if not positions:
        return args
    collections = [args[i] for i in positions]
    if Scheduler(scheduler, collections).client is not None:
        compute_kwargs.setdefault("sync", False)
    run = Run(collections, RunSettings.read(cache, policy, namespace, refresh), scheduler,
              compute_kwargs=compute_kwargs, optimize_graph=optimize_graph, finalize=False,
              explain=explain)
    results = run.compute()
    m = run.graph
    by_key = dict(zip(m.keys, results, strict=True))
    # Values in memory (a local scheduler) hash as the tasks that made them, so a later
    # computation on the persisted collections hits what one on the originals stored.
    digests = run.hashed.hashes.digests if run.hashed is not None else {}
    for key, value in by_key.items():
        digest = digests.get(key)
        if digest is not None and not isinstance(value, GraphNode | TaskRef):
            by_key[key] = HashedData(key, value, digest)
    out = list(args)
    for i, collection, keys in zip(positions, collections, m.nested_keys, strict=True):
        rebuild, extra = collection.__dask_postpersist__()
        out[i] = rebuild({k: by_key[k] for k in flatten(keys)}, *extra)
    return tuple(out)
