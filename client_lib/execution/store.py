"""Storing a computed result, on whatever executes the task: offered to the policy once
(the decision is data, :class:`~client_lib.policy.decisions.StoreDecision`), encoded and
handed to the process's write-behind (:mod:`.store_queue`; uploaded by the task itself when
its run cannot wait for that queue, or the result is larger than the whole buffer), and
counted in the run's tally (:mod:`.tally`). A store never fails the task: whatever happens
to the upload, the value is returned unchanged by the caller.

What is never stored: ``None`` (a task that returns nothing exists for its side effect,
which a load would skip) and handles to external state (client_lib/hashing/handles.py).
The warnings a stored task raised, and those of the tasks upstream of it that ran here,
are stored with its result and raised again when it is loaded (:mod:`.replay`).
"""

from __future__ import annotations

import time
from typing import Any

from dask.sizeof import sizeof

from ..core.config import setting
from ..core.errors import CacheAccessDenied, CacheUnavailable
from ..core.notices import warn_once
from ..hashing.handles import is_handle
from ..policy.costs import record_seconds
from ..policy.decisions import Reason, StoreDecision
from ..policy.modes import LARGE_BYTES, Candidate
from ..policy.speeds import LOAD_SPEEDS, STORE_SPEEDS
from ..wire import codec
from .leases import release_leases
from .replay import RecordedWarning, WarnedValue, merge
from .specs import StoreSpec
from .store_queue import BUFFER_FULL, MEMORY_PRESSURE, Queued, StoreQueue, buffer_limit
from .tally import TALLIES, RunTally

__all__ = ["finish_here", "flush_stores", "maybe_store", "remember_warnings"]

_CHAIN_LIMIT = 100_000
# What this process learned of each task hash it computed or loaded, for the tasks
# downstream of it: the cost to recompute its uncached chain, and the warnings it and its
# upstream raised (or it was loaded with). Plain dicts, forgotten whole at the limit: item
# assignment is atomic under the GIL, and losing them only lowers an estimate or loses
# warnings to replay, never makes a result wrong.
_chain_seconds: dict[str, float] = {}
_chain_warnings: dict[str, tuple[RecordedWarning, ...]] = {}


def maybe_store(spec: StoreSpec, value: Any, seconds: float,
                raised: list[RecordedWarning]) -> bool:
    """Offer a computed value to the policy; store it if chosen. Never raises; True if the
    server holds the value now (or will, once its queued batch is answered)."""
    record_seconds(spec.cost_key, seconds, bool(raised))  # its next tasks: lease, wrap?
    run = spec.run
    tally = run.tally()
    if tally.lost is not None:
        return False  # the server failed this run already: never wait on it again
    try:
        upstream = _upstream_seconds(spec.dep_hashes)
        _record_chain(spec.task_hash, seconds + upstream)
        warned = _warnings_with_upstream(spec, raised)
        if value is None or is_handle(value):  # a load could not stand for either
            tally.decided(spec.label, 0, _NOTHING)
            return False
        if not spec.overwrite and not run.policy.may_store(seconds + upstream,
                                                           spec.is_output):
            # No size measured (the shortcut exists to skip it); an array says its own.
            nbytes = getattr(value, "nbytes", 0)
            nbytes = nbytes if isinstance(nbytes, int) else 0
            if not spec.dep_hashes:  # it read an input: what the run may add grows
                tally.budget.add_read(nbytes)
            tally.decided(spec.label, nbytes, _CHEAP if nbytes < LARGE_BYTES else StoreDecision(
                False, Reason.CHEAP, f"recompute {seconds + upstream:.3g} s costs less than "
                "any load"))  # a large one's line says its numbers
            return False
        nbytes = sizeof(value)
        decision = (StoreDecision(True, Reason.REFRESH, "refresh") if spec.overwrite
                    else tally.budget.decide(run.policy, _candidate(spec, value, seconds,
                                                                    upstream, nbytes),
                                             reads=not spec.dep_hashes))
        tally.decided(spec.label, nbytes, decision)
        if decision.store:
            return _store(spec, _encoded(value, warned, nbytes), seconds, nbytes, tally)
    except CacheUnavailable as exc:
        tally.lose(str(exc))
        warn_once(f"result cache: storing results failed; this run stores nothing more: "
                  f"{exc}", key=f"store failed: {run.cache.url}")
    except CacheAccessDenied as exc:  # one message per server and problem
        warn_once(f"result cache: {run.cache.url} refused to store results "
                  f"({exc.status}: {exc.hint}); continuing without storing")
    except Exception as exc:  # a cache problem must never fail the computation
        warn_once(f"result cache: could not store a {type(value).__name__} "
                  f"({spec.label}): {type(exc).__name__}: {exc}")
    return False


# Skipped before the policy weighed them (one decision each, no text per task).
_NOTHING = StoreDecision(False, Reason.NOTHING, "None or a handle")
_CHEAP = StoreDecision(False, Reason.CHEAP, "recomputing costs less than any load")


def _candidate(spec: StoreSpec, value: Any, seconds: float, upstream: float,
               nbytes: int) -> Candidate:
    kind = codec.kind_of(value, nbytes)
    learned = LOAD_SPEEDS.estimate(kind, nbytes)
    return Candidate(spec.task_hash, spec.label, seconds, upstream, nbytes, spec.is_output,
                     kind, *(learned or (None, 0)))


