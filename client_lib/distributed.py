"""Submitting a rewritten graph to a ``distributed.Client``. docs/architecture.md, The rewrite.

Two things differ from the local schedulers:

- Keys get a per-submission suffix. The scheduler reuses a key it still holds in memory
  (from the user's own futures or an earlier submission): our store wrapper would then
  never run, and a load task under a live key triggers "Detected different run_spec".
- The graph goes as a ``HighLevelGraph`` whose layers carry the annotations (``retries``,
  ``resources``, ``workers``...); a plain dict would lose them.

And the workers are warmed (:class:`WarmLoads`, docs/architecture.md, Warming the workers):
the first ``cached_compute`` with a client registers a worker plugin that prepares every
worker, present or joining later, for loads while the user's process hashes and looks up.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
import weakref
from collections.abc import Hashable, Mapping, Set
from typing import Any

import xxhash
from dask._task_spec import GraphNode
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
from distributed.diagnostics.plugin import WorkerPlugin

from .graph import Materialized
from .transport import CacheClient

__all__ = ["WARMED", "WarmLoads", "finish_on_workers", "submit", "submit_checked",
           "warm_workers"]

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
    from .tasks import flush_stores, pop_counts, pop_decisions, pop_stored

    try:
        flush_stores(run_id)
        error = None
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    return error, pop_counts(run_id), pop_decisions(run_id), pop_stored(run_id)


# -- warming the workers (docs/architecture.md, Warming the workers) --------------------

#: In a worker: cache URL -> seconds its warm-up took, or the error that stopped it.
WARMED: dict[str, float | str] = {}
# In the user's process: the plugin names registered with each client (weak: a closed,
# dropped client takes its entry with it).
_registered: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
_registered_lock = threading.Lock()


class WarmLoads(WorkerPlugin):
    """Prepares a worker for loading from ``cache``: unpickling the plugin imports
    ``client_lib``; ``setup`` then builds the worker's shared :class:`CacheClient` (the
    same one its tasks will unpickle) and opens a connection, in a thread of its own so
    the worker's event loop and tasks never wait for it. Failures are logged, never
    raised: a cold worker still loads, only later."""

    idempotent = True  # registering it again with the scheduler changes nothing

    def __init__(self, cache: CacheClient) -> None:
        self.cache = cache
        self.name = plugin_name(cache)

    def setup(self, worker: Any = None) -> None:
        threading.Thread(target=_warm, args=(self.cache,), name="result-cache-warm",
                         daemon=True).start()


def plugin_name(cache: CacheClient) -> str:
    """One plugin per cache a cluster talks to (URL and token; the token only hashed)."""
    identity = repr((cache.url, cache.token, cache.from_config)).encode()
    return f"result-cache-warm-{xxhash.xxh64_hexdigest(identity)}"


def _warm(cache: CacheClient) -> None:
    start = time.perf_counter()
    try:
        cache.warm()
    except Exception as exc:  # the first load connects (or fails) as it would have
        WARMED[cache.url] = f"{type(exc).__name__}: {exc}"
        logger.warning("result cache: could not warm this worker for %s (%s); its first "
                       "load connects instead", cache.url, exc)
        return
    WARMED[cache.url] = time.perf_counter() - start


def warm_workers(client: Any, cache: CacheClient) -> None:
    """Register :class:`WarmLoads` for ``cache`` with ``client``'s cluster, once per client
    and cache (later calls cost a dictionary lookup). The registration goes in the
    background: the caller goes on materialising and hashing meanwhile, and a failure is
    logged, never raised."""
    if getattr(client, "asynchronous", False):
        return  # its calls are coroutines; nothing here awaits them
    name = plugin_name(cache)
    with _registered_lock:
        names = _registered.setdefault(client, set())
        if name in names:
            return
        names.add(name)
    threading.Thread(target=_register, args=(client, WarmLoads(cache)),
                     name="result-cache-warm-register", daemon=True).start()


def _register(client: Any, plugin: WarmLoads) -> None:
    try:
        client.register_plugin(plugin)
    except Exception as exc:  # e.g. the client closed meanwhile; its workers warm on use
        with _registered_lock:  # a later run tries again
            _registered.get(client, set()).discard(plugin.name)
        logger.warning("result cache: could not register the warm-up plugin %s: %s",
                       plugin.name, exc)
