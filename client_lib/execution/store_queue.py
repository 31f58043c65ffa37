"""Stores that do not wait (write-behind): every result a run chooses to store is handed,
encoded, to one background writer per process and the task returns at once; the writer
uploads while the graph goes on. Small results go in batches (``POST /v1/objects/batch``,
one group commit on the server for each), large ones one ``PUT`` each.
docs/design/store-path.md, Write-behind.

Bounded by bytes (``result-cache.store-buffer``, :func:`buffer_limit`): a result that would
take the pending bytes over the bound is dropped from storing (the caller counts and
reports it), so compute never waits for the writer and memory never grows without bound;
a result larger than the whole bound is stored by its task, as before write-behind. On a
distributed worker whose memory nears Dask's own thresholds (``distributed.worker.memory
.target``, else ``.spill``), the result and every store still queued are dropped the same
way, before the worker would have to spill or pause.
``cached_compute`` waits for its run's stores (:meth:`StoreQueue.wait`, at most
``result-cache.store-wait`` seconds, the report's ``store wait``) before it returns: every
queued result is then durable on the server, or its failure was reported (a warning, and
the lease released), or it is counted as unconfirmed. A process that exits waits the same
bound for what is pending, and says what it could not store. A writer killed mid-upload
leaves nothing visible: the server publishes an object only once it is complete.
Thread safe; a forked process starts a queue of its own.
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from dask.utils import parse_bytes

from ..core.config import setting
from ..core.errors import CacheAccessDenied, CacheUnavailable, ResultCacheError
from ..core.notices import warn_once
from ..core.singleton import process_singleton
from ..policy.speeds import STORE_SPEEDS
from ..transport.interface import Transport
from ..wire.bounds import MAX_BATCH_ITEMS, MAX_BATCH_OBJECT_BYTES
from ..wire.codec import Encoded

__all__ = ["BUFFER_FULL", "MEMORY_PRESSURE", "Queued", "StoreQueue", "buffer_limit"]

logger = logging.getLogger("client_lib")

_BATCH_BYTES = 16 * 2**20  # per request, below the server's MAX_BATCH_BYTES
# Small results wait this long for others to share their request while nobody waits for
# them: a batch costs the server a group commit and an index transaction (~5 ms of CPU,
# taken from the run's compute on a small machine) however few results it carries.
_LINGER = 0.2
_THREADED_BUFFER = 2**30
_WORKER_SHARE = 0.25  # of a distributed worker's memory limit


def buffer_limit() -> int:
    """The bytes of chosen results this process may hold while they upload:
    ``result-cache.store-buffer``, or a quarter of this distributed worker's memory
    limit, or 1 GiB."""
    value = setting("store-buffer")
    if value is not None:
        return int(parse_bytes(value) if isinstance(value, str) else value)
    if "distributed" in sys.modules:
        try:
            from distributed import get_worker

            limit = get_worker().memory_manager.memory_limit
        except Exception:  # not on a worker (ValueError), or no memory manager
            limit = None
        if limit:
            return int(limit * _WORKER_SHARE)
    return _THREADED_BUFFER


def _memory_room() -> float | None:
    """On a distributed worker with a memory limit: the bytes its process may still grow
    by before Dask's first memory threshold; None elsewhere."""
    if "distributed" not in sys.modules:
        return None
    try:
        from distributed import get_worker

        limit = get_worker().memory_manager.memory_limit
    except Exception:  # not on a worker (ValueError), or no memory manager
        return None
    if not limit:
        return None
    import dask
    import psutil

    fractions = [f for f in (dask.config.get("distributed.worker.memory.target", 0.6),
                             dask.config.get("distributed.worker.memory.spill", 0.7))
                 if f] or [0.6]
    return limit * min(fractions) - psutil.Process().memory_info().rss


#: Why ``StoreQueue.submit`` dropped a result.
BUFFER_FULL, MEMORY_PRESSURE = "buffer full", "memory pressure"


@dataclass(slots=True)
class Queued:
    """One result waiting to be stored; ``done(stored, seconds, lost)`` runs on the
    writer's thread once the server answered (``stored`` False: not stored, whatever the
    reason; ``seconds``: this result's share of its request; ``lost``: why the server
    failed, when it is unreachable), or on the submitting thread with ``lost`` set to
    :data:`MEMORY_PRESSURE` when memory pressure dropped it unsent."""

    cache: Transport
    run_id: str
    task_hash: str
    encoded: Encoded
    seconds: float
    label: str
    ttl: float | None
    done: Callable[[bool, float, str | None], None]


