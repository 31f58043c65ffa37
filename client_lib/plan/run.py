"""One ``cached_compute`` (or ``cached_persist``) call as one object, read top to bottom:
:meth:`Run.plan` (materialise, hash, one batch lookup), :meth:`Run.execute` (rewrite,
lease, run; again without the entries that failed to load), :meth:`Run.finish` (wait for
the stores, count, report). docs/architecture.md, What flows where.

A cache failure never fails the computation. When the cache cannot help (none configured,
the lookup failed, the server went away during the run) the run computes without it, by
one path (:meth:`Run.without_cache`), and says why in its report. The run's state is on
the object: its report, its tally (client_lib/execution/tally.py), its leases.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import time
import uuid
from collections import Counter
from collections.abc import Hashable
from typing import Any

from dask._task_spec import Task

from ..core.errors import (
    CacheAccessDenied,
    CacheEntryUnavailable,
    CacheEntryUntrusted,
    CacheProtocolError,
    CacheServerLost,
    ResultCacheError,
)
from ..core.notices import warn_once
from ..execution.leases import lease_ttl, lease_wait, release_leases, take_leases
from ..execution.specs import StoreRun
from ..execution.tally import TALLIES, RunTally
from ..policy.modes import AutoPolicy
from ..transport.direct import direct_read_mode
from ..transport.interface import Transport
from ..transport.staging import direct_write_mode
from .hashed import Hashed, hash_materialized, restore_annotations
from .known import remember
from .materialize import Materialized, frozen_gc, materialize, paused_gc, unfuse
from .report import CacheReport, set_last_report
from .rewrite import Rewritten, rewrite
from .runs import (
    RunReporter,
    RunWhyTarget,
    post_recipes,
    recording_recipes,
    reporting,
    task_states,
)
from .schedulers import Scheduler
from .settings import RunSettings

__all__ = ["Run", "look_up"]

logger = logging.getLogger("client_lib")
Key = Hashable
_ATTEMPTS = 3  # the last one without loads


def look_up(cache: Transport, hashes: set[str]) -> tuple[set[str], str | None]:
    """The hashes the cache holds, or (nothing, why the cache could not be asked)."""
    try:
        return cache.lookup(hashes), None
    except ResultCacheError as exc:
        problem = ("refused access" if isinstance(exc, CacheAccessDenied) else
                   "answered outside the protocol" if isinstance(exc, CacheProtocolError)
                   else "unreachable")
        return set(), f"cache server {problem} ({exc})"


class Run:
    """One run of ``collections`` (already unpacked) on ``scheduler``. :meth:`compute`
    returns the results of the output keys of :attr:`graph`, in order. ``finalize=False``
    keeps every output key of the collections (``persist``)."""

    def __init__(self, collections: list, settings: RunSettings, scheduler: Any, *,
                 compute_kwargs: dict[str, Any], optimize_graph: bool = True,
                 finalize: bool = True, explain: bool = False) -> None:
        direct_read_mode()  # a bad value is the caller's error, not a worker's
        direct_write_mode()
        if compute_kwargs.get("get") is not None:  # dask.compute refuses it: scheduler=
            from dask.base import get_err_msg

            raise TypeError(get_err_msg)
        self.collections = collections
        self.settings = settings
        self.scheduler = Scheduler(scheduler, collections)
        self.kwargs = compute_kwargs
        self.optimize_graph, self.finalize, self.explain = optimize_graph, finalize, explain
        cache = settings.cache
        if self.scheduler.client is not None and cache is not None:
            from ..execution.warm import warm_workers

            warm_workers(self.scheduler.client, cache)  # in the background, once
        self.report = CacheReport(cache_url=cache.url if cache else None,
                                  namespace=settings.namespace,
                                  not_storing=settings.no_stores_reason)
        set_last_report(self.report)
        self.run_id = uuid.uuid4().hex
        self.tally: RunTally = TALLIES.of(self.run_id)  # what its tasks do in this process
        self.fused: Materialized | None = None
        self.hashed: Hashed | None = None
        self.hits: set[str] = set()
        self.leased: set[str] = set()
        self._fallback_key: str | None = None  # set: the run goes without the cache
        self._clock = time.perf_counter()

    @property
    def graph(self) -> Materialized:
        """The graph whose output keys :meth:`compute` returns the results of."""
        assert self.fused is not None
        if self.hashed is None or self._fallback_key is not None:
            return self.fused
        return self.hashed.m

    def compute(self) -> list:
        """Plan, execute, finish; or, when the cache cannot help, compute without it."""
        self.plan()
        if self._fallback_key is None:
            results = self.execute()
            if self._fallback_key is None:
                return self.finish(results)
        return self.without_cache()

    # -- the steps ----------------------------------------------------------------------

    def plan(self) -> None:
        """Materialise the graph as ``dask.compute`` would, unfuse and hash it, look up
        its cacheable tasks in one request."""
        with paused_gc():
            self.fused = materialize(self.collections, self.optimize_graph,
                                     finalize=self.finalize)
        self._lap("materialize")
        cache = self.settings.cache
        if cache is None:
            self._go_without_cache(self.settings.problem or "no cache",
                                   f"cached_compute: {self.settings.problem}")
            return
        key, namespace = cache.signing_key, self.settings.namespace
        with paused_gc():
            self.hashed = hashed = hash_materialized(self.fused, namespace, key)
            self.cacheable = hashed.cacheable()
            restore_annotations(hashed, self.collections, namespace, key,
                                self.optimize_graph, self.finalize)
        hashes = hashed.hashes
        # Only the outputs' digests are used from here on (futures remember them): the rest
        # would stay alive through the run (~90 bytes per task; BENCHMARKS.md, section 14).
        hashes.digests = {k: d for k in hashed.m.keys
                          if (d := hashes.digests.get(k)) is not None}
        report = self.report
        report.tasks = len(hashed.order)
        report.cacheable = len(self.cacheable)
        report.volatile = len(hashes.volatile)
        report.volatile_reasons = Counter(_root_reasons(hashes.volatile))
        self._lap("hash")
        self.hits, problem = look_up(cache, set(self.cacheable.values()))
        if problem is not None:
            self._go_without_cache(problem, f"cached_compute: {cache.url}")
            return
        self._lap("lookup")

    def execute(self) -> list | None:
        """Rewrite and run the graph: hits load, their upstream is culled, the rest
        computes (leased, and stored as the policy says). An entry that fails to load is
        not trusted again and the graph runs once more (the third time without loads); a
        server lost during the run sends it :meth:`without_cache` (then ``None``)."""
        assert self.hashed is not None and self.settings.cache is not None
        self.store_run = StoreRun(self.settings.cache, self.settings.policy, self.run_id,
                                  lease_ttl=lease_ttl(), lease_wait=lease_wait(),
                                  batch=self.scheduler.can_batch(self.kwargs))
        self.reporter = (RunReporter(self.settings.cache, self.run_id, self.hashed.m.graph,
                                     self.hashed.order, self.hashed.hashes, self.hits,
                                     self.scheduler.local) if reporting() else None)
        self._workers: RunTally | None = None  # what a cluster's workers counted
        try:
            return self._attempts()
        except BaseException:
            if self.store_run.batch:  # what it stored counts in the report below
                self.scheduler.wait_for_stores(self.run_id)
            release_leases(self.store_run, self.leased)  # the tasks that never ran
            if self.reporter is not None and self.tally.lost is None:
                self.reporter.finish(self.report, TALLIES.take(self.run_id).stored_hashes,
                                     "failed")
            raise
        finally:
            if self.store_run.batch:  # never return before the stores are durable (or failed)
                self._workers = self.scheduler.wait_for_stores(self.run_id)
                self._lap("store wait")

    def finish(self, results: list) -> list:
        """Count what the run did (here, or on its cluster's workers), remember the
        futures it returns, post its summary; print the report with ``explain``."""
        report, hashed = self.report, self.hashed
        assert hashed is not None
        client = self.scheduler.client
        if self.scheduler.returns_futures(self.kwargs):
            for key, future in zip(hashed.m.keys, results, strict=True):
                digest = hashed.hashes.digests.get(key)
                if digest is not None and key in hashed.hashes.hashes:
                    remember(client, future.key, digest)
        tally = TALLIES.take(self.run_id)  # (taken already if a worker shares the process)
        report.store_decisions = list(tally.decisions)
        stored = tally.stored_hashes
        if client is not None and not self.scheduler.local and self.kwargs.get("sync", True):
            # The workers stored: they told what in the call that waited for their stores.
            workers = self._workers or RunTally()
            report.store_decisions += workers.decisions
            tally = workers
            stored = workers.stored_hashes if self.reporter is not None else stored
        if self.scheduler.local or not tally.empty:
            report.stored = tally.stored
            report.stored_bytes = tally.stored_bytes
            report.over_budget = tally.over_budget
            report.waited_loaded = tally.waited_loaded
            report.dropped, report.unconfirmed = tally.dropped, tally.unconfirmed
            report.store_seconds, report.buffer_peak = tally.store_seconds, tally.buffer_peak
            report.functions = tally.functions
            budget = tally.budget
            policy = self.settings.policy
            if isinstance(policy, AutoPolicy) and (budget.read_bytes or budget.admitted_bytes):
                report.run_bytes = (budget.admitted_bytes, int(
                    budget.read_bytes * policy.max_run_bytes + policy.min_run_bytes))
        lost = self.tally.lost
        if lost is not None and report.fallback is None:
            report.fallback = f"cache server failed during the run, later stores skipped ({lost})"
        report.loaded += report.waited_loaded
        report.computed -= report.waited_loaded
        if self.reporter is not None and lost is None:
            self.reporter.finish(report, stored)
        if lost is None and recording_recipes() and self.settings.cache is not None:
            target = None
            if self.reporter is not None:  # the run's page shows why
                target = RunWhyTarget(self.run_id, functools.partial(
                    task_states, hashed.m.graph, hashed.order, hashed.hashes, self.hits,
                    report.loaded_keys, report.computed_keys, frozenset(stored)))
            post_recipes(self.settings.cache, hashed.m.graph, hashed.order, hashed.m.keys,
                         hashed.hashes, self.settings.namespace, hashed.m,
                         {h for h in hashed.cacheable().values() if h not in self.hits},
                         target, stored=frozenset(stored) if self.scheduler.local else None)
        self._lap("report")
        logger.info("%s", report)
        if self.explain:
            print(report)
        return results

    def without_cache(self) -> list:
        """The one fallback: the graph as Dask made it, every task computed, nothing
        loaded or stored; the report counts the unfused tasks as computed."""
        report, fused = self.report, self.fused
        assert fused is not None
        graph = self.hashed.m.graph if self.hashed is not None else unfuse(fused).graph
        report.tasks = report.tasks or len(graph)
        report.computed_keys = [k for k, node in graph.items() if isinstance(node, Task)]
        report.computed = len(report.computed_keys)
        report.hits = report.loaded = report.culled = report.store_candidates = 0
        report.loaded_keys = []
        report.stored = 0
        TALLIES.take(self.run_id)
        results = self.scheduler.run(fused.graph, fused, self.kwargs)
        self._lap("run")
        return results

    # -- inside execute -----------------------------------------------------------------

    def _attempts(self) -> list | None:
        assert self.hashed is not None and self.settings.cache is not None
        cache, report, hashed = self.settings.cache, self.report, self.hashed
        refresh = self.settings.refresh
        overwrite = self.hits if refresh else frozenset()
        distrusted: set[str] = set()
        untrusted: set[str] = set()
        for attempt in range(_ATTEMPTS):
            usable = self.hits - distrusted if attempt < _ATTEMPTS - 1 and not refresh else set()
            if attempt == _ATTEMPTS - 1:
                report.fallback = "entries kept failing to load; computed without loads"
            with paused_gc():
                rewritten = rewrite(hashed.m, hashed.order, hashed.hashes, self.cacheable,
                                    usable, self.store_run, overwrite)
            self._count_rewrite(rewritten, distrusted)
            self._lap("rewrite")
            self.leased |= take_leases(self.store_run, rewritten.specs.values(), self.hits)
            report.leased = sum(s.lease == "held" for s in rewritten.specs.values())
            report.waited = sum(s.lease == "wait" for s in rewritten.specs.values())
            self._lap("lease")
            try:
                progress = (self.reporter.plan(report, len(rewritten.graph)) if self.reporter
                            else contextlib.nullcontext())
                with progress, frozen_gc():
                    return self.scheduler.run(rewritten.graph, hashed.m, self.kwargs,
                                              hashed.hashes.pinned, rewritten.loaded_keys)
            except CacheEntryUntrusted as exc:
                # Someone who can write to the cache replaced it; whatever else this run
                # would load is checked now (headers only), not one retry per entry.
                loads = {hashed.hashes.hashes[k] for k in rewritten.loaded_keys
                         if k in hashed.hashes.hashes}
                found = {exc.task_hash} | cache.untrusted_among(loads - {exc.task_hash})
                untrusted |= found
                distrusted |= found
                report.untrusted = len(untrusted)
                report.retried.extend(sorted(found))
                warn_once(f"cached_compute: {len(found)} cached result(s) in {cache.url} "
                          "have no valid signature for result-cache.signing-key (or "
                          "trusted-keys; written by someone without the key): not loaded "
                          "(nothing was unpickled), "
                          "recomputed; counted as untrusted in the run report and the "
                          "server's stats", key=f"untrusted: {cache.url}", user_warning=True,
                          stacklevel=_outside_this_module() + 1)
            except CacheServerLost as exc:
                # One failure is enough: no loads, no stores, no retries against a server
                # that went away during the run; everything computes once more.
                self._go_without_cache(f"cache server lost during the run ({exc.reason})",
                                       f"server lost: {cache.url}", during=True)
                return None
            except CacheEntryUnavailable as exc:
                logger.warning("cached_compute: %s; recomputing without it", exc)
                distrusted.add(exc.task_hash)
                report.retried.append(exc.task_hash)
            finally:
                self._lap("run")
        raise AssertionError("unreachable: the last attempt has no loads to fail")

    def _count_rewrite(self, rewritten: Rewritten, distrusted: set[str]) -> None:
        report = self.report
        # Tasks, like ``cacheable`` (equal tasks, e.g. chunks of ``da.ones``, share a hash);
        # under refresh, those found, although they are recomputed.
        report.hits = sum(h in self.hits and h not in distrusted
                          for h in self.cacheable.values())
        report.loaded = rewritten.loaded
        report.culled = rewritten.culled
        report.computed = rewritten.computed
        report.loaded_keys = rewritten.loaded_keys
        report.computed_keys = rewritten.computed_keys
        report.store_candidates = rewritten.wrapped
        report.unwrapped = rewritten.unwrapped

    def _go_without_cache(self, reason: str, warning_key: str, during: bool = False) -> None:
        """Decide to compute without the cache (:meth:`without_cache` does it), warning
        once per problem."""
        self.report.fallback = reason
        self._fallback_key = warning_key
        rest = "the rest of the run " if during else ""
        warn_once(f"cached_compute: {reason}; computing {rest}without the cache",
                  key=warning_key, user_warning=True, stacklevel=_outside_this_module() + 1)

    def _lap(self, phase: str) -> None:
        now = time.perf_counter()
        seconds = self.report.seconds
        seconds[phase] = seconds.get(phase, 0.0) + now - self._clock
        self._clock = now


def _root_reasons(volatile: dict[Key, str]) -> list[str]:
    return [r for r in volatile.values() if r != "depends on a volatile task"] or list(
        volatile.values())


def _outside_this_module() -> int:
    """How many frames up from the caller the first one outside this module is (the entry
    point the run serves: the user's warning points at it, as before the run object)."""
    frame, level = sys._getframe(2), 1
    while frame is not None and frame.f_code.co_filename == __file__:
        frame, level = frame.f_back, level + 1
    return level
