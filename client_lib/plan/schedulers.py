"""Submitting a rewritten graph to a ``distributed.Client``. docs/architecture.md, The rewrite.

Two things differ from the local schedulers:

- Keys get a per-submission suffix. The scheduler reuses a key it still holds in memory
  (from the user's own futures or an earlier submission): our store wrapper would then
  never run, and a load task under a live key triggers "Detected different run_spec".
- The graph goes as a ``HighLevelGraph`` whose layers carry the annotations (``retries``,
  ``resources``, ``workers``...); a plain dict would lose them.

The workers are warmed by :mod:`client_lib.execution.warm` (docs/architecture.md, Warming
the workers).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Hashable, Mapping, Set
from typing import Any

from dask._task_spec import GraphNode
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from .materialize import Materialized

__all__ = ["finish_on_workers", "submit", "submit_checked"]

logger = logging.getLogger("client_lib")

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


def finish_on_workers(client: Any, run_id: str) -> tuple[dict[str, float], list[str], set[str]]:
    """Wait for the run's queued stores on every worker, then collect (and forget there)
    what its tasks counted, why large results were or were not stored, and the hashes
    they stored: one round trip to the workers, not one per question."""
    counts: dict[str, float] = {}
    decisions: list[str] = []
    stored: set[str] = set()
    try:
        per_worker = client.run(_finish_here, run_id)
    except Exception as exc:  # a worker that left took its queue and its tallies with it
        logger.warning("cached_compute: could not wait for the stores on every worker: %s",
                       exc)
        return counts, decisions, stored
    for error, worker_counts, lines, hashes in per_worker.values():
        if error:
            logger.warning("cached_compute: could not wait for a worker's stores: %s", error)
        for what, n in worker_counts.items():
            counts[what] = counts.get(what, 0) + n
        decisions += lines
        stored |= hashes
    return counts, decisions, stored


def _finish_here(run_id: str) -> tuple[str | None, dict[str, float], list[str], set[str]]:
    """On a worker: :func:`finish_on_workers`' part (a failed wait still hands over the
    tallies)."""
    from ..execution.tasks import flush_stores, pop_counts, pop_decisions, pop_stored

    try:
        flush_stores(run_id)
        error = None
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    return error, pop_counts(run_id), pop_decisions(run_id), pop_stored(run_id)
