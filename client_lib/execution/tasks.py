"""The functions that run inside the rewritten graph, on whatever executes tasks: threads,
worker processes or ``dask.distributed`` workers. They need only ``client_lib`` and the
cache URL carried in the task.

A store never fails the task: the value is returned unchanged whatever happens to the
upload (:mod:`.store`). A load that cannot deliver a verified value raises
:class:`CacheEntryUnavailable` so ``cached_compute`` can recompute without that entry.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from dask.sizeof import sizeof

from ..core.errors import (
    CacheEntryUnavailable,
    CacheServerLost,
    CacheUnavailable,
    ResultCacheError,
)
from ..hashing.handles import is_handle
from ..policy.speeds import LOAD_SPEEDS
from ..transport.interface import Transport
from ..wire import codec
from .leases import LeaseKeeper, wait_for_holder
from .replay import recording, replay, unwrap
from .specs import StoreSpec
from .store import maybe_store, remember_warnings
from .tally import TALLIES

__all__ = ["load_result", "run_and_store", "run_group"]


def run_and_store(spec: StoreSpec, func: Any, kwargs: dict | None, *args: Any) -> Any:
    """Run the original task, time it, store its result if the policy says so."""
    if spec.lease is not None:
        return _run_leased(spec, lambda: func(*args, **kwargs) if kwargs else func(*args))
    start = time.perf_counter()
    with recording() as raised:
        value = func(*args, **kwargs) if kwargs else func(*args)
    maybe_store(spec, value, time.perf_counter() - start, raised)
    return value


def _run_leased(spec: StoreSpec, call: Callable[[], Any]) -> Any:
    """Run a task whose hash is leased: by this run (renewed while it runs, released if
    not stored) or by another (wait for its result first; client_lib.execution.leases)."""
    run = spec.run
    held = spec.lease == "held"
    if not held:
        waited = wait_for_holder(run, spec.task_hash, spec.label, load_result)
        if waited.loaded:
            run.tally().waited_and_loaded()
            return waited.value
        held = waited.held
    keeper = LeaseKeeper.get() if held else None
    if keeper is not None:
        keeper.started(run, spec.task_hash, spec.cost_key)
    stored = False
    start = time.perf_counter()
    try:
        with recording() as raised:
            value = call()
        stored = maybe_store(spec, value, time.perf_counter() - start, raised)
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
            maybe_store(spec, value, time.perf_counter() - start, raised)
        for dep in node.dependencies:
            remaining[dep] -= 1
            if not remaining[dep] and dep != outkey:
                del values[dep]
    return values[outkey]


def load_result(cache: Transport, task_hash: str, label: str, run: str | None = None
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
    nbytes = sizeof(value)
    LOAD_SPEEDS.record(codec.kind_of(value, nbytes), nbytes, time.perf_counter() - start)
    if run is not None:  # what the run read, for its byte bound (client_lib/policy/budget.py)
        TALLIES.of(run).budget.add_read(nbytes)
    value, warned = unwrap(value)
    if value is None or is_handle(value):  # never stored by this version
        raise CacheEntryUnavailable(task_hash, "holds a handle to external state")
    if warned:
        remember_warnings(task_hash, warned)
        replay(warned)
    return value
