"""Submitting a rewritten graph to a ``distributed.Client``. docs/architecture.md, The rewrite.

Two things differ from the local schedulers:

- Keys get a per-submission suffix. The scheduler reuses a key it still holds in memory
  (from the user's own futures or an earlier submission): our store wrapper would then
  never run, and a load task under a live key triggers "Detected different run_spec".
- The graph goes as a ``HighLevelGraph`` whose layers carry the annotations (``retries``,
  ``resources``, ``workers``...); a plain dict would lose them.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Mapping, Set
from typing import Any

from dask._task_spec import GraphNode
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from .graph import Materialized

__all__ = ["submit", "submit_checked", "worker_counts", "worker_stored"]

Key = Hashable
_OWN_ANNOTATIONS = frozenset({"cache", "cache_version", "cache_ttl"})


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
    raises its :class:`~client_lib.errors.CacheEntryUnavailable`, so the caller can run
    the graph again without that entry (a future must never fail for the cache's sake).
    Loads are quick next to the computations, which go on in the background."""
    from distributed import wait

    from .errors import CacheEntryUnavailable

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


def worker_stored(client: Any, run_id: str) -> set[str]:
    """The hashes the tasks of ``run_id`` stored on every worker (and forget them there)."""
    from .tasks import pop_stored

    try:
        per_worker = client.run(pop_stored, run_id)
    except Exception:  # a worker that left takes its list with it: fewer tasks show stored
        return set()
    return set().union(*per_worker.values())


def worker_counts(client: Any, run_id: str) -> dict[str, int]:
    """What the tasks of ``run_id`` counted on every worker (and forget it there)."""
    from .tasks import pop_counts

    total: dict[str, int] = {}
    try:
        per_worker = client.run(pop_counts, run_id)
    except Exception:  # a worker that left takes its counts with it: the report says less
        return total
    for counts in per_worker.values():
        for what, n in counts.items():
            total[what] = total.get(what, 0) + n
    return total


def worker_decisions(client: Any, run_id: str) -> list[str]:
    """Why each large result of ``run_id`` was or was not stored, from every worker."""
    from .tasks import pop_decisions

    try:
        per_worker = client.run(pop_decisions, run_id)
    except Exception:  # a worker that left takes its reasons with it
        return []
    return [line for lines in per_worker.values() for line in lines]
