"""The run-level side of the ``auto`` policy (docs/design/rewrite-and-policy.md, The store budget):
which results of a run may be stored at all (chosen before the run, from the graph's
shape) and how much storing the run can afford (kept on each worker while it runs).

- **Chain links** (:func:`mark_chain_links`, at rewrite time). A result whose only
  dependent is another store candidate (not a requested output) is a link of a chain:
  storing the chain's later step saves recomputing the link too, so storing every link is
  waste. Such specs carry ``chain_next`` and the worker skips them without measuring their
  size. A result that feeds a requested output, or several tasks, stays a candidate: it
  is what a run with an edited last step, or another branch, reuses.
- **The store budget** (:class:`RunBudget`, on the worker). The intermediates a run stores
  may cost, in estimated store seconds (:meth:`AutoPolicy.store_seconds`), at most
  ``result-cache.auto.store-budget`` (a fraction) of the seconds the run's tasks have
  computed so far. Per process, shared by its threads: on a cluster each worker weighs its
  own compute against its own stores. Results are admitted first come; since the budget
  grows with the run, later (downstream) results find what earlier ones left. Requested
  outputs keep their own rule and do not use the budget.

Per-task cost: one float update per computed task (:meth:`RunBudget.add_compute`, no
lock: a lost update under a thread race only lowers the budget). The lock is taken only
for results the policy weighs with their size. Each run's :class:`RunBudget` lives in its
tally (client_lib/execution/tally.py), one per run and process.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import replace

from dask._task_spec import GraphNode

from .decisions import StoreDecision
from .modes import Candidate, Policy

__all__ = ["RunBudget", "mark_chain_links"]

Key = Hashable


def mark_chain_links(specs: dict, kept: dict[Key, GraphNode]) -> int:
    """Set ``chain_next`` (the later step's label) on the store specs whose only dependent
    among the ``kept`` tasks is a store candidate that is not a requested output; returns
    how many. Outputs and overwrites (refresh) are never marked."""
    only: dict[Key, Key | None] = {}  # key -> its only dependent; None: several
    for key, node in kept.items():
        for dep in node.dependencies:
            only[dep] = key if dep not in only else None
    marked = 0
    for key, spec in specs.items():
        if spec.is_output or spec.overwrite:
            continue
        later = specs.get(only.get(key))
        if later is not None and not later.is_output:
            spec.chain_next = later.label
            marked += 1
    return marked


class RunBudget:
    """One run's store budget in one process: the seconds its tasks computed here and the
    estimated store seconds admitted so far. Thread safe."""

    def __init__(self) -> None:
        self.compute_seconds: float | None = None  # None: no task computed here yet
        self.store_seconds = 0.0
        self._lock = threading.Lock()

    def add_compute(self, seconds: float) -> None:
        """Count a computed task's seconds (no lock: a lost update only lowers the budget)."""
        self.compute_seconds = (self.compute_seconds or 0.0) + seconds

    def decide(self, policy: Policy, c: Candidate) -> StoreDecision:
        """The policy's decision on ``c``, given what the run computed and admitted so far
        here; an admitted result's store seconds are charged to the run at once."""
        if not policy.weighs_the_run:
            return policy.decide(c)
        with self._lock:
            c = replace(c, run_compute_seconds=self.compute_seconds or 0.0,
                        run_store_seconds=self.store_seconds)
            decision = policy.decide(c)
            if decision.store:
                cost = policy.budget_seconds(c)
                if cost:
                    self.store_seconds = c.run_store_seconds + cost
        return decision

    def merge(self, other: RunBudget) -> None:
        """Add another process's budget of the same run (a cluster's workers)."""
        if other.compute_seconds is not None:
            self.compute_seconds = (self.compute_seconds or 0.0) + other.compute_seconds
        self.store_seconds += other.store_seconds

    def __getstate__(self) -> dict:
        return {"compute_seconds": self.compute_seconds, "store_seconds": self.store_seconds}

    def __setstate__(self, state: dict) -> None:
        self.__init__()
        self.compute_seconds = state["compute_seconds"]
        self.store_seconds = state["store_seconds"]
