"""In-flight deduplication: a lease per task hash while one run computes it.

A run leases, right after its lookup, the hashes of the tasks it will compute and may
store (docs/protocol.md, "Leases") and that are worth it: a task whose function took less
than one load's latency (``result-cache.auto.latency``) the last times it ran in this
process is not leased, since waiting for another run's result and loading it would cost
more than computing it, and a lease costs ~5-20 µs in Redis plus its release. Tasks never
measured here are leased. No leases either when more than ``result-cache.lease-limit`` of
them remain (default 10000; 0 turns leases off): a wide graph would pay more for them than
deduplication could save. Where another
run holds the lease, the task waits for that run's result instead of computing it too: it
polls the lease, loads the entry once it is stored, takes the lease over if its holder let
go (or died: a lease expires ``lease-ttl`` seconds after its last renewal), and computes
itself after the holder's estimate + 30 s, and never later than ``result-cache.lease-wait``
seconds (default 60): the estimate is the holder's word, so it can shorten a wait, never
lengthen it (a holder claiming 1e7 s keeps nobody waiting; the server caps it as well).

No deadlock: a run takes all its leases in one atomic request before any of its tasks
runs, and its own leases never make it wait, so it waits only for runs that leased before
it, which never wait for it (no cycle). Taking over a lease whose holder let go is
followed by computing, never by a wait; every wait is bounded. On a ``distributed`` worker
a waiting task leaves the worker's thread pool (``secede``) so it never starves the tasks
it waits for.

The computing side (:class:`LeaseKeeper`, one per process) renews the leases of running
tasks every third of their TTL and releases those whose result was not stored (a store
releases its lease on the server), in batches from one background thread, so a task
that finishes quickly costs no request at all.
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.config import setting
from ..core.errors import ResultCacheError
from ..core.singleton import process_singleton
from ..policy.costs import estimate, expected_seconds
from ..wire.bounds import MAX_LEASE_SECONDS, MIN_LEASE_SECONDS

if TYPE_CHECKING:
    from ..transport.interface import Transport
    from .specs import StoreRun, StoreSpec

__all__ = ["LeaseKeeper", "Waited", "lease_ttl", "lease_wait", "release_leases",
           "take_leases", "wait_for_holder"]

logger = logging.getLogger("client_lib")

_GRACE_SECONDS = 30.0
_DEFAULT_WAIT = 60.0
_POLL_MIN, _POLL_MAX = 0.02, 0.2


def lease_ttl() -> float:
    """``result-cache.lease-ttl`` in seconds, checked against the server's bounds."""
    ttl = float(setting("lease-ttl"))
    if not MIN_LEASE_SECONDS <= ttl <= MAX_LEASE_SECONDS:
        raise ValueError("result-cache.lease-ttl must be within "
                         f"{MIN_LEASE_SECONDS}..{MAX_LEASE_SECONDS} s, "
                         f"not {ttl}")
    return ttl


def lease_wait() -> float:
    """``result-cache.lease-wait`` in seconds: the most a task waits for another's lease."""
    value = setting("lease-wait")
    if value is None:  # the old "the holder's estimate + 30 s": bounded by our default now
        value = _DEFAULT_WAIT
    from dask.utils import parse_timedelta

    seconds = float(parse_timedelta(value, "s"))
    if seconds < 0:
        raise ValueError(f"result-cache.lease-wait must be >= 0, not {value!r}")
    return seconds


# -- the user's process ------------------------------------------------------------------


def take_leases(run: StoreRun, specs: Iterable[StoreSpec],
                found: Set[str] = frozenset()) -> set[str]:
    """Lease the hashes of the tasks this run may store; mark each spec ``"held"`` (ours)
    or ``"wait"`` (another run computes it, or stored it since our lookup). ``found``:
    hashes the lookup found that this run computes anyway (refreshed, or distrusted after
    a failed load): never waited for. Returns the hashes leased. A server that cannot
    lease changes nothing (every task computes)."""
    floor = float(setting("auto.latency"))
    specs = [spec for spec in specs
             if (seconds := expected_seconds(spec.cost_key)) is None or seconds > floor]
    wanted = {spec.task_hash for spec in specs}
    limit = int(setting("lease-limit"))
    if not wanted or len(wanted) > limit:
        if wanted:  # a wide graph of (mostly) small tasks: leasing costs more than it saves
            logger.info("result cache: %d tasks to compute, more than result-cache."
                        "lease-limit (%d); computing without deduplication", len(wanted),
                        limit)
        return set()
    try:
        granted, stored, held = run.cache.acquire_leases(wanted, run.run_id, run.lease_ttl)
    except ResultCacheError as exc:
        logger.info("result cache: no leases (%s); computing without deduplication", exc)
        return set()
    others = (stored - found) | held
    for spec in specs:
        if spec.task_hash in granted:
            spec.lease = "held"
        elif spec.task_hash in others:
            spec.lease = "wait"
    return granted


