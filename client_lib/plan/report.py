"""What one ``cached_compute`` call did: tasks, hits, loads, culls, stores, volatile tasks.

Printed with ``explain=True``, logged at INFO by the ``client_lib`` logger, and available
as :func:`last_report` so nothing about the cache is ever silent.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field

__all__ = ["CacheReport", "last_report"]

_local = threading.local()


@dataclass
class CacheReport:
    """Counts for one run. ``stored`` is ``None`` when the stores happened in other
    processes (process pool, distributed workers) and were not counted here.

    Every count is of tasks: ``cacheable`` tasks may be looked up and stored, ``hits`` of
    them were found in the cache (tasks that compute the same thing share one entry).

    ``loaded_keys`` and ``computed_keys`` name the tasks behind ``loaded`` and
    ``computed``, for debugging misses: keys of the graph as hashed, that is after
    unfusing (an operation that Dask fused into another task's key ``k`` appears as
    ``"<name>~k"``). Tasks in neither list were culled (or are not tasks: data, aliases).
    """

    cache_url: str | None = None
    namespace: str = "default"
    tasks: int = 0
    cacheable: int = 0
    hits: int = 0
    loaded: int = 0
    culled: int = 0
    computed: int = 0
    store_candidates: int = 0
    stored: int | None = None
    volatile: int = 0
    volatile_reasons: Counter = field(default_factory=Counter)
    untrusted: int = 0  # entries not loaded for a missing or wrong signature
    leased: int = 0  # tasks this run leased: another run needing them waits for them here
    waited: int = 0  # tasks another run was computing when this one started
    waited_loaded: int = 0  # of those, loaded once the other run stored them
    fallback: str | None = None  # why the cache was (partly) bypassed
    not_storing: str | None = None  # why this run stores nothing though it may load
    retried: list[str] = field(default_factory=list)  # hashes that failed to load
    # why each large result (>= 1 MiB) was or was not stored, where the policy decided
    store_decisions: list[str] = field(default_factory=list)
    stored_bytes: int = 0  # of the results stored (as encoded, or as measured)
    # Cheap tasks left without a store wrapper (client_lib/plan/rewrite.py); results that
    # paid but did not fit the run's byte bound (``auto``, client_lib/policy/budget.py); results
    # chosen but dropped by a full write-behind buffer, or not answered within
    # result-cache.store-wait (client_lib/execution/store_queue.py).
    unwrapped: int = 0
    over_budget: int = 0
    dropped: int = 0
    unconfirmed: int = 0
    store_seconds: float = 0.0  # the stores' own seconds, mostly in the background
    buffer_peak: int = 0  # the most bytes the write-behind held at once
    # (bytes the run's intermediates were admitted to add, bytes the bound allowed)
    run_bytes: tuple[int, int] | None = None
    # per function (label): outcome ("stored", or why not, in a few words) -> [n, bytes]
    functions: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    loaded_keys: list[Hashable] = field(default_factory=list)
    computed_keys: list[Hashable] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    def __str__(self) -> str:
        if self.stored is None:  # a process pool: its stores are not counted here
            stored = f"{self.store_candidates} store candidates (stores not counted)"
        else:
            stored = (f"stored {self.stored} of {self.store_candidates} candidates "
                      f"({self.stored_bytes / 2**20:.1f} MiB)")
        lines = [
            f"result cache {self.cache_url or '(none)'} namespace={self.namespace!r}",
            f"  tasks {self.tasks}: cacheable {self.cacheable}, hits {self.hits}, "
            f"loaded {self.loaded}, culled {self.culled}, computed {self.computed}, "
            f"{stored}, "
            f"volatile {self.volatile}",
        ]
        if self.not_storing:
            lines.append(f"  stores nothing: {self.not_storing}")
        if self.over_budget or self.dropped or self.unconfirmed:
            lines.append(f"  not stored: {self.over_budget} over the run's byte bound, "
                         f"{self.dropped} dropped (store buffer full), {self.unconfirmed} "
                         "not answered within result-cache.store-wait")
        if self.run_bytes is not None:
            admitted, allowed = self.run_bytes
            lines.append(f"  run bytes: intermediates {admitted / 2**20:.1f} MiB of "
                         f"{allowed / 2**20:.1f} MiB allowed (result-cache.auto.max-run-bytes "
                         "x what it read, + min-run-bytes)")
        if self.store_seconds or self.buffer_peak:
            lines.append(f"  stores: {self.store_seconds:.3g} s in the background, buffer "
                         f"peak {self.buffer_peak / 2**20:.1f} MiB")
        for label, outcomes in _by_bytes(self.functions)[:_FUNCTIONS_SHOWN]:
            parts = ", ".join(f"{outcome} {n} ({nbytes / 2**20:.1f} MiB)" for outcome,
                              (n, nbytes) in sorted(outcomes.items()))
            lines.append(f"  {label}: {parts}")
        for reason, n in self.volatile_reasons.most_common(10):
            lines.append(f"  volatile x{n}: {reason}")
        if self.untrusted:
            lines.append(f"  untrusted {self.untrusted}: entries without a valid signature "
                         "for result-cache.signing-key (or trusted-keys), recomputed (not "
                         "loaded)")
        if self.waited:
            lines.append(f"  waited for {self.waited} tasks other runs were computing: "
                         f"{self.waited_loaded} loaded, the others computed here")
        if self.retried:
            lines.append(f"  entries that failed to load and were recomputed: "
                         f"{', '.join(self.retried)}")
        for line in self.store_decisions[:20]:
            lines.append(f"  large result {line}")
        if self.fallback:
            lines.append(f"  cache bypassed: {self.fallback}")
        if self.seconds:
            phases = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in self.seconds.items())
            lines.append(f"  time: {phases}")
        return "\n".join(lines)


_FUNCTIONS_SHOWN = 12


def _by_bytes(functions: dict[str, dict[str, list[int]]]) -> list:
    """Functions with the most bytes weighed first."""
    return sorted(functions.items(), key=lambda item: -sum(b for _, b in item[1].values()))


def set_last_report(report: CacheReport) -> None:
    _local.report = report


def last_report() -> CacheReport | None:
    """The report of the most recent ``cached_compute`` call in this thread."""
    return getattr(_local, "report", None)
