"""The run-level side of the ``auto`` policy (docs/design/rewrite-and-policy.md, The run's
byte bound): how many bytes one run may add to the cache.

Every result the policy weighs pays on its own merits (a load beats recomputing it from
where a branch would start, :class:`~client_lib.policy.modes.AutoPolicy`); links of chains
are candidates like any other, since they are what a branch that leaves the chain in the
middle reuses. What bounds a run is bytes, not seconds: its intermediates may add at most
``result-cache.auto.max-run-bytes`` times the bytes it read so far, plus
``result-cache.auto.min-run-bytes`` (:class:`RunBudget`; first come), and the server's
eviction keeps the cache within its cap. What a run read: the results it loaded, and those
of its tasks with nothing stored or loaded upstream (the tasks that read its inputs: chunks
of an HDF5 file, of a Zarr store). Storing costs the run nothing on its critical path (a
bounded write-behind, client_lib/execution/store_queue.py), so there is no longer a share
of compute seconds to protect. Requested outputs keep their own rule and do not use the bound.

Per process, shared by its threads: on a cluster each worker weighs what it computed.
Each run's :class:`RunBudget` lives in its tally (client_lib/execution/tally.py).
"""

from __future__ import annotations

import threading
from dataclasses import replace

from .decisions import StoreDecision
from .modes import Candidate, Policy

__all__ = ["RunBudget"]


class RunBudget:
    """One run's bytes in one process: those it read, and those of the intermediates
    admitted to store. Thread safe."""

    def __init__(self) -> None:
        self.read_bytes = 0  # loaded, or computed by a task with nothing upstream
        self.admitted_bytes = 0  # intermediates the policy chose to store
        self._lock = threading.Lock()

    def add_read(self, nbytes: int) -> None:
        """Count a result the run read (no lock: a lost update only lowers the bound)."""
        self.read_bytes += nbytes

    def decide(self, policy: Policy, c: Candidate, reads: bool = False) -> StoreDecision:
        """The policy's decision on ``c`` (``reads``: its task read an input, its bytes
        count as read first), given the run's bytes here so far; an admitted
        intermediate's bytes are charged to the run at once."""
        if not policy.weighs_the_run:
            return policy.decide(c)
        with self._lock:
            if reads:
                self.read_bytes += c.nbytes
            c = replace(c, run_read_bytes=self.read_bytes,
                        run_admitted_bytes=self.admitted_bytes)
            decision = policy.decide(c)
            if decision.store and not c.is_output:
                self.admitted_bytes += c.nbytes
        return decision

    def merge(self, other: RunBudget) -> None:
        """Add another process's bytes of the same run (a cluster's workers)."""
        self.read_bytes += other.read_bytes
        self.admitted_bytes += other.admitted_bytes

    def __getstate__(self) -> dict:
        return {"read_bytes": self.read_bytes, "admitted_bytes": self.admitted_bytes}

    def __setstate__(self, state: dict) -> None:
        self.__init__()
        self.read_bytes = state["read_bytes"]
        self.admitted_bytes = state["admitted_bytes"]
