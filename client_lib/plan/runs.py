"""Run summaries for the server (docs/protocol.md, "Runs"): what one ``cached_compute`` did
with each task, for the dashboard's runs list, run page and coloured graph.

Posted when the run starts (its plan: loaded, culled, computed, volatile), as it progresses
on a local scheduler (tasks finished, once a second at most, from a thread of its own) and
when it ends (stored tasks known). Best effort: a server that refuses (a read token) or
fails loses the summary, never the computation; config ``result-cache.report-runs: false``
turns it off.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import getpass
import json
import logging
import queue
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Mapping, Set
from dataclasses import dataclass
from typing import Any

from dask._task_spec import GraphNode, Task
from dask.callbacks import Callback

from ..core.config import setting
from ..core.errors import ResultCacheError
from ..core.notices import warn_once
from ..hashing import GraphHashes
from ..hashing.recipes import recipe_records, slot_records
from ..transport.interface import Transport
from ..wire.bounds import MAX_RUN_BYTES, MAX_RUN_TASKS
from .explain import explain_states, previous_of
from .report import CacheReport

__all__ = ["Progress", "RunReporter", "flush_posts", "post_run", "reporting",
           "run_summary", "task_list", "task_states"]

logger = logging.getLogger("client_lib")
Key = Hashable
_MAX_DEPS = 64
_EXIT_SECONDS = 2.0
_PLAN_AFTER = 0.5  # seconds a run goes on before its plan is posted
_STORE_LABELS = 256  # functions a summary lists what they stored (the server's bound)


def reporting() -> bool:
    """Whether runs are reported (config ``result-cache.report-runs``)."""
    return bool(setting("report-runs"))


def task_states(graph: Mapping[Key, GraphNode], order: list[Key], hashes: GraphHashes,
                hits: Set[str], loaded: Collection[Key], computed: Collection[Key],
                stored: Set[str]) -> dict[Key, tuple[str, str | None]]:
    """What the run does with each task of the (unfused) graph, in ``order``: loaded,
    culled, computed, stored, volatile (with its reason) or hit (found, computed anyway).
    ``stored``: the hashes this run stored (empty while it runs)."""
    loaded, computed = set(loaded), set(computed)
    states: dict[Key, tuple[str, str | None]] = {}
    for key in order:
        if not isinstance(graph.get(key), Task):
            continue
        task_hash = hashes.hashes.get(key)
        if key in loaded:
            states[key] = ("loaded", None)
        elif key not in computed:
            states[key] = ("culled", None)
        elif key in hashes.volatile:
            states[key] = ("volatile", hashes.volatile[key])
        elif task_hash in stored:
            states[key] = ("stored", None)
        elif task_hash in hits:
            states[key] = ("hit", None)
        else:
            states[key] = ("computed", None)
    return states


def run_summary(report: CacheReport, run_id: str, started: float, status: str, *,
                states: dict[Key, tuple[str, str | None]] | None = None,
                graph: Mapping[Key, GraphNode] | None = None, scheduled: int = 0,
                done: int = 0, labels: Mapping[Key, str] | None = None,
                ended: float | None = None) -> dict[str, Any]:
    """The JSON body of ``POST /v1/runs``; with ``states``, the task list (or, past
    :data:`MAX_RUN_TASKS` tasks or half of :data:`MAX_RUN_BYTES`, the counts by label).
    ``ended``: when the run ended (default now; the poster thread builds bodies after the
    run returned)."""
    body: dict[str, Any] = {
        "run_id": run_id, "namespace": report.namespace, "host": _host(),
        "user": _user(), "started": started, "status": status, "tasks": report.tasks,
        "scheduled": scheduled, "done": done, "hits": report.hits, "loaded": report.loaded,
        "culled": report.culled, "computed": report.computed, "stored": report.stored,
        "volatile": report.volatile, "untrusted": report.untrusted,
        "fallback": report.fallback,
    }
    if status != "running":
        body["duration"] = max((time.time() if ended is None else ended) - started, 0.0)
        if report.functions:  # what each function stored or skipped, and why
            body["store_outcomes"] = {label[:1024]: outcomes for label, outcomes in
                                      list(report.functions.items())[:_STORE_LABELS]}
            body["store_seconds"] = min(report.store_seconds, 1e8)
            body["store_wait"] = min(report.seconds.get("store wait", 0.0), 1e8)
    if states is None:
        return body
    labels = labels or {}
    if len(states) <= MAX_RUN_TASKS:
        tasks = task_list(states, graph or {}, labels, compact=True)
        # Long keys and reasons can make even 5000 tasks more than the server keeps.
        if len(json.dumps(tasks, separators=(",", ":"))) <= MAX_RUN_BYTES // 2:
            body["task_list"] = tasks
            return body
    by_label: dict[str, Counter] = {}
    for key, (state, _) in states.items():
        by_label.setdefault(labels.get(key) or _name(key), Counter())[state] += 1
    body["by_label"] = {label: dict(c) for label, c in list(by_label.items())[:MAX_RUN_TASKS]}
    return body


def task_list(states: dict[Key, tuple[str, str | None]], graph: Mapping[Key, GraphNode],
              labels: Mapping[Key, str], *, compact: bool = False) -> list[dict[str, Any]]:
    """``states`` as the list of a run summary: key, label, state, reason and the positions
    of the task's dependencies. ``compact``: without a ``reason`` or ``deps`` that is empty
    (the protocol's defaults: a lighter post)."""
    position = {key: i for i, key in enumerate(states)}
    tasks = []
    for key, (state, reason) in states.items():
        node = graph.get(key)
        task: dict[str, Any] = {"key": str(key)[:1024],
                                "label": (labels.get(key) or _name(key))[:1024], "state": state}
        if reason or not compact:
            task["reason"] = reason and reason[:1024]
        dependencies = node.dependencies if node is not None else ()
        deps = [position[d] for d in dependencies if d in position][:_MAX_DEPS] \
            if dependencies else []
        if deps or not compact:
            task["deps"] = deps
        tasks.append(task)
    return tasks


def post_run(cache: Transport,
             body: dict[str, Any] | Callable[[], dict[str, Any]] | Recipes) -> None:
    """Send a run summary (or what ``body()`` makes of it, on the way) from this process's
    poster thread, in order: the run never waits on the server for it; what is still
    queued when Python exits gets up to ``_EXIT_SECONDS`` to go. Never raises (a summary
    that fails is lost, the run goes on)."""
    global _poster
    with _poster_lock:
        if _poster is None or not _poster.is_alive():
            _poster = threading.Thread(target=_post_queued, daemon=True,
                                       name="result-cache-runs")
            _poster.start()
    _queue.put((cache, body))


@dataclass
class Recipes:
    """Recipes of a run's computed tasks, made and sent by the poster thread
    (``POST /v1/recipes``): ``make`` returns them."""

    make: Callable[[], list[dict[str, Any]]]


#: CPU seconds the poster thread spent making recipes, in all (bench/recipe_cost.py).
RECIPE_SECONDS = [0.0]


def recording_recipes() -> bool:
    """Whether runs record recipes (config ``result-cache.recipes``)."""
    return bool(setting("recipes"))


def post_recipes(cache: Transport, graph: Mapping[Key, GraphNode], order: list[Key],
                 outputs: list[Key], hashes: GraphHashes, namespace: str, annotations: Any,
                 computed: set[str], run: RunWhyTarget | None = None,
                 stored: Set[str] | None = None) -> None:
    """Send the recipes of the tasks with the ``computed`` hashes (the server keeps those
    of the entries it holds) and, with ``run``, first why those tasks were recomputed
    against the recipes recorded before (for the run's page). Made by the poster thread
    once the run has returned, off its path: the code, globals and files as they are
    then, normally a fraction of a second after the hashes (a program that changes a
    global or an input file in that window gets a recipe that explains its next miss
    wrongly, never a wrong result). Never raises: a recipe is an explanation.

    ``stored``: the hashes the run stored, when it knows them (None: any computed one
    may be held). Recipes are made only for those and, for ``run``, for the tasks whose
    slot has a record to compare with (the rest need only their slot to be explained as
    new): a recipe costs ~20 µs of the client's CPU per task, and the server drops those
    of entries it does not hold (a 10k-task run storing one output made 10k)."""
    if not computed:
        return

    def make() -> list[dict[str, Any]]:
        start = time.thread_time()
        try:
            slotted = slot_records(graph, order, outputs, hashes, namespace, computed)
            wanted = set(computed) if stored is None else set(stored) & computed
            previous: tuple[dict[str, dict[str, Any]], set[str]] | None = None
            if run is not None and slotted:
                try:
                    previous = previous_of(cache, slotted)
                except ResultCacheError:
                    previous = None  # the recipes go on: why is an extra
                else:
                    wanted |= {r["hash"] for r in slotted.values() if r["slot"] in previous[0]}
            made = recipe_records(graph, order, outputs, hashes, namespace, annotations,
                                  only=wanted, signing_key=cache.signing_key, slotted=slotted)
            if run is not None and previous is not None:
                # Keys without a record need only their slot; a wanted one whose recipe
                # could not be made stays out ("no recipe could be made").
                current = {k: r for k, r in slotted.items() if r["hash"] not in wanted}
                _post_why(cache, run, graph, hashes, {**current, **made}, previous)
            return [r for r in made.values() if stored is None or r["hash"] in stored]
        finally:
            RECIPE_SECONDS[0] += time.thread_time() - start

    post_run(cache, Recipes(make))


@dataclass
class RunWhyTarget:
    """The run whose page shows why its tasks were recomputed: its id and its task
    states (made when asked: the order of the run's task list)."""

    run_id: str
    states: Callable[[], dict[Key, tuple[str, str | None]]]


def _post_why(cache: Transport, run: RunWhyTarget, graph: Mapping[Key, GraphNode],
              hashes: GraphHashes, made: dict[Key, dict[str, Any]],
              previous: tuple[dict[str, dict[str, Any]], set[str]]) -> None:
    states = run.states()
    found = explain_states(graph, states, hashes, made, *previous)
    reasons = {i: r.reason[:1024] for i, r in enumerate(found.records)
               if r.status == "compute"} if len(states) <= MAX_RUN_TASKS else {}
    groups = [[cause[:1024], n] for cause, n in found.groups().most_common(100)]
    cache.post_run_why(run.run_id, {"reasons": reasons, "groups": groups})


def flush_posts(timeout: float = _EXIT_SECONDS) -> bool:
    """Wait until the queued summaries are sent (or ``timeout``); True if none is left."""
    deadline = time.monotonic() + timeout
    while _queue.unfinished_tasks and time.monotonic() < deadline:
        time.sleep(0.01)
    return not _queue.unfinished_tasks


def _post_queued() -> None:
    while True:
        cache, body = _queue.get()
        try:
            if isinstance(body, Recipes):
                cache.record_recipes(body.make())
            else:
                cache.post_run(body() if callable(body) else body)
        except Exception as exc:  # the poster must outlive anything a body could cause
            # Lost, never silently: one warning per server (then INFO records).
            problem = str(exc) if isinstance(exc, ResultCacheError) else (
                f"{type(exc).__name__}: {exc}")
            what, option = (("recipes", "recipes") if isinstance(body, Recipes)
                            else ("a run summary", "report-runs"))
            warn_once(f"result cache: {what} not recorded by {cache.url} "
                      f"({problem}); the runs are not affected (config "
                      f"result-cache.{option}: false stops sending them)",
                      key=f"{what}: {cache.url}")
        finally:
            # Not kept until the next summary: a body holds its run's graph, whose
            # arguments may be distributed Futures the user has dropped.
            del cache, body
            _queue.task_done()


def _flush_at_exit() -> None:
    if not flush_posts():
        logger.warning("result cache: %d run summaries were not sent before Python exited "
                       "(the server did not answer within %.0f s)", _queue.unfinished_tasks,
                       _EXIT_SECONDS)


_queue: queue.Queue[tuple[Transport, Any]] = queue.Queue()
_poster: threading.Thread | None = None
_poster_lock = threading.Lock()
atexit.register(_flush_at_exit)


class Progress(Callback):
    """Counts the tasks a local scheduler finishes and posts the count, at most once a
    second, from a thread of its own (a task never waits on the server)."""

    def __init__(self, cache: Transport, summary: Callable[[], dict[str, Any]]) -> None:
        super().__init__()
        self.cache = cache
        self.summary = summary  # the counts, made by the thread when it first posts
        self.done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name="result-cache-progress")

    def __enter__(self) -> Progress:
        super().__enter__()
        self._thread.start()
        return self

    def __exit__(self, *args: object) -> None:
        self._stop.set()
        super().__exit__(*args)
        self._thread.join(timeout=5)

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        self.done += 1

    def _loop(self) -> None:
        sent, summary = 0, None
        while not self._stop.wait(1.0):
            if self.done != sent:
                sent = self.done
                summary = summary or self.summary()
                post_run(self.cache, {**summary, "done": sent})


