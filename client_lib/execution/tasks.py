"""The functions that run inside the rewritten graph, on whatever executes tasks: threads,
worker processes or ``dask.distributed`` workers. They need only ``client_lib`` and the
cache URL carried in the task.

A store never fails the task: the value is returned unchanged whatever happens to the
upload. A load that cannot deliver a verified value raises :class:`CacheEntryUnavailable`
so ``cached_compute`` can recompute without that entry.

What is never stored: ``None`` (a task that returns nothing exists for its side effect,
which a load would skip) and handles to external state (:mod:`.handles`). The warnings a
stored task raised, and those of the tasks upstream of it that ran here, are stored with
its result and raised again when it is loaded (:mod:`.replay`).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from dask.sizeof import sizeof

from ..core.errors import (
    CacheAccessDenied,
    CacheEntryUnavailable,
    CacheServerLost,
    CacheUnavailable,
    ResultCacheError,
)
from ..core.notices import warn_once
from ..hashing.handles import is_handle
from ..policy import budget
from ..policy.costs import record_seconds
from ..policy.modes import LARGE_BYTES, OVER_BUDGET, Candidate
from ..policy.speeds import LOAD_SPEEDS, STORE_SPEEDS
from ..transport.client import CacheClient
from ..wire import codec
from ..wire.bounds import MAX_BATCH_OBJECT_BYTES
from .leases import LeaseKeeper, release_leases, wait_for_holder
from .replay import RecordedWarning, WarnedValue, merge, recording, replay, unwrap
from .specs import StoreSpec
from .store_queue import Queued, StoreQueue

__all__ = ["flush_stores", "load_result", "pop_counts",
           "pop_decisions", "pop_stored", "run_and_store", "run_group", "server_lost"]

_CHAIN_LIMIT = 100_000
_chain_seconds: dict[str, float] = {}  # task hash -> cost to recompute its uncached chain
# task hash -> warnings it and the tasks upstream of it raised here (or loaded with it)
_chain_warnings: dict[str, tuple[RecordedWarning, ...]] = {}
_run_counts: defaultdict[str, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
# run id -> why each large result was or was not stored (explain=True prints them)
_run_decisions: defaultdict[str, list[str]] = defaultdict(list)
_DECISIONS_KEPT = 100
_run_stored: defaultdict[str, set[str]] = defaultdict(set)  # run id -> hashes stored here
# runs whose server failed a store in this process: their later stores skip the upload
_lost_runs: dict[str, str] = {}
_LOST_LIMIT = 10_000
_lock = threading.Lock()


def _upstream_seconds(dep_hashes: tuple[str, ...]) -> float:
    """The most expensive uncached chain among the dependencies, if computed here."""
    if not dep_hashes:  # most tasks of a wide graph: no generator to build
        return 0.0
    get = _chain_seconds.get
    return max((get(h, 0.0) for h in dep_hashes), default=0.0)


def _record_chain(task_hash: str, seconds: float) -> None:
    # Runs around every task: a plain dict (item assignment is atomic under the GIL), and
    # forgetting everything at the limit rather than keeping an LRU order on every call.
    # Losing the chain only makes a later estimate lower, never a result wrong.
    if len(_chain_seconds) >= _CHAIN_LIMIT:
        _chain_seconds.clear()
    _chain_seconds[task_hash] = seconds


def _warnings_with_upstream(spec: StoreSpec,
                            raised: list[RecordedWarning]) -> tuple[RecordedWarning, ...]:
    """The warnings a load of this result must raise: its own and its upstream's."""
    get = _chain_warnings.get
    upstream = [w for h in spec.dep_hashes if (w := get(h))] if spec.dep_hashes else ()
    if not raised and not upstream:
        return ()
    found = merge(raised, *upstream)
    if len(_chain_warnings) >= _CHAIN_LIMIT:  # forgetting only loses warnings to replay
        _chain_warnings.clear()
    _chain_warnings[spec.task_hash] = found
    return found


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"


def _note_decision(run_id: str, line: str) -> None:
    with _lock:
        decisions = _run_decisions[run_id]
        if len(decisions) < _DECISIONS_KEPT:
            decisions.append(line)


def pop_decisions(run_id: str) -> list[str]:
    """Why each large result of ``run_id`` was or was not stored, in *this* process."""
    with _lock:
        return _run_decisions.pop(run_id, [])


def count(run_id: str, what: str, n: int = 1) -> None:
    with _lock:
        _run_counts[run_id][what] += n


def _stored(run_id: str, task_hash: str, nbytes: int) -> None:
    with _lock:
        counts = _run_counts[run_id]
        counts["stored"] += 1
        counts["stored-bytes"] += nbytes
        _run_stored[run_id].add(task_hash)


