"""Stores that do not wait: the small results of a run queue here and go to the server in
batches (``POST /v1/objects/batch``, one group commit on the server for each), from one
background thread per process. docs/design/store-path.md, Batched stores.

A task whose result is queued returns at once; while one batch is in flight the next one
fills, so a run of many small stores costs a few requests and fsyncs instead of one of each
per task. ``cached_compute`` waits for its run's stores (:meth:`StoreQueue.wait`) before it
returns: every queued result is then durable on the server, or its failure was reported
(a warning, and the lease released). Thread safe; a forked process starts a queue of its
own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..core.errors import CacheAccessDenied, ResultCacheError
from ..core.notices import warn_once
from ..core.singleton import process_singleton
from ..policy.speeds import STORE_SPEEDS
from ..transport.interface import Transport
from ..wire.bounds import MAX_BATCH_ITEMS
from ..wire.codec import Encoded

__all__ = ["Queued", "StoreQueue"]

_BATCH_BYTES = 16 * 2**20  # per request, below the server's MAX_BATCH_BYTES


@dataclass(slots=True)
class Queued:
    """One result waiting to be stored; ``done(stored)`` runs on the queue's thread once
    the server answered (``stored`` False: not stored, whatever the reason)."""

    cache: Transport
    run_id: str
    task_hash: str
    encoded: Encoded
    seconds: float
    label: str
    ttl: float | None
    done: Callable[[bool], None]


@process_singleton
class StoreQueue:
    """The process's queue of results to store (``StoreQueue.get()``)."""

    get: Callable[[], StoreQueue]

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: list[Queued] = []
        self._open: dict[str, int] = {}  # run id -> results queued or in flight
        self._thread: threading.Thread | None = None

    def submit(self, item: Queued) -> None:
        with self._cond:
            self._queue.append(item)
            self._open[item.run_id] = self._open.get(item.run_id, 0) + 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="result-cache-stores")
                self._thread.start()
            self._cond.notify_all()

    def wait(self, run_id: str) -> None:
        """Return once every result ``run_id`` queued in this process was answered.
        Bounded: each batch is one request under the client's timeouts."""
        with self._cond:
            self._cond.wait_for(lambda: not self._open.get(run_id))
            self._open.pop(run_id, None)

    def _take(self) -> list[Queued]:
        """The next batch: queued results for one server, within the batch bounds."""
        first = self._queue[0].cache
        batch, rest, nbytes = [], [], 0
        for item in self._queue:
            if (item.cache is first and len(batch) < MAX_BATCH_ITEMS
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
                batch = self._take()
            outcomes = _send(batch)
            for item, stored in zip(batch, outcomes, strict=True):
                try:
                    item.done(stored)
                except Exception as exc:  # a callback must never stop the queue
                    warn_once(f"result cache: after a store: {type(exc).__name__}: {exc}")
            with self._cond:
                for item in batch:
                    self._open[item.run_id] -= 1
                self._cond.notify_all()


def _send(batch: list[Queued]) -> list[bool]:
    cache = batch[0].cache
    start = time.perf_counter()
    try:
        stored = cache.put_many([(q.task_hash, q.encoded, q.seconds, q.label, q.ttl,
                                  q.run_id) for q in batch])
        STORE_SPEEDS.record(sum(q.encoded.nbytes for q in batch), time.perf_counter() - start)
        return stored
    except CacheAccessDenied as exc:
        warn_once(f"result cache: {cache.url} refused to store results ({exc.status}: "
                  f"{exc.hint}); continuing without storing")
    except ResultCacheError as exc:
        warn_once(f"result cache: storing results failed, continuing without: {exc}")
    except Exception as exc:  # a cache problem must never fail the computation
        warn_once(f"result cache: could not store {len(batch)} results: "
                  f"{type(exc).__name__}: {exc}")
    return [False] * len(batch)
