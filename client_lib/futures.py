"""``CachedClient``: the futures interface of ``distributed.Client`` through the cache.

``submit`` and ``map`` hash each call like a task of ``cached_compute`` (the function's
fingerprint and its arguments, through the same hasher): a ``Future`` argument counts by
the hash of the cached call that produced it, any other ``Future`` makes the call
volatile (it runs as a plain call). One lookup per ``submit``/``map``; a hit becomes a
load task under the call's own key, a miss runs the function and stores its result from
the worker. Either way the caller gets an ordinary ``distributed.Future``: cached and
plain futures mix freely, and every option (``key``, ``pure``, ``retries``,
``resources``, ``workers``, ``priority``...) means what it means to ``Client.submit``.

A load task keeps the call's ``Future`` arguments as dependencies, so a load that fails
(entry evicted or corrupt since the lookup) runs the function instead: a cache failure
never fails the future. ``compute`` and ``persist`` go through :func:`cached_compute` and
:func:`~client_lib.persist.cached_persist`; everything else is the wrapped client's.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import uuid
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

import dask.config
from dask._task_spec import Task, parse_input
from dask.base import tokenize
from dask.utils import funcname

from .compute import cached_compute
from .core.config import setting
from .core.errors import ResultCacheError
from .core.notices import warn_once
from .execution.leases import lease_ttl, lease_wait, take_leases
from .execution.specs import StoreRun, StoreSpec
from .execution.tasks import load_result, run_and_store
from .hashing import GraphHashes, hash_graph
from .persist import cached_persist
from .plan.known import external_keys, known_hashes, remember
from .plan.report import CacheReport
from .plan.run import look_up
from .plan.runs import RunReporter, post_recipes, recording_recipes, reporting
from .plan.scheduler_hook import plain_dask
from .plan.settings import read_only, refresh_requested, resolve_cache
from .policy.expiry import default_ttl, parse_ttl
from .policy.modes import resolve_policy
from .transport.client import CacheClient
from .transport.signatures import why_no_stores

__all__ = ["CachedClient", "CallSpec", "cached_call"]

Key = Hashable

#: ``Client.submit`` options that are the client's, not the function's.
_SUBMIT_OPTIONS = ("workers", "resources", "retries", "priority", "fifo_timeout",
                   "allow_other_workers")


@dataclass(frozen=True)
class CallSpec:
    """What the worker needs to run one cached call: load it (``hit``) or run and store."""

    store: StoreSpec
    hit: bool
    digest: bytes  # the task's Merkle digest (client_lib.plan.known)


def cached_call(spec: CallSpec | None, func: Callable, kwargs: dict | None, *args: Any) -> Any:
    """Run on the worker: load a hit (running the function instead if the entry cannot be
    loaded), or run the function and offer its result to the policy."""
    if spec is None:  # a plain call (held key, volatile, cache unreachable)
        return func(*args, **kwargs) if kwargs else func(*args)
    if spec.hit:
        store = spec.store
        try:
            return load_result(store.run.cache, store.task_hash, store.label,
                               store.run.run_id)
        except ResultCacheError:  # gone or corrupt since the lookup: compute it again
            pass
    return run_and_store(spec.store, func, kwargs, *args)


class CachedClient:
    """Wraps a ``distributed.Client``; cached ``submit``, ``map``, ``compute``, ``persist``.

    ``cache``, ``policy`` and ``namespace`` are those of :func:`cached_compute` (default:
    the ``result-cache`` config). ``report`` counts what the cached calls did so far.
    Attributes and methods not defined here are the wrapped client's. Thread safe like
    the wrapped client.
    """

    def __init__(self, client: Any = None, *, cache: str | CacheClient | None = None,
                 policy: Any = None, namespace: str | None = None) -> None:
        if client is None:
            from distributed import default_client

            client = default_client()
        self.client = client
        self.cache = resolve_cache(cache)
        self.policy = resolve_policy(policy)
        self.namespace = namespace or setting("namespace")
        self.report = CacheReport(cache_url=self.cache.url if self.cache else None,
                                  namespace=self.namespace)
        self._run = (StoreRun(self.cache, self.policy, uuid.uuid4().hex,
                              lease_ttl=lease_ttl(), lease_wait=lease_wait())
                     if self.cache is not None else None)
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def __repr__(self) -> str:
        return f"CachedClient({self.client!r}, cache={self.cache!r})"

    def __enter__(self) -> CachedClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.client.close()

    # -- futures -------------------------------------------------------------------------

    @plain_dask()  # the wrapped client's submit is the cache's own here (client_lib.routing)
    def submit(self, func: Callable, *args: Any, key: Key | None = None,
               pure: bool = True, actor: bool = False, actors: bool = False,
               **kwargs: Any) -> Any:
        """``Client.submit`` through the cache; returns a ``distributed.Future``."""
        options = {k: kwargs.pop(k) for k in _SUBMIT_OPTIONS if k in kwargs}
        if actor or actors or not callable(func) or self._run is None:
            return self.client.submit(func, *args, key=key, pure=pure, actor=actor,
                                      actors=actors, **options, **kwargs)
        if key is None:
            key = (f"{funcname(func)}-{tokenize(func, kwargs, *args)}" if pure
                   else f"{funcname(func)}-{uuid.uuid4()}")
        if key in self.client.futures:  # the scheduler holds it: Client.submit's answer
            return self.client.submit(func, *args, key=key, **options, **kwargs)
        (spec,), reporter = self._plan({key: _call_task(key, func, args, kwargs)}, [key])
        if spec is None:
            future = self.client.submit(func, *args, key=key, **options, **kwargs)
        else:
            future = self.client.submit(cached_call, spec, func, kwargs or None, *args,
                                        key=key, **options)
            remember(self.client, key, spec.digest)
        _report_when_done(reporter, [future])
        return future

    @plain_dask()
    def map(self, func: Callable, *iterables: Iterable, key: str | list | None = None,
            pure: bool = True, batch_size: int | None = None, actor: bool = False,
            actors: bool = False, **kwargs: Any) -> list:
        """``Client.map`` through the cache (one lookup for all calls); a list of futures."""
        options = {k: kwargs.pop(k) for k in _SUBMIT_OPTIONS if k in kwargs}
        if actor or actors or not callable(func) or self._run is None:
            return self.client.map(func, *iterables, key=key, pure=pure, actor=actor,
                                   actors=actors, batch_size=batch_size, **options, **kwargs)
        calls = list(zip(*(list(it) for it in iterables), strict=False))  # as Client.map
        keys = _map_keys(func, calls, kwargs, key, pure)
        tasks = {k: _call_task(k, func, a, kwargs) for k, a in zip(keys, calls, strict=True)}
        specs, reporter = self._plan(tasks, keys)
        n = len(calls)
        futures = self.client.map(cached_call, specs, [func] * n, [kwargs or None] * n,
                                  *(list(col) for col in zip(*calls, strict=True))
                                  if calls else (), key=keys, batch_size=batch_size,
                                  **options)
        for key, spec in zip(keys, specs, strict=True):
            if spec is not None:
                remember(self.client, key, spec.digest)
        _report_when_done(reporter, futures)
        return futures

    def gather(self, futures: Any, *args: Any, **kwargs: Any) -> Any:
        """``Client.gather``: cached futures are ordinary futures."""
        return self.client.gather(futures, *args, **kwargs)

    # -- collections ---------------------------------------------------------------------

    def compute(self, collections: Any, sync: bool = False, optimize_graph: bool = True,
                traverse: bool = True, **kwargs: Any) -> Any:
        """``Client.compute`` through the cache: futures (or values with ``sync=True``) of
        the collections, their cached parts loaded on the workers."""
        singleton = not isinstance(collections, list | tuple | set | frozenset)
        items = [collections] if singleton else list(collections)
        results = cached_compute(*items, cache=self.cache, policy=self.policy,
                                 namespace=self.namespace, scheduler=self.client,
                                 optimize_graph=optimize_graph, traverse=traverse,
                                 sync=sync, **kwargs)
        return results[0] if singleton else list(results)

    def persist(self, collections: Any, optimize_graph: bool = True, **kwargs: Any) -> Any:
        """``Client.persist`` through the cache: collections backed by futures whose
        cached parts are loaded on the workers and whose other parts are computed there
        (and stored)."""
        singleton = not isinstance(collections, list | tuple | set | frozenset)
        items = [collections] if singleton else list(collections)
        persisted = cached_persist(*items, cache=self.cache, policy=self.policy,
                                   namespace=self.namespace, scheduler=self.client,
                                   optimize_graph=optimize_graph, **kwargs)
        return persisted[0] if singleton else list(persisted)

    # -- internals -----------------------------------------------------------------------

    def _plan(self, tasks: dict[Key, Task], keys: list[Key]
              ) -> tuple[list[CallSpec | None], _CallRun | None]:
        """Hash the calls, look them up in one request; a spec per key (``None``: run it
        as a plain call, because it is volatile or the cache is unreachable), and the
        call's run report to finish once its futures are done (docs/protocol.md, "Runs":
        each ``submit`` or ``map`` is a run, with a run id of its own)."""
        assert self._run is not None
        run = dataclasses.replace(self._run, run_id=uuid.uuid4().hex)
        annotations = _Annotations(dask.get_annotations())
        hashes = _hash_calls(tasks, keys, self.namespace, annotations,
                             run.cache.signing_key)
        self._count(hashes, len(keys))
        wanted = {h for h in hashes.hashes.values()}
        hits, problem = look_up(run.cache, wanted) if wanted else (set(), None)
        if problem is not None:
            warn_once(f"CachedClient: {problem}; running calls without the cache",
                      key=f"CachedClient: {run.cache.url}", user_warning=True)
            return [None] * len(keys), None
        specs: list[CallSpec | None] = []
        held = self.client.futures  # the scheduler keeps these keys' tasks: no lookup
        ttl = annotations.annotation("cache_ttl", None)
        ttl = default_ttl() if ttl is None else parse_ttl(ttl)
        why = why_no_stores(run.cache.signing_key)
        no_stores = read_only() or why is not None
        refresh = refresh_requested(None)
        for key in keys:
            task_hash = hashes.hashes.get(key)
            hit = task_hash in hits and not (refresh and not no_stores)
            if task_hash is None or key in held or (no_stores and not hit):
                specs.append(None)
                continue
            store = StoreSpec(run, task_hash, hashes.labels.get(key, ""), True, (), ttl,
                              overwrite=task_hash in hits and not hit,
                              cost_key=hashes.cost_keys.get(key, ""))
            specs.append(CallSpec(store, hit, hashes.digests[key]))
        computed = [s.store for s in specs if s is not None and not s.hit]
        take_leases(run, computed, hits)
        recipes: Callable[[], None] | None = None
        if computed and recording_recipes():  # sent once the calls are done (and stored)
            recipes = functools.partial(post_recipes, run.cache, tasks, keys, keys, hashes,
                                        self.namespace, annotations,
                                        {s.task_hash for s in computed})
        loaded = sum(s is not None and s.hit for s in specs)
        with self._lock:
            self.report.hits += loaded
            self.report.loaded += loaded
            self.report.computed += len(keys) - loaded
            self.report.store_candidates += len(computed)
            self.report.waited += sum(s.lease == "wait" for s in computed)
        if not reporting():
            return specs, (_CallRun(None, None, len(keys), recipes) if recipes else None)
        report = CacheReport(cache_url=run.cache.url, namespace=self.namespace,
                             tasks=len(keys), cacheable=len(hashes.hashes), hits=loaded,
                             loaded=loaded, computed=len(keys) - loaded,
                             store_candidates=len(computed), volatile=len(hashes.volatile),
                             not_storing=why)
        report.loaded_keys = [k for k, s in zip(keys, specs, strict=True) if s and s.hit]
        report.computed_keys = [k for k, s in zip(keys, specs, strict=True)
                                if not (s and s.hit)]
        reporter = RunReporter(run.cache, run.run_id, tasks, keys, hashes, hits, local=False)
        reporter.plan(report, len(keys))
        return specs, _CallRun(reporter, report, len(keys), recipes)

    def _count(self, hashes: GraphHashes, n: int) -> None:
        with self._lock:
            self.report.tasks += n
            self.report.cacheable += len(hashes.hashes)
            self.report.volatile += len(hashes.volatile)
            self.report.volatile_reasons.update(hashes.volatile.values())


class _CallRun:
    """The run report of one ``submit`` or ``map``: finished once all its futures are
    (``failed`` if one of them errs or is cancelled); the workers' stores are not counted."""

    def __init__(self, reporter: RunReporter | None, report: CacheReport | None, n: int,
                 recipes: Callable[[], None] | None = None) -> None:
        self.reporter, self.report, self.recipes = reporter, report, recipes
        self.left, self.failed = n, False
        self._lock = threading.Lock()

    def done(self, future: Any) -> None:
        with self._lock:
            self.left -= 1
            self.failed |= future.status != "finished"
            last = self.left == 0
        if last:
            self.finish("failed" if self.failed else "done")

    def finish(self, status: str = "done") -> None:
        if self.reporter is not None:
            self.reporter.finish(self.report, frozenset(), status)
        if self.recipes is not None:
            self.recipes()