def pop_counts(run_id: str) -> dict[str, float]:
    """What the tasks of ``run_id`` did in *this* process (all of it on local schedulers),
    with what they computed and spent on stores (client_lib/policy/budget.py)."""
    with _lock:
        counts: dict[str, float] = dict(_run_counts.pop(run_id, {}))
    counts.update(budget.pop_budget(run_id))
    return counts


def pop_stored(run_id: str) -> set[str]:
    """The hashes the tasks of ``run_id`` stored in *this* process."""
    with _lock:
        return _run_stored.pop(run_id, set())


def server_lost(run_id: str) -> str | None:
    """Why ``run_id`` stopped storing in this process (its server failed), or None."""
    return _lost_runs.get(run_id)


def _lose_server(run_id: str, reason: str) -> None:
    with _lock:
        if len(_lost_runs) >= _LOST_LIMIT:  # forgetting only costs one more failed request
            _lost_runs.clear()
        _lost_runs.setdefault(run_id, reason)


def _maybe_store(spec: StoreSpec, value: Any, seconds: float,
                 raised: list[RecordedWarning]) -> bool:
    """Offer a computed value to the policy; store it if chosen. Never raises; True if the
    server holds the value now."""
    record_seconds(spec.label, seconds, bool(raised))  # its next tasks: lease, wrap?
    if spec.run.run_id in _lost_runs:
        return False  # the server failed this run already: never wait on it again
    try:
        upstream = _upstream_seconds(spec.dep_hashes)
        _record_chain(spec.task_hash, seconds + upstream)
        warned = _warnings_with_upstream(spec, raised)
        run = spec.run
        budget.add_compute(run.run_id, seconds)
        if value is None or is_handle(value):
            return False  # a side effect's marker, or a handle: a load could not stand for it
        if not spec.overwrite and (spec.chain_next is not None or not run.policy.may_store(
                seconds + upstream, spec.is_output)):
            # No size measured (the shortcut exists to skip it); an array says its own.
            nbytes = getattr(value, "nbytes", 0)
            if isinstance(nbytes, int) and nbytes >= LARGE_BYTES:
                why = (f"a link of a chain going on to {spec.chain_next}" if spec.chain_next
                       else f"recompute {seconds + upstream:.3g} s costs less than any load")
                _note_decision(run.run_id, f"{spec.label} ({_size(nbytes)}): not stored: "
                               f"{why}")
            return False
        nbytes = sizeof(value)
        kind = codec.kind_of(value)
        learned = LOAD_SPEEDS.estimate(kind, nbytes)
        candidate = Candidate(spec.task_hash, spec.label, seconds, upstream, nbytes,
                              spec.is_output, kind, *(learned or (None, 0)),
                              store_rate=STORE_SPEEDS.rate())
        chosen, why = ((True, "refresh") if spec.overwrite
                       else budget.decide(run.run_id, run.policy, candidate))
        if not chosen and why.startswith(OVER_BUDGET):
            count(run.run_id, "over-budget")
        if nbytes >= LARGE_BYTES:
            _note_decision(run.run_id, f"{spec.label} ({_size(nbytes)}): "
                           f"{'stored' if chosen else 'not stored'}: {why}")
        if chosen:
            payload = _encoded(value, warned)
            if run.batch and not spec.overwrite and payload.nbytes <= MAX_BATCH_OBJECT_BYTES:
                _queue_store(spec, payload, seconds)
                return True
            # The entry records the task's own time (the chain is only this run's estimate
            # of what recomputing costs, for the policy).
            start = time.perf_counter()
            if run.cache.put(spec.task_hash, payload, seconds, spec.label,
                             ttl=spec.ttl, overwrite=spec.overwrite, run=run.run_id):
                STORE_SPEEDS.record(payload.nbytes, time.perf_counter() - start)
                _stored(run.run_id, spec.task_hash, nbytes)
                return True
            if spec.overwrite:  # no room for the new value: never serve the old one
                run.cache.delete(spec.task_hash)
    except CacheUnavailable as exc:
        _lose_server(spec.run.run_id, str(exc))
        warn_once(f"result cache: storing results failed; this run stores nothing more: "
                  f"{exc}", key=f"store failed: {spec.run.cache.url}")
    except CacheAccessDenied as exc:  # one message per server and problem
        warn_once(f"result cache: {spec.run.cache.url} refused to store results "
                  f"({exc.status}: {exc.hint}); continuing without storing")
    except Exception as exc:  # a cache problem must never fail the computation
        warn_once(f"result cache: could not store a {type(value).__name__} "
                  f"({spec.label}): {type(exc).__name__}: {exc}")
    return False


def _queue_store(spec: StoreSpec, enc: codec.Encoded, seconds: float) -> None:
    """Hand a small encoded result to the process's :class:`StoreQueue`; its outcome is
    counted (or its lease released) once the server answered."""
    run = spec.run
    if enc.kind == "ndarray":  # the task's own array: a later task may change it in place
        enc.body = memoryview(bytes(enc.body))

    def done(stored: bool) -> None:
        if stored:
            _stored(run.run_id, spec.task_hash, enc.nbytes)
        elif spec.lease is not None:  # held (or taken over from a holder that let go)
            release_leases(run, [spec.task_hash])

    StoreQueue.get().submit(Queued(run.cache, run.run_id, spec.task_hash, enc, seconds,
                                   spec.label, spec.ttl, done))