def _store(spec: StoreSpec, enc: codec.Encoded, seconds: float, nbytes: int,
           tally: RunTally) -> bool:
    """Store a chosen result: queued for the write-behind when its run waits for it, else
    uploaded here. True if stored or queued (a result the full buffer drops is counted
    and not stored). The entry records the task's own time (the chain is only this run's
    estimate, for the policy)."""
    run = spec.run
    if run.batch and not spec.overwrite:
        limit = buffer_limit()
        if enc.nbytes <= limit:
            queued = _queue_store(spec, enc, seconds, tally, limit)
            if queued is not None:
                return queued
    start = time.perf_counter()
    if run.cache.put(spec.task_hash, enc, seconds, spec.label, ttl=spec.ttl,
                     overwrite=spec.overwrite, run=run.run_id):
        elapsed = time.perf_counter() - start
        STORE_SPEEDS.record(enc.nbytes, elapsed)
        tally.store_seconds += elapsed
        tally.stored_one(spec.task_hash, nbytes, spec.label)
        return True
    tally.outcome(spec.label, nbytes, Reason.FAILED)
    if spec.overwrite:  # no room for the new value: never serve the old one
        run.cache.delete(spec.task_hash)
    return False


def _queue_store(spec: StoreSpec, enc: codec.Encoded, seconds: float, tally: RunTally,
                 limit: int) -> bool | None:
    """Hand an encoded result to the process's write-behind; its outcome is counted (or
    its lease released) once the server answered. False: the buffer was full (or the
    worker's memory near its limit), dropped; None: so, but a requested output is never
    dropped, its task stores it."""
    run = spec.run
    if enc.kind == "ndarray":  # the task's own array: a later task may change it in place
        enc.body = memoryview(bytes(enc.body))

    def done(stored: bool, store_seconds: float, lost: str | None) -> None:
        tally.store_seconds += store_seconds
        if stored:
            tally.stored_one(spec.task_hash, enc.nbytes, spec.label)
            return
        if lost == MEMORY_PRESSURE:
            tally.outcome(spec.label, enc.nbytes, Reason.PRESSURE)
        else:
            if lost is not None:
                tally.lose(lost)
            tally.outcome(spec.label, enc.nbytes, Reason.FAILED)
        if spec.lease is not None:  # held (or taken over from a holder that let go)
            release_leases(run, [spec.task_hash])

    pending = StoreQueue.get().submit(Queued(run.cache, run.run_id, spec.task_hash, enc,
                                             seconds, spec.label, spec.ttl, done), limit)
    if isinstance(pending, str) and spec.is_output:
        return None
    if pending == MEMORY_PRESSURE:
        tally.outcome(spec.label, enc.nbytes, Reason.PRESSURE)
        warn_once("result cache: this worker's memory neared Dask's memory target: results "
                  "chosen to be stored were dropped from storing (counted in the run report)",
                  key="store memory pressure")
        return False
    if pending == BUFFER_FULL:
        tally.outcome(spec.label, enc.nbytes, Reason.DROPPED)
        warn_once(f"result cache: the store buffer ({limit / 2**20:.0f} MiB, "
                  "result-cache.store-buffer) was full: results chosen to be stored were "
                  "dropped from storing (counted in the run report)", key="store buffer full")
        return False
    assert isinstance(pending, int)
    tally.buffer_peak = max(tally.buffer_peak, pending)
    return True


def _encoded(value: Any, warned: tuple[RecordedWarning, ...], nbytes: int) -> codec.Encoded:
    """What to upload: the value encoded (``nbytes``: its size, measured once), or the value
    with its warnings (then always a pickle, labelled with the value's own type)."""
    if not warned:
        return codec.encode(value, nbytes)
    enc = codec.encode(WarnedValue(value, warned))
    enc.type_name = f"{type(value).__module__}.{type(value).__qualname__}"
    return enc


def flush_stores(run_id: str) -> None:
    """Wait until every result ``run_id`` queued in this process is stored or failed, at
    most ``result-cache.store-wait`` seconds; those not answered by then are counted in
    the run's tally as unconfirmed."""
    left = StoreQueue.get().wait(run_id, float(setting("store-wait")))
    if left:
        TALLIES.of(run_id).unconfirmed += left
        warn_once(f"result cache: {left} store(s) of a run were not answered within "
                  "result-cache.store-wait; they go on in the background",
                  key="store wait exceeded")


def finish_here(run_id: str) -> tuple[str | None, RunTally]:
    """On a worker: wait for the run's queued stores, then hand over (and forget) its
    tally; a failed wait still hands it over, with the error."""
    try:
        flush_stores(run_id)
        error = None
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    return error, TALLIES.take(run_id)


def remember_warnings(task_hash: str, warned: tuple[RecordedWarning, ...]) -> None:
    """A loaded result's warnings, for the stores downstream of it to record too."""
    _chain_warnings[task_hash] = warned


def _upstream_seconds(dep_hashes: tuple[str, ...]) -> float:
    """The most expensive uncached chain among the dependencies, if computed here."""
    if not dep_hashes:  # most tasks of a wide graph: no generator to build
        return 0.0
    get = _chain_seconds.get
    return max((get(h, 0.0) for h in dep_hashes), default=0.0)


def _record_chain(task_hash: str, seconds: float) -> None:
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
