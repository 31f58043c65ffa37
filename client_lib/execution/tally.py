"""What one run's tasks did in one process: its tally (docs/design/rewrite-and-policy.md,
"Decisions and the report").

A :class:`RunTally` counts the results the run stored (and their bytes), per function what
it stored and skipped and why (with bytes), the large results it weighed and why each was
or was not stored, the results its write-behind dropped, the seconds its stores took in
the background, the tasks it waited for and loaded, its byte bound
(client_lib/policy/budget.py) and whether its server was lost here (then its later stores
skip the upload). In the user's process it is the run's own
(``plan.run.Run`` opens it and takes it at the end); a worker process, which receives only
the pickled tasks, finds it by run id in :data:`TALLIES`, this process's one registry of
tallies, and hands it over when the run asks (``plan.schedulers.finish_on_workers``).
Thread safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..policy.budget import RunBudget
from ..policy.decisions import Reason, StoreDecision
from ..policy.modes import LARGE_BYTES

__all__ = ["TALLIES", "RunTally", "Tallies"]

_DECISIONS_KEPT = 100  # lines of "why (not) stored" per run and process
_RUNS_KEPT = 1000  # tallies per process; the oldest is forgotten first (a run never asked)
_FUNCTIONS_KEPT = 200  # labels counted per run and process; the rest as one
_SHORT_OF = {r: StoreDecision(False, r, "").short for r in Reason}


class RunTally:
    """One run's counts in one process."""

    def __init__(self) -> None:
        self.stored = 0
        self.stored_bytes = 0
        self.over_budget = 0
        self.dropped = 0  # chosen, but the write-behind's buffer was full
        self.store_seconds = 0.0  # the run's stores, in the background (or not)
        self.unconfirmed = 0  # queued, not answered within result-cache.store-wait
        self.buffer_peak = 0  # the most bytes pending in the write-behind at a submit
        self.waited_loaded = 0
        # label -> outcome ("stored" or a reason in a few words) -> [results, bytes]
        self.functions: dict[str, dict[str, list[int]]] = {}
        self.stored_hashes: set[str] = set()
        self.decisions: list[str] = []  # the report's lines for large results
        self.budget = RunBudget()
        self.lost: str | None = None  # why its server failed a store here
        self._lock = threading.Lock()

    @property
    def empty(self) -> bool:
        """Whether nothing was counted (no store, no decision, no compute)."""
        return not (self.stored or self.over_budget or self.waited_loaded or self.functions)

    def decided(self, label: str, nbytes: int, decision: StoreDecision) -> None:
        """A result weighed: counted by its reason (a chosen one once its store is
        answered, :meth:`outcome`), and its line kept if it is large."""
        with self._lock:
            if decision.reason is Reason.OVER_BUDGET:
                self.over_budget += 1
            if not decision.store:
                self._count(label, decision.short, nbytes)
            if nbytes >= LARGE_BYTES and len(self.decisions) < _DECISIONS_KEPT:
                self.decisions.append(decision.line(label, nbytes))

    def outcome(self, label: str, nbytes: int, reason: Reason) -> None:
        """A chosen result that was not stored after all (dropped, failed)."""
        with self._lock:
            if reason in (Reason.DROPPED, Reason.PRESSURE):
                self.dropped += 1
            self._count(label, _SHORT_OF[reason], nbytes)

    def stored_one(self, task_hash: str, nbytes: int, label: str = "") -> None:
        with self._lock:
            self.stored += 1
            self.stored_bytes += nbytes
            self.stored_hashes.add(task_hash)
            self._count(label, "stored", nbytes)

    def _count(self, label: str, outcome: str, nbytes: int) -> None:
        by_outcome = self.functions.get(label)
        if by_outcome is None:
            if len(self.functions) >= _FUNCTIONS_KEPT:
                label = "(other functions)"
            by_outcome = self.functions.setdefault(label, {})
        counts = by_outcome.setdefault(outcome, [0, 0])
        counts[0] += 1
        counts[1] += nbytes

    def waited_and_loaded(self) -> None:
        with self._lock:
            self.waited_loaded += 1

    def lose(self, reason: str) -> None:
        """The server failed a store: later stores of the run skip the upload here."""
        if self.lost is None:
            self.lost = reason

    def merge(self, other: RunTally) -> None:
        """Add another process's tally of the same run (a cluster's workers)."""
        with self._lock:
            self.stored += other.stored
            self.stored_bytes += other.stored_bytes
            self.over_budget += other.over_budget
            self.dropped += other.dropped
            self.store_seconds += other.store_seconds
            self.unconfirmed += other.unconfirmed
            self.buffer_peak = max(self.buffer_peak, other.buffer_peak)
            self.waited_loaded += other.waited_loaded
            for label, by_outcome in other.functions.items():
                for outcome, (n, nbytes) in by_outcome.items():
                    counts = self.functions.setdefault(label, {}).setdefault(outcome, [0, 0])
                    counts[0] += n
                    counts[1] += nbytes
            self.stored_hashes |= other.stored_hashes
            self.decisions += other.decisions
            self.budget.merge(other.budget)
            self.lost = self.lost or other.lost

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


class Tallies:
    """This process's tallies by run id, at most ``_RUNS_KEPT`` of them. Thread safe."""

    def __init__(self) -> None:
        self._runs: OrderedDict[str, RunTally] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, run_id: str) -> RunTally:
        """The run's tally here, made on first use."""
        tally = self._runs.get(run_id)
        if tally is None:
            with self._lock:
                tally = self._runs.get(run_id)
                if tally is None:
                    tally = self._runs[run_id] = RunTally()
                    while len(self._runs) > _RUNS_KEPT:  # forgetting only loses counts
                        self._runs.popitem(last=False)
        return tally

    def take(self, run_id: str) -> RunTally:
        """The run's tally here (empty if it counted nothing), forgotten here."""
        with self._lock:
            tally = self._runs.pop(run_id, None)
        return tally if tally is not None else RunTally()


#: The tallies of the runs whose tasks ran in this process.
TALLIES = Tallies()