def flush_stores(run_id: str) -> None:
    """Wait until every result ``run_id`` queued in this process is stored or failed."""
    StoreQueue.get().wait(run_id)


def _encoded(value: Any, warned: tuple[RecordedWarning, ...]) -> codec.Encoded:
    """What to upload: the value encoded, or the value with its warnings (then always a
    pickle, labelled with the value's own type)."""
    if not warned:
        return codec.encode(value)
    enc = codec.encode(WarnedValue(value, warned))
    enc.type_name = f"{type(value).__module__}.{type(value).__qualname__}"
    return enc


def run_and_store(spec: StoreSpec, func: Any, kwargs: dict | None, *args: Any) -> Any:
    """Run the original task, time it, store its result if the policy says so."""
    if spec.lease is not None:
        return _run_leased(spec, lambda: func(*args, **kwargs) if kwargs else func(*args))
    start = time.perf_counter()
    with recording() as raised:
        value = func(*args, **kwargs) if kwargs else func(*args)
    _maybe_store(spec, value, time.perf_counter() - start, raised)
    return value


def _run_leased(spec: StoreSpec, call: Callable[[], Any]) -> Any:
    """Run a task whose hash is leased: by this run (renewed while it runs, released if
    not stored) or by another (wait for its result first; client_lib.execution.leases)."""
    run = spec.run
    held = spec.lease == "held"
    if not held:
        waited = wait_for_holder(run, spec.task_hash, spec.label, load_result)
        if waited.loaded:
            count(run.run_id, "waited-loaded")
            return waited.value
        held = waited.held
    keeper = LeaseKeeper.get() if held else None
    if keeper is not None:
        keeper.started(run, spec.task_hash, spec.label)
    stored = False
    start = time.perf_counter()
    try:
        with recording() as raised:
            value = call()
        stored = _maybe_store(spec, value, time.perf_counter() - start, raised)
    finally:
        if keeper is not None:
            keeper.finished(run, spec.task_hash, stored)
    return value


def run_group(members: tuple[tuple[Any, Any], ...], outkey: Any, inkeys: tuple,
              specs: dict[Any, StoreSpec], *deps: Any) -> Any:
    """Run the operations of one fused task (``(key, node)`` pairs in dependency order),
    timing and offering to the policy those with a store spec. Like Dask's
    ``_execute_subgraph``, values are dropped as soon as nothing in the group needs them.
    """
    values: dict[Any, Any] = dict(zip(inkeys, deps, strict=True))
    remaining: dict[Any, int] = {}
    for _, node in members:
        for dep in node.dependencies:
            remaining[dep] = remaining.get(dep, 0) + 1
    for key, node in members:
        spec = specs.get(key)
        if spec is None:
            values[key] = node(values)
        elif spec.lease is not None:
            values[key] = _run_leased(spec, lambda node=node: node(values))
        else:
            start = time.perf_counter()
            with recording() as raised:
                value = values[key] = node(values)
            _maybe_store(spec, value, time.perf_counter() - start, raised)
        for dep in node.dependencies:
            remaining[dep] -= 1
            if not remaining[dep] and dep != outkey:
                del values[dep]
    return values[outkey]


def load_result(cache: CacheClient, task_hash: str, label: str, run: str | None = None
                ) -> Any:
    """Load a cached result; never returns a value that failed verification. Raises
    the warnings stored with it, as its computation did.

    Any failure is a :class:`CacheEntryUnavailable` (``cached_compute`` then recomputes
    without the entry). A download that does not match its digest
    (:class:`CacheEntryCorrupt`) leaves the entry alone: the server verified the object
    when it read it, so the bytes went bad on the way, and the server handles its own
    corruption (it drops an entry whose object fails verification on read).
    """
    start = time.perf_counter()
    try:
        value = cache.get(task_hash, run)
    except CacheEntryUnavailable:
        raise
    except CacheUnavailable as exc:
        raise CacheServerLost(task_hash, str(exc)) from None
    except ResultCacheError as exc:
        raise CacheEntryUnavailable(task_hash, f"{type(exc).__name__}: {exc}") from None
    # What loading this kind and size takes here, for the auto policy (policy/speeds.py).
    LOAD_SPEEDS.record(codec.kind_of(value), sizeof(value), time.perf_counter() - start)
    value, warned = unwrap(value)
    if value is None or is_handle(value):  # never stored by this version
        raise CacheEntryUnavailable(task_hash, "holds a handle to external state")
    if warned:
        _chain_warnings[task_hash] = warned
        replay(warned)
    return value
