"""``cached_compute``: a drop-in for ``dask.compute`` that loads what the cache holds.

The steps (docs/architecture.md, What flows where): materialise, unfuse, hash, one batch
lookup, rewrite, run on the user's scheduler, finalise. A cache outage never fails the
computation: it warns once and computes without the cache.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Hashable, Set
from typing import Any

import dask.config
from dask._task_spec import GraphNode, Task
from dask.base import get_scheduler, unpack_collections

from .core.config import setting
from .core.errors import (
    CacheAccessDenied,
    CacheEntryUnavailable,
    CacheEntryUntrusted,
    CacheProtocolError,
    CacheServerLost,
    ResultCacheError,
)
from .core.notices import warn_once
from .core.signing import SigningKey, configured_key
from .execution.leases import lease_ttl, lease_wait, release_leases, take_leases
from .execution.specs import StoreRun
from .execution.tasks import (
    flush_stores,
    pop_counts,
    pop_decisions,
    pop_stored,
    server_lost,
)
from .hashing import GraphHashes, hash_graph
from .plan import annotations
from .plan.known import external_keys, has_known, known_hashes, remember
from .plan.materialize import Materialized, materialize, paused_gc, toposort, unfuse
from .plan.report import CacheReport, set_last_report
from .plan.rewrite import cacheable_keys, rewrite
from .plan.runs import RunReporter, reporting
from .plan.scheduler_hook import SchedulerHook, plain_dask
from .policy.modes import AutoPolicy, resolve_policy
from .transport.client import CacheClient
from .transport.direct import direct_read_mode

__all__ = ["cached_compute", "read_only", "refresh_requested", "resolve_cache", "run_cached",
           "task_hashes"]

logger = logging.getLogger("client_lib")
Key = Hashable


def resolve_cache(cache: Any = None) -> CacheClient | None:
    """A :class:`CacheClient` from a URL, a client, or config ``result-cache.url``."""
    if isinstance(cache, CacheClient):
        return cache
    token = setting("token")
    from_config = cache is None
    if from_config:
        cache = setting("url")
        if not cache:
            return None
    if not isinstance(cache, str):
        raise TypeError(f"cache must be a URL or a CacheClient, not {type(cache).__name__}")
    # A configured URL is re-read from each worker's own config (see CacheClient).
    return CacheClient.shared(cache, token, from_config=from_config)


def cached_compute(
    *args: Any,
    cache: str | CacheClient | None = None,
    policy: Any = None,
    namespace: str | None = None,
    scheduler: Any = None,
    explain: bool = False,
    traverse: bool = True,
    optimize_graph: bool = True,
    refresh: bool | None = None,
    **compute_kwargs: Any,
) -> tuple:
    """Compute dask collections like ``dask.compute``, loading cached results.

    Returns exactly what ``dask.compute(*args, ...)`` returns. ``cache`` is a URL or a
    :class:`CacheClient` (default: config ``result-cache.url``); ``policy`` says which
    results to store (``"auto"``, ``"all"``, ``"outputs"``, ``"none"`` or a callable,
    default config ``result-cache.policy``); ``namespace`` separates projects (default
    config ``result-cache.namespace``). ``refresh=True`` (default config
    ``result-cache.refresh``) recomputes everything it would have loaded and overwrites
    those entries. ``scheduler`` and ``compute_kwargs`` go to the scheduler as in
    ``dask.compute``; a ``distributed.Client`` (passed, or the default client) runs the
    loads and stores on its workers. ``explain=True`` prints what the cache did;
    :func:`client_lib.last_report` returns it.

    Config ``result-cache.mode = "read-only"`` loads but never stores. Tasks this run
    computes are leased on the server, so another run that needs one of them meanwhile
    waits for it and loads it instead of computing it too (docs/protocol.md, "Leases").
    """
    collections, repack = unpack_collections(*args, traverse=traverse)
    if not collections:
        return args
    results, _ = run_cached(collections, cache=cache, policy=policy, namespace=namespace,
                            scheduler=scheduler, explain=explain,
                            optimize_graph=optimize_graph, refresh=refresh,
                            compute_kwargs=compute_kwargs)
    return repack(results)


def run_cached(collections: list, *, cache: Any, policy: Any, namespace: str | None,
               scheduler: Any, explain: bool, optimize_graph: bool, refresh: bool | None,
               compute_kwargs: dict[str, Any], finalize: bool = True,
               ) -> tuple[list, Materialized]:
    """The steps of ``cached_compute`` for ``collections`` (already unpacked): the results
    of the materialised graph's output keys, in order, and that graph. ``finalize=False``
    keeps every output key of the collections (``persist``)."""
    namespace = _namespace(namespace)
    direct_read_mode()  # a bad value is the caller's error, not a worker's
    no_stores = read_only()
    refresh = refresh_requested(refresh) and not no_stores
    store_policy = resolve_policy("none" if no_stores else policy)
    try:
        client = resolve_cache(cache)
        bad_url = None
    except ValueError as exc:  # a malformed URL is a cache problem: warn and compute
        client, bad_url = None, str(exc)
    schedule = _get_scheduler(scheduler, collections)
    cluster = _distributed_client(schedule)
    if cluster is not None and client is not None:
        from .execution.warm import warm_workers

        warm_workers(cluster, client)  # in the background, once per client and cache
    report = CacheReport(cache_url=client.url if client else None, namespace=namespace)
    set_last_report(report)
    clock = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        report.seconds[phase] = report.seconds.get(phase, 0.0) + now - clock
        clock = now

    with paused_gc():
        m = materialize(collections, optimize_graph, finalize=finalize)
    lap("materialize")
    if client is None:
        report.fallback = bad_url or "no cache configured (set result-cache.url or pass cache=)"
        warn_once(f"cached_compute: {report.fallback}; computing without the cache",
                  key=f"cached_compute: {bad_url or 'no cache'}", user_warning=True)
        _computed_without_cache(report, unfuse(m).graph)
        return _run(schedule, m.graph, m, compute_kwargs), m

    fused = m
    with paused_gc():
        m, order, hashes = _hash(fused, namespace, client.signing_key)
        cacheable = cacheable_keys(m, hashes)
        if optimize_graph and _annotated(collections):
            _restore_annotations(m, hashes, collections, namespace, client.signing_key,
                                 finalize)
    # Only the outputs' digests are used from here on (futures remember them): the rest
    # would stay alive through the run (~90 bytes per task; BENCHMARKS.md, section 14).
    hashes.digests = {k: d for k in m.keys if (d := hashes.digests.get(k)) is not None}
    report.tasks = len(order)
    report.cacheable = len(cacheable)
    report.volatile = len(hashes.volatile)
    report.volatile_reasons = Counter(_root_reasons(hashes.volatile))
    lap("hash")

    try:
        hits = client.lookup(set(cacheable.values()))  # not kept: only the lookup needs it
    except ResultCacheError as exc:
        problem = ("refused access" if isinstance(exc, CacheAccessDenied) else
                   "answered outside the protocol" if isinstance(exc, CacheProtocolError)
                   else "unreachable")
        report.fallback = f"cache server {problem} ({exc})"
        warn_once(f"cached_compute: {report.fallback}; computing without the cache",
                  key=f"cached_compute: {client.url}", user_warning=True)
        _computed_without_cache(report, m.graph)
        return _run(schedule, fused.graph, fused, compute_kwargs), fused
    lap("lookup")

    run = StoreRun(client, store_policy, uuid.uuid4().hex, lease_ttl=lease_ttl(),
                   lease_wait=lease_wait(), batch=_can_flush(schedule, compute_kwargs))
    overwrite = hits if refresh else frozenset()
    distrusted: set[str] = set()
    untrusted: set[str] = set()
    leased: set[str] = set()
    tallies = None  # what the workers of a cluster counted, decided and stored
    reporter = RunReporter(client, run.run_id, m.graph, order, hashes, hits,
                           _is_local(schedule)) if reporting() else None
    try:
        for attempt in range(3):
            usable = hits - distrusted if attempt < 2 and not refresh else set()
            if attempt == 2:
                report.fallback = "entries kept failing to load; computed without loads"
            with paused_gc():
                rewritten = rewrite(m, order, hashes, cacheable, usable, run, overwrite)
            # Tasks, like ``cacheable`` (equal tasks, e.g. chunks of ``da.ones``, share a
            # hash); under refresh, those found, although they are recomputed.
            report.hits = sum(h in hits and h not in distrusted for h in cacheable.values())
            report.loaded = rewritten.loaded
            report.culled = rewritten.culled
            report.computed = rewritten.computed
            report.loaded_keys = rewritten.loaded_keys
            report.computed_keys = rewritten.computed_keys
            report.store_candidates = rewritten.wrapped
            report.chain_links = rewritten.chained
            lap("rewrite")
            leased |= take_leases(run, rewritten.specs.values(), hits)
            report.leased = sum(s.lease == "held" for s in rewritten.specs.values())
            report.waited = sum(s.lease == "wait" for s in rewritten.specs.values())
            lap("lease")
            try:
                progress = (reporter.plan(report, len(rewritten.graph)) if reporter
                            else contextlib.nullcontext())
                with progress:
                    results = _run(schedule, rewritten.graph, m, compute_kwargs,
                                   hashes.pinned, rewritten.loaded_keys)
            except CacheEntryUntrusted as exc:
                # Someone who can write to the cache replaced it; whatever else this run
                # would load is checked now (headers only), not one retry per entry.
                loads = {hashes.hashes[k] for k in rewritten.loaded_keys if k in hashes.hashes}
                found = {exc.task_hash} | client.untrusted_among(loads - {exc.task_hash})
                untrusted |= found
                distrusted |= found
                report.untrusted = len(untrusted)
                report.retried.extend(sorted(found))
                warn_once(f"cached_compute: {len(found)} cached result(s) in {client.url} "
                          "have no valid signature for result-cache.signing-key (written by "
                          "someone without the key): not loaded (nothing was unpickled), "
                          "recomputed; counted as untrusted in the run report and the "
                          "server's stats", key=f"untrusted: {client.url}", user_warning=True)
                continue
            except CacheServerLost as exc:
                # One failure is enough: no loads, no stores, no retries against a server
                # that went away during the run; everything computes once more.
                report.fallback = f"cache server lost during the run ({exc.reason})"
                warn_once(f"cached_compute: {report.fallback}; computing the rest of the run "
                          "without the cache", key=f"server lost: {client.url}",
                          user_warning=True)
                _computed_without_cache(report, m.graph)
                results = _run(schedule, fused.graph, fused, compute_kwargs)
                lap("run")
                return results, fused
            except CacheEntryUnavailable as exc:
                logger.warning("cached_compute: %s; recomputing without it", exc)
                distrusted.add(exc.task_hash)
                report.retried.append(exc.task_hash)
                continue
            finally:
                lap("run")
            break
    except BaseException:
        if run.batch:  # what it stored counts in the report below
            _flush_stores(schedule, run.run_id)
        release_leases(run, leased)  # the tasks that never ran must not keep them
        if reporter is not None and not server_lost(run.run_id):
            reporter.finish(report, pop_stored(run.run_id), "failed")
        raise
    finally:
        if run.batch:  # never return before the run's stores are durable (or failed)
            tallies = _flush_stores(schedule, run.run_id)  # (at once if the except did)
            lap("store")
    owner = _distributed_client(schedule)
    if owner is not None and compute_kwargs.get("sync", True) is False:
        for key, future in zip(m.keys, results, strict=True):
            digest = hashes.digests.get(key)
            if digest is not None and key in hashes.hashes:
                remember(owner, future.key, digest)
    counts, stored = pop_counts(run.run_id), pop_stored(run.run_id)
    report.store_decisions = pop_decisions(run.run_id)
    if not _is_local(schedule) and owner is not None and compute_kwargs.get("sync", True):
        # The workers stored: they told when their stores were waited for (one call)
        # rather than print "stored ?".
        from .plan.schedulers import finish_on_workers

        counts, decisions, on_workers = tallies or finish_on_workers(owner, run.run_id)
        report.store_decisions += decisions
        stored = on_workers if reporter is not None else stored
    if _is_local(schedule) or counts:
        report.stored = int(counts.get("stored", 0))
        report.stored_bytes = int(counts.get("stored-bytes", 0))
        report.over_budget = int(counts.get("over-budget", 0))
        report.waited_loaded = int(counts.get("waited-loaded", 0))
        if isinstance(store_policy, AutoPolicy) and "compute-seconds" in counts:
            report.store_budget = (counts["store-seconds"],
                                   counts["compute-seconds"] * store_policy.budget)
    lost = server_lost(run.run_id)
    if lost is not None and report.fallback is None:
        report.fallback = f"cache server failed during the run, later stores skipped ({lost})"
    report.loaded += report.waited_loaded
    report.computed -= report.waited_loaded
    if reporter is not None and lost is None:
        reporter.finish(report, stored)
    lap("report")
    logger.info("%s", report)
    if explain:
        print(report)
    return results, m


def task_hashes(*args: Any, namespace: str | None = None, traverse: bool = True,
                optimize_graph: bool = True) -> dict[Key, str | None]:
    """The task hash of every task ``cached_compute(*args)`` would consider, by Dask key
    (``None`` for volatile tasks), keyed by this process's ``result-cache.signing-key``
    when it has one. Talks to no server; for debugging misses."""
    collections, _ = unpack_collections(*args, traverse=traverse)
    if not collections:
        return {}
    _, order, hashes = _hash(materialize(collections, optimize_graph), _namespace(namespace),
                             configured_key())
    return {k: hashes.hashes.get(k) for k in order}


def _namespace(namespace: str | None) -> str:
    if namespace is None:
        namespace = setting("namespace")
    if not isinstance(namespace, str):
        raise TypeError(f"namespace must be a string, not {type(namespace).__name__}")
    return namespace


def _hash(fused: Materialized, namespace: str, signing_key: SigningKey | None
          ) -> tuple[Materialized, list[Key], GraphHashes]:
    """Unfuse, order and hash a materialised graph (hashes keyed by ``signing_key``)."""
    m = unfuse(fused)
    order = toposort(m.graph, m.keys)
    # Futures the cache made (CachedClient, persist) count by their tasks' digests.
    known = known_hashes(external_keys(m.graph)) if has_known() else None
    return m, order, hash_graph(m.graph, order, namespace, m, signing_key, known)


def _annotated(collections: list) -> bool:
    """Whether any layer of the collections' graphs carries annotations (cheap: layers,
    not keys). Dataframes are expressions, whose graph only optimising makes: skipped."""
    for collection in collections:
        if type(collection).__module__.startswith("dask.dataframe"):
            continue
        graph = collection.__dask_graph__() if hasattr(collection, "__dask_graph__") else None
        if any(getattr(layer, "annotations", None)
               for layer in getattr(graph, "layers", {}).values()):
            return True
    return False


def _restore_annotations(m: Materialized, hashes: GraphHashes, collections: list,
                         namespace: str, signing_key: SigningKey | None,
                         finalize: bool) -> None:
    """Put back the scheduling annotations Dask's optimisation dropped
    (:mod:`client_lib.plan.annotations`): hashes the unoptimised graph too, only then."""
    if annotations.has_scheduling(m):
        return  # Dask kept them
    plain = materialize(collections, optimize_graph=False, finalize=finalize)
    if annotations.has_scheduling(plain):
        plain, _, plain_hashes = _hash(plain, namespace, signing_key)
        annotations.restore(m, hashes.hashes, plain, plain_hashes.hashes)


def read_only() -> bool:
    """Whether config ``result-cache.mode`` says to load but never store."""
    mode = setting("mode")
    if mode not in ("read-write", "read-only"):
        raise ValueError(f"result-cache.mode must be 'read-write' or 'read-only', not {mode!r}")
    return mode == "read-only"


def refresh_requested(refresh: bool | None) -> bool:
    """``refresh``, or config ``result-cache.refresh`` when it is ``None``."""
    if refresh is None:
        refresh = setting("refresh")
    if not isinstance(refresh, bool):
        raise TypeError(f"refresh must be True or False, not {refresh!r}")
    return refresh


def _computed_without_cache(report: CacheReport, graph: dict[Key, GraphNode]) -> None:
    """The counts of a run that bypassed the cache: every task of ``graph`` (unfused)
    computed, nothing loaded, culled or stored."""
    report.tasks = report.tasks or len(graph)
    report.computed_keys = [k for k, node in graph.items() if isinstance(node, Task)]
    report.computed = len(report.computed_keys)
    report.hits = report.loaded = report.culled = report.store_candidates = 0
    report.loaded_keys = []
    report.stored = 0


def _root_reasons(volatile: dict[Key, str]) -> list[str]:
    return [r for r in volatile.values() if r != "depends on a volatile task"] or list(
        volatile.values())


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


def _distributed_client(schedule: Callable) -> Any:
    owner = getattr(schedule, "__self__", None)
    if owner is not None and type(owner).__name__ == "Client" and hasattr(owner, "scheduler"):
        return owner
    return None


def _can_flush(schedule: Callable, kwargs: dict[str, Any]) -> bool:
    """Whether this run's stores may be queued (client_lib/execution/store_queue.py): every process
    that runs its tasks can be asked to wait for them before the run returns. Not so for
    worker processes of the multiprocessing scheduler, nor for futures (``sync=False``)."""
    if _is_local(schedule):
        return True
    return _distributed_client(schedule) is not None and kwargs.get("sync", True) is not False


def _flush_stores(schedule: Callable, run_id: str
                  ) -> tuple[dict[str, float], list[str], set[str]] | None:
    """Wait for the run's queued stores here, or on every worker of its cluster; the
    workers hand over their tallies in the same call (``distributed.finish_on_workers``)."""
    client = _distributed_client(schedule)
    if client is None:
        flush_stores(run_id)
        return None
    from .plan.schedulers import finish_on_workers

    return finish_on_workers(client, run_id)


def _is_local(schedule: Callable) -> bool:
    import dask.local
    import dask.threaded

    return schedule in (dask.threaded.get, dask.local.get_sync)


def _run(schedule: Callable, graph: dict[Key, GraphNode], m: Materialized,
         kwargs: dict[str, Any], pinned: Set[Key] | None = None,
         loads: list[Key] | None = None) -> Any:
    """Run ``graph`` for the outputs of ``m`` (which also carries the annotations).
    ``pinned`` keys keep their names on a cluster; ``None``: a graph without cache tasks,
    every key keeps its name. When the run returns futures (``sync=False`` on a
    cluster), it waits for the ``loads`` (a failed one raises here, not in a future)."""
    client = _distributed_client(schedule)
    with plain_dask():  # the cache's own submission: never routed (client_lib.routing)
        if client is not None:
            from .plan.schedulers import submit, submit_checked

            if kwargs.get("sync", True) is False and loads:
                return submit_checked(client, graph, m.keys, loads, kwargs, m, pinned)
            return submit(client, graph, m.keys, kwargs, m, keep_names=pinned)
        return schedule(graph, m.keys, **kwargs)

