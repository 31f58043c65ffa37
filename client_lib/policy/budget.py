"""The run-level side of the ``auto`` policy (docs/architecture.md, The rewrite: Policy):
which results of a run may be stored at all (chosen before the run, from the graph's
shape) and how much storing the run can afford (kept on each worker while it runs).

- **Chain links** (:func:`mark_chain_links`, at rewrite time). A result whose only
  dependent is another store candidate (not a requested output) is a link of a chain:
  storing the chain's later step saves recomputing the link too, so storing every link is
  waste. Such specs carry ``chain_next`` and the worker skips them without measuring their
  size. A result that feeds a requested output, or several tasks, stays a candidate: it
  is what a run with an edited last step, or another branch, reuses.
- **The store budget** (:func:`decide`, on the worker). The intermediates a run stores
  may cost, in estimated store seconds (:meth:`AutoPolicy.store_seconds`), at most
  ``result-cache.auto.store-budget`` (a fraction) of the seconds the run's tasks have
  computed so far. Per process, shared by its threads: on a cluster each worker weighs its
  own compute against its own stores. Results are admitted first come; since the budget
  grows with the run, later (downstream) results find what earlier ones left. Requested
  outputs keep their own rule and do not use the budget.

Per-task cost: one dict update per computed task (:func:`add_compute`, no lock: a lost
update under a thread race only lowers the budget). The lock is taken only for results
the policy weighs with their size.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import replace

from dask._task_spec import GraphNode

from .modes import Candidate, Policy

__all__ = ["add_compute", "decide", "mark_chain_links", "pop_budget"]

Key = Hashable
_RUNS = 1000  # runs remembered per process; forgetting one only restarts its budget
_compute: dict[str, float] = {}  # run id -> seconds its tasks computed in this process
_spent: dict[str, float] = {}  # run id -> estimated store seconds admitted here
_lock = threading.Lock()


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


def add_compute(run_id: str, seconds: float) -> None:
    """Count a computed task's seconds towards its run's budget in this process."""
    compute = _compute
    before = compute.get(run_id)
    if before is None:
        if len(compute) >= _RUNS:
            with _lock:
                compute.clear()
                _spent.clear()
        before = 0.0
    compute[run_id] = before + seconds


def decide(run_id: str, policy: Policy, c: Candidate) -> tuple[bool, str]:
    """The policy's decision on ``c``, given what the run computed and admitted so far in
    this process; an admitted result's store seconds are charged to the run at once."""
    if not policy.weighs_the_run:
        return policy.decide(c)
    with _lock:
        c = replace(c, run_compute_seconds=_compute.get(run_id, 0.0),
                    run_store_seconds=_spent.get(run_id, 0.0))
        stored, why = policy.decide(c)
        if stored:
            cost = policy.budget_seconds(c)
            if cost:
                _spent[run_id] = c.run_store_seconds + cost
    return stored, why


def pop_budget(run_id: str) -> dict[str, float]:
    """What ``run_id`` computed and spent on stores in this process (and forget it)."""
    with _lock:
        compute = _compute.pop(run_id, None)
        spent = _spent.pop(run_id, 0.0)
    if compute is None:
        return {}
    return {"compute-seconds": compute, "store-seconds": spent}
