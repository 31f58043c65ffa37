"""The scheduler a run executes on (:class:`Scheduler`: Dask's local ones, a process pool,
a ``distributed.Client``), and submitting a rewritten graph to a ``distributed.Client``.
docs/design/rewrite-and-policy.md, The rewrite.

On a cluster, two things differ from the local schedulers:

- Keys get a per-submission suffix. The scheduler reuses a key it still holds in memory
  (from the user's own futures or an earlier submission): our store wrapper would then
  never run, and a load task under a live key triggers "Detected different run_spec".
- The graph goes as a ``HighLevelGraph`` whose layers carry the annotations (``retries``,
  ``resources``, ``workers``...); a plain dict would lose them.

The workers are warmed by :mod:`client_lib.execution.warm` (docs/design/transport.md, Warming
the workers).
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Callable, Hashable, Mapping, Set
from typing import Any

import dask.config
from dask._task_spec import GraphNode
from dask.base import get_scheduler
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from ..execution.store import finish_here, flush_stores
from ..execution.tally import RunTally
from .materialize import Materialized
from .scheduler_hook import SchedulerHook, plain_dask

__all__ = ["Scheduler", "finish_on_workers", "submit", "submit_checked"]

logger = logging.getLogger("client_lib")

Key = Hashable
_OWN_ANNOTATIONS = frozenset({"cache", "cache_version", "cache_ttl"})


class Scheduler:
    """Where a run executes: ``schedule`` (what ``dask.compute`` would call), ``client``
    when that is a ``distributed.Client``'s, ``local`` for the threaded and synchronous
    schedulers (every task runs in this process)."""

    def __init__(self, scheduler: Any, collections: list) -> None:
        self.schedule = _get_scheduler(scheduler, collections)
        owner = getattr(self.schedule, "__self__", None)
        self.client = (owner if owner is not None and type(owner).__name__ == "Client"
                       and hasattr(owner, "scheduler") else None)
        import dask.local
        import dask.threaded

        self.local = self.schedule in (dask.threaded.get, dask.local.get_sync)

    def returns_futures(self, kwargs: dict[str, Any]) -> bool:
        """Whether the run returns futures (``sync=False`` on a cluster)."""
        return self.client is not None and kwargs.get("sync", True) is False

    def can_batch(self, kwargs: dict[str, Any]) -> bool:
        """Whether a run's stores may be queued (client_lib/execution/store_queue.py):
        every process that runs its tasks can be asked to wait for them before the run
        returns. Not so for worker processes of the multiprocessing scheduler, nor for
        futures (``sync=False``)."""
        return self.local or (self.client is not None and not self.returns_futures(kwargs))

    def run(self, graph: dict[Key, GraphNode], m: Materialized, kwargs: dict[str, Any],
            pinned: Set[Key] | None = None, loads: list[Key] | None = None) -> Any:
        """Run ``graph`` for the outputs of ``m`` (which also carries the annotations).
        ``pinned`` keys keep their names on a cluster; ``None``: a graph without cache
        tasks, every key keeps its name. When the run returns futures, it waits for the
        ``loads`` (a failed one raises here, not in a future)."""
        with plain_dask():  # the cache's own submission: never routed (client_lib.routing)
            if self.client is None:
                return self.schedule(graph, m.keys, **kwargs)
            if self.returns_futures(kwargs) and loads:
                return submit_checked(self.client, graph, m.keys, loads, kwargs, m, pinned)
            return submit(self.client, graph, m.keys, kwargs, m, keep_names=pinned)

    def wait_for_stores(self, run_id: str) -> RunTally | None:
        """Wait for the run's queued stores here, or on every worker of its cluster (whose
        tallies come back in the same call)."""
        if self.client is None:
            flush_stores(run_id)
            return None
        return finish_on_workers(self.client, run_id)


def _get_scheduler(scheduler: Any, collections: list) -> Callable:
    """``dask.base.get_scheduler``, without importing ``distributed`` when it cannot
    matter: a process that never imported it has no client (the import costs ~0.3 s).
    While the cache is enabled (``client_lib.routing``), the scheduler Dask would have
    chosen without the hook: the rewritten graph must not be routed again."""
    if "distributed" not in sys.modules and not dask.config.get("get", None):
        from dask.base import named_schedulers

        name = scheduler if scheduler is not None else dask.config.get("scheduler", None)
        if isinstance(name, str) and name.lower() in named_schedulers:
            return named_schedulers[name.lower()]
        if name is None:
            defaults = {c.__dask_scheduler__ for c in collections if c is not None}
            if len(defaults) == 1:
                return defaults.pop()
    schedule = get_scheduler(scheduler=scheduler, collections=collections)
    if isinstance(schedule, SchedulerHook):
        schedule = schedule.dask_choice(collections)
    return schedule


def _suffixed(key: Key, suffix: str) -> Key:
    if isinstance(key, tuple) and key and isinstance(key[0], str):
        return (f"{key[0]}-{suffix}", *key[1:])
    if isinstance(key, str):
        return f"{key}-{suffix}"
    return (f"{key!s}-{suffix}",)


def _rename(graph: Mapping[Key, GraphNode], suffix: str,
            keep: Set[Key] | None) -> tuple[dict, dict]:
    if keep is None:
        return dict(graph), {k: k for k in graph}
    names = {k: k if k in keep else _suffixed(k, suffix) for k in graph}
    renamed = {names[k]: node.substitute(names, key=names[k]) for k, node in graph.items()}
    return renamed, names


def _layers(graph: dict[Key, GraphNode], names: dict[Key, Key],
            source: Materialized | None) -> HighLevelGraph:
    """One layer per distinct set of annotations (layers annotate all their keys)."""
    groups: dict[str, tuple[dict[str, Any], dict[Key, GraphNode]]] = {}
    kinds = [n for n in (source.annotations if source else {}) if n not in _OWN_ANNOTATIONS]
    for key, new_key in names.items():
        annot: dict[str, Any] = {}
        if kinds:
            assert source is not None
            annot = {n: v for n in kinds if (v := source.annotation(n, key)) is not None}
        # Values may be unhashable (workers=[...]); group by their repr.
        groups.setdefault(repr(sorted(annot.items())), (annot, {}))[1][new_key] = graph[new_key]
    layers = {}
    for i, (annot, layer) in enumerate(groups.values()):
        layers[f"cached-compute-{i}"] = MaterializedLayer(layer, annotations=annot or None)
    return HighLevelGraph(layers, {name: set() for name in layers})


def submit(client: Any, graph: Mapping[Key, GraphNode], keys: list[Key],
           kwargs: dict[str, Any], source: Materialized | None = None,
           keep_names: Set[Key] | None = None) -> list:
    """Run ``graph`` on the cluster and return the results of ``keys`` in order.

    ``source`` provides the annotations of the keys. ``keep_names`` are keys that must not
    be renamed (P2P shuffle tasks, which the scheduler's shuffle plugin finds by name);
    ``None`` keeps every name, for graphs without cache tasks.
    """
    suffix = "rc" + uuid.uuid4().hex[:12]
    renamed, names = _rename(graph, suffix, keep_names)
    hlg = _layers(renamed, names, source)
    # Unknown keys (external futures) keep their names: they are data the cluster holds.
    return client.get(hlg, [names.get(k, k) for k in keys], **kwargs)


def submit_checked(client: Any, graph: Mapping[Key, GraphNode], keys: list[Key],
                   loads: list[Key], kwargs: dict[str, Any], source: Materialized,
                   keep_names: Set[Key] | None) -> list:
    """Like :func:`submit` with ``sync=False`` (futures of ``keys``), but returns only
    once the ``loads`` have finished: a load that failed cancels everything submitted and
    raises its :class:`~client_lib.core.errors.CacheEntryUnavailable`, so the caller can run
    the graph again without that entry (a future must never fail for the cache's sake).
    Loads are quick next to the computations, which go on in the background."""
    from distributed import wait

    from ..core.errors import CacheEntryUnavailable

    extra = [k for k in dict.fromkeys(loads) if k not in set(keys)]
    futures = submit(client, graph, [*keys, *extra], {**kwargs, "sync": False}, source,
                     keep_names)
    outputs, watched = futures[:len(keys)], futures[len(keys):]
    by_key = dict(zip([*keys, *extra], futures, strict=True))
    load_futures = [by_key[k] for k in loads]
    wait(load_futures)
    failed = next((f for f in load_futures if f.status == "error"
                   and isinstance(f.exception(), CacheEntryUnavailable)), None)
    if failed is not None:
        error = failed.exception()
        client.cancel(futures)
        raise error
    del watched  # loads that are not outputs: the scheduler keeps them while needed
    return outputs


def finish_on_workers(client: Any, run_id: str) -> RunTally:
    """Wait for the run's queued stores on every worker, then collect (and forget there)
    what its tasks did there, summed: one round trip to the workers."""
    tally = RunTally()
    try:
        per_worker = client.run(finish_here, run_id)
    except Exception as exc:  # a worker that left took its queue and its tally with it
        logger.warning("cached_compute: could not wait for the stores on every worker: %s",
                       exc)
        return tally
    for error, worker_tally in per_worker.values():
        if error:
            logger.warning("cached_compute: could not wait for a worker's stores: %s", error)
        tally.merge(worker_tally)
    return tally