def _name(key: Key) -> str:
    name = key[0] if isinstance(key, tuple) and key else key
    return str(name).rsplit("-", 1)[0] if isinstance(name, str) else str(name)


@functools.cache
def _host() -> str:
    return socket.gethostname()


@functools.cache  # (getpwuid costs ~1 ms; the user does not change)
def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        return ""


class RunReporter:
    """The summaries of one run: :meth:`plan` when its rewrite is done (returns the context
    the run executes in: progress on local schedulers), :meth:`finish` at its end."""

    def __init__(self, cache: Transport, run_id: str, graph: Mapping[Key, GraphNode],
                 order: list[Key], hashes: GraphHashes, hits: Set[str], local: bool) -> None:
        self.cache, self.run_id = cache, run_id
        self.graph, self.order, self.hashes, self.hits = graph, order, hashes, hits
        self.local = local
        self.started = time.time()
        self.scheduled = 0
        self._listed: list[Key] = []  # the keys of the task list sent, in its order
        self._lock = threading.Lock()
        self._plan_queued = self._finished = False
        self._timer: threading.Timer | None = None

    def plan(self, report: CacheReport, scheduled: int) -> Any:
        """A run still going after ``_PLAN_AFTER`` seconds posts its plan (built by the
        poster thread): quick runs post once, at the end, and pay nothing while they run."""
        self.scheduled = scheduled

        def post_plan() -> None:
            with self._lock:
                if self._finished:
                    return
                self._plan_queued = True
            post_run(self.cache, lambda: self._summary(report, "running", frozenset()))

        self._timer = threading.Timer(_PLAN_AFTER, post_plan)
        self._timer.daemon = True
        self._timer.start()
        if not self.local:
            return contextlib.nullcontext()
        return Progress(self.cache, lambda: run_summary(report, self.run_id, self.started,
                                                        "running", scheduled=scheduled))

    def finish(self, report: CacheReport, stored: Set[str], status: str = "done") -> None:
        """The final counts; the task list the plan sent changes only where tasks were
        stored (their positions), so it is not built and sent twice."""
        done = self.scheduled if status == "done" else 0
        hashes = self.hashes.hashes
        ended = time.time()
        with self._lock:
            self._finished = True
            planned = self._plan_queued
        if self._timer is not None:  # and dropped: it holds this reporter (a cycle)
            self._timer.cancel()
            self._timer = None
        if not planned:  # one post with everything
            post_run(self.cache, lambda: {
                **self._summary(report, status, stored, ended), "done": done,
                "saved_hashes": self._saved(report)})
            return

        def body() -> dict[str, Any]:  # runs after the plan's, in the poster thread
            summary = run_summary(report, self.run_id, self.started, status,
                                  scheduled=self.scheduled, done=done, ended=ended)
            summary["stored_tasks"] = [i for i, key in enumerate(self._listed)
                                       if hashes.get(key) in stored]
            summary["saved_hashes"] = self._saved(report)
            return summary

        post_run(self.cache, body)

    def _summary(self, report: CacheReport, status: str, stored: Set[str],
                 ended: float | None = None) -> dict[str, Any]:
        if len(self.order) > MAX_RUN_TASKS:  # a large run: its counts (no per-task pass)
            return run_summary(report, self.run_id, self.started, status,
                               scheduled=self.scheduled, ended=ended)
        states = task_states(self.graph, self.order, self.hashes, self.hits,
                             report.loaded_keys, report.computed_keys, stored)
        self._listed = list(states)
        return run_summary(report, self.run_id, self.started, status, states=states,
                           graph=self.graph, scheduled=self.scheduled,
                           labels=self.hashes.labels, ended=ended)

    def _saved(self, report: CacheReport) -> list[str]:
        """The hashes of the entries the run did not recompute (loaded, or culled and
        found), loaded first, at most :data:`MAX_RUN_TASKS`: the server sums their
        recorded compute seconds as the run's seconds saved."""
        hashes, hits = self.hashes.hashes, self.hits
        saved = dict.fromkeys(h for k in report.loaded_keys if (h := hashes.get(k)) in hits)
        computed = set(report.computed_keys)
        for key in self.order:
            if len(saved) >= MAX_RUN_TASKS:
                break
            task_hash = hashes.get(key)
            if task_hash in hits and key not in computed:
                saved[task_hash] = None
        return list(saved)[:MAX_RUN_TASKS]