def release_leases(run: StoreRun, hashes: Iterable[str]) -> None:
    """Give back leases (a failed run's unfinished tasks). Never raises."""
    hashes = list(hashes)
    if not hashes:
        return
    try:
        run.cache.release_leases(hashes, run.run_id)
    except ResultCacheError as exc:
        logger.info("result cache: could not release %d leases (%s); they expire",
                    len(hashes), exc)


# -- the workers --------------------------------------------------------------------------


@dataclass(frozen=True)
class Waited:
    """How a wait for another run's lease ended: ``loaded`` with ``value``, or not (then
    ``held`` says whether this task now holds the lease and computes under it)."""

    loaded: bool
    value: Any = None
    held: bool = False


def wait_for_holder(run: StoreRun, task_hash: str, label: str,
                    load: Callable[[Transport, str, str], Any]) -> Waited:
    """Wait (bounded) for the run leasing ``task_hash`` to store it; see the module."""
    cache = run.cache
    start = time.monotonic()
    delay = _POLL_MIN
    seceded = _secede()
    try:
        while True:
            try:
                status = cache.lease_status(task_hash)
                if status["stored"]:
                    return Waited(True, load(cache, task_hash, label))
                if not status["leased"]:
                    granted, stored, _ = cache.acquire_leases([task_hash], run.run_id,
                                                              run.lease_ttl)
                    if granted:
                        return Waited(False, held=True)
                    if stored:
                        return Waited(True, load(cache, task_hash, label))
            except ResultCacheError as exc:
                logger.info("result cache: waiting for %s failed (%s); computing it",
                            task_hash, exc)
                return Waited(False)
            # The holder's estimate may shorten the wait, never lengthen it past ours.
            limit = min(run.lease_wait,
                        float(status.get("estimate") or 0.0) + _GRACE_SECONDS)
            if time.monotonic() - start >= limit:
                return Waited(False)
            time.sleep(delay)
            delay = min(delay * 1.5, _POLL_MAX)
    finally:
        if seceded:
            from distributed import rejoin

            rejoin()


def _secede() -> bool:
    """Leave a ``distributed`` worker's thread pool while waiting; False elsewhere."""
    if "distributed" not in sys.modules:
        return False
    from distributed import get_worker, secede

    try:
        get_worker()
    except ValueError:
        return False
    secede()
    return True


@dataclass
class _Held:
    cache: Transport
    holder: str
    ttl: float
    label: str
    renewed: float


@process_singleton
class LeaseKeeper:
    """Renews the leases of running tasks and releases those not stored, from one
    background thread per process. Thread safe; ``LeaseKeeper.get()`` returns the
    instance."""

    get: Callable[[], LeaseKeeper]

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._running: dict[tuple[str, str], _Held] = {}  # (holder, hash) -> lease
        self._released: dict[tuple[Transport, str], set[str]] = {}
        self._thread: threading.Thread | None = None
        atexit.register(self.flush)

    def started(self, run: StoreRun, task_hash: str, label: str) -> None:
        with self._lock:
            self._running[(run.run_id, task_hash)] = _Held(
                run.cache, run.run_id, run.lease_ttl, label, time.monotonic())
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="result-cache-leases")
                self._thread.start()

    def finished(self, run: StoreRun, task_hash: str, stored: bool) -> None:
        with self._lock:
            self._running.pop((run.run_id, task_hash), None)
            if not stored:  # sent in a batch by the thread, within a quarter second
                self._released.setdefault((run.cache, run.run_id), set()).add(task_hash)

    def flush(self) -> None:
        """Send the pending releases now."""
        with self._lock:
            pending, self._released = self._released, {}
        for (cache, holder), hashes in pending.items():
            try:
                cache.release_leases(sorted(hashes), holder)
            except ResultCacheError as exc:
                logger.info("result cache: lease release failed (%s); they expire", exc)

    def _due(self) -> dict[tuple[Transport, str, float], dict[str, float | None]]:
        now = time.monotonic()
        due: dict[tuple[Transport, str, float], dict[str, float | None]] = {}
        for (holder, task_hash), held in self._running.items():
            if now - held.renewed >= held.ttl / 3:
                held.renewed = now
                due.setdefault((held.cache, holder, held.ttl), {})[task_hash] = (
                    estimate(held.label))
        return due

    def _loop(self) -> None:
        while True:
            with self._lock:
                self._lock.wait(timeout=0.25)
                due = self._due()
            self.flush()
            for (cache, holder, ttl), estimates in due.items():
                try:
                    cache.renew_leases(estimates, holder, ttl)
                except ResultCacheError as exc:
                    logger.info("result cache: lease renewal failed (%s)", exc)