def _report_when_done(call: _CallRun | None, futures: list) -> None:
    if call is None:
        return
    if not futures:
        call.finish()
    for future in futures:
        future.add_done_callback(call.done)


class _Annotations:
    """The ``dask.annotate`` context of a ``submit``: the same for every call."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def annotation(self, name: str, key: Key, default: Any = None) -> Any:
        return self.values.get(name, default)


def _hash_calls(tasks: dict[Key, Task], keys: list[Key], namespace: str,
                annotations: _Annotations, signing_key: Any = None) -> GraphHashes:
    """Hash calls as ``cached_compute`` hashes tasks; a future argument counts by the
    hash of the cached call that made it (any other future makes its call volatile)."""
    result = hash_graph(tasks, keys, namespace, annotations, signing_key=signing_key,
                        known=known_hashes(external_keys(tasks)))
    for key in result.pinned:
        if result.hashes.pop(key, None) is not None:
            result.volatile[key] = "has side effects on the workers"
    return result


def _call_task(key: Key, func: Callable, args: Iterable, kwargs: dict) -> Task:
    """The call as ``Client.submit`` builds it (futures become aliases of their keys)."""
    return Task(key, func, *(parse_input(a) for a in args),
                **{k: parse_input(v) for k, v in kwargs.items()})


def _map_keys(func: Callable, calls: list[tuple], kwargs: dict, key: str | list | None,
              pure: bool) -> list[Key]:
    """The keys ``Client.map`` would give these calls."""
    if isinstance(key, list):
        if len(key) != len(calls):
            raise ValueError(f"map: {len(key)} keys for {len(calls)} calls")
        return key
    prefix = key or funcname(func)
    if pure:
        token = tokenize(func, kwargs)
        return [f"{prefix}-{tokenize(token, args)}" for args in calls]
    uid = str(uuid.uuid4())
    return [f"{prefix}-{uid}-{i}" for i in range(len(calls))]