@process_singleton
class StoreQueue:
    """The process's write-behind queue (``StoreQueue.get()``)."""

    get: Callable[[], StoreQueue]

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: list[Queued] = []
        self._open: dict[str, int] = {}  # run id -> results queued or in flight
        self.pending_bytes = 0  # queued or in flight
        self._waiting = 0  # threads in wait() or at exit: send at once
        self._thread: threading.Thread | None = None
        atexit.register(self._at_exit)

    def submit(self, item: Queued, limit: int) -> int | str:
        """Queue ``item`` if the pending bytes stay within ``limit`` (and a worker's memory
        has room for it): the pending bytes with it, or why it was dropped (nothing was
        queued; under memory pressure the queued results not in flight go too)."""
        nbytes = item.encoded.nbytes
        room = _memory_room()
        if room is not None and room < nbytes:
            self._drop_queued()
            return MEMORY_PRESSURE
        with self._cond:
            if self.pending_bytes + nbytes > limit:
                return BUFFER_FULL
            self.pending_bytes += nbytes
            self._queue.append(item)
            self._open[item.run_id] = self._open.get(item.run_id, 0) + 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="result-cache-stores")
                self._thread.start()
            self._cond.notify_all()
            return self.pending_bytes

    def _drop_queued(self) -> None:
        """Drop every result not in flight yet (memory pressure)."""
        with self._cond:
            dropped, self._queue = self._queue, []
            self._answered(dropped)
        for item in dropped:
            try:
                item.done(False, 0.0, MEMORY_PRESSURE)
            except Exception as exc:  # a callback must never stop the queue
                warn_once(f"result cache: after a store: {type(exc).__name__}: {exc}")

    def _answered(self, items: list[Queued]) -> None:
        """Count ``items`` as answered (under the lock)."""
        for item in items:
            self.pending_bytes -= item.encoded.nbytes
            left = self._open.get(item.run_id, 0) - 1
            if left > 0:
                self._open[item.run_id] = left
            else:
                self._open.pop(item.run_id, None)
        self._cond.notify_all()

    def wait(self, run_id: str, timeout: float | None = None) -> int:
        """Wait until every result ``run_id`` queued in this process was answered, at most
        ``timeout`` seconds; returns how many were not answered by then."""
        with self._cond:
            self._waiting += 1
            self._cond.notify_all()
            try:
                self._cond.wait_for(lambda: not self._open.get(run_id), timeout)
            finally:
                self._waiting -= 1
            return self._open.get(run_id, 0)

    def _at_exit(self) -> None:
        """A process that exits: store what is pending (bounded), or say what is not."""
        with self._cond:
            if not self._open:
                return
            self._waiting += 1
            self._cond.notify_all()
            self._cond.wait_for(lambda: not self._open, float(setting("store-wait")))
            left = sum(self._open.values())
        if left:
            logger.warning("result cache: %d result(s) still uploading at exit were not "
                           "stored (within result-cache.store-wait)", left)

    def _lingers(self) -> bool:
        """Whether the queued results may wait for more (see ``_LINGER``): all small,
        fewer and smaller than a full batch, and nobody waiting for them."""
        queue = self._queue
        return (not self._waiting and len(queue) < MAX_BATCH_ITEMS
                and sum(q.encoded.nbytes for q in queue) < _BATCH_BYTES
                and all(q.encoded.nbytes <= MAX_BATCH_OBJECT_BYTES for q in queue))

    def _take(self) -> list[Queued]:
        """The next request: one large result, or small ones for one server within the
        batch bounds."""
        first = self._queue[0]
        if first.encoded.nbytes > MAX_BATCH_OBJECT_BYTES:
            self._queue.pop(0)
            return [first]
        batch, rest, nbytes = [], [], 0
        for item in self._queue:
            if (item.cache is first.cache and len(batch) < MAX_BATCH_ITEMS
                    and item.encoded.nbytes <= MAX_BATCH_OBJECT_BYTES
                    and (not batch or nbytes + item.encoded.nbytes <= _BATCH_BYTES)):
                batch.append(item)
                nbytes += item.encoded.nbytes
            else:
                rest.append(item)
        self._queue = rest
        return batch

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue)
                if self._lingers():
                    self._cond.wait_for(lambda: not self._lingers(), _LINGER)
                batch = self._take()
            start = time.perf_counter()
            outcomes, lost = _send(batch)
            share = (time.perf_counter() - start) / len(batch)
            for item, stored in zip(batch, outcomes, strict=True):
                try:
                    item.done(stored, share, lost)
                except Exception as exc:  # a callback must never stop the queue
                    warn_once(f"result cache: after a store: {type(exc).__name__}: {exc}")
            with self._cond:
                self._answered(batch)
                item = None
                batch = []  # the encoded bodies go now, not when the next batch comes


def _send(batch: list[Queued]) -> tuple[list[bool], str | None]:
    cache = batch[0].cache
    start = time.perf_counter()
    try:
        if len(batch) == 1 and batch[0].encoded.nbytes > MAX_BATCH_OBJECT_BYTES:
            q = batch[0]
            stored = [cache.put(q.task_hash, q.encoded, q.seconds, q.label, ttl=q.ttl,
                                run=q.run_id)]
        else:
            stored = cache.put_many([(q.task_hash, q.encoded, q.seconds, q.label, q.ttl,
                                      q.run_id) for q in batch])
        STORE_SPEEDS.record(sum(q.encoded.nbytes for q in batch), time.perf_counter() - start)
        return stored, None
    except CacheAccessDenied as exc:
        warn_once(f"result cache: {cache.url} refused to store results ({exc.status}: "
                  f"{exc.hint}); continuing without storing")
        return [False] * len(batch), None
    except CacheUnavailable as exc:
        warn_once(f"result cache: storing results failed; this run stores nothing more: "
                  f"{exc}", key=f"store failed: {cache.url}")
        return [False] * len(batch), str(exc)
    except ResultCacheError as exc:
        warn_once(f"result cache: storing results failed, continuing without: {exc}")
    except Exception as exc:  # a cache problem must never fail the computation
        warn_once(f"result cache: could not store {len(batch)} results: "
                  f"{type(exc).__name__}: {exc}")
    return [False] * len(batch), None
