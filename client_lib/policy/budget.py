"""The run-level side of the ``auto`` policy (docs/design/rewrite-and-policy.md, The run's
byte bound): how many bytes one run may add to the cache.

Every result the policy weighs pays on its own merits (a load beats recomputing it from
where a branch would start, :class:`~client_lib.policy.modes.AutoPolicy`); links of chains
are candidates like any other, since they are what a branch that leaves the chain in the
middle reuses. What bounds a run is bytes, not seconds: its intermediates may add at most
``result-cache.auto.max-run-bytes`` times the bytes of the results it weighed or loaded so
far (:class:`RunBudget`), first come, and the server's eviction keeps the cache within its
cap. Storing costs the run nothing on its critical path (a bounded write-behind,
client_lib/execution/store_queue.py), so there is no longer a share of compute seconds to
protect. Requested outputs keep their own rule and do not use the bound.

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
    """One run's bytes in one process: those of the results it weighed or loaded, and those
    of the intermediates admitted to store. Thread safe."""

    def __init__(self) -> None:
        self.seen_bytes = 0  # weighed (computed and measured) or loaded here
        self.admitted_bytes = 0  # intermediates the policy chose to store
        self._lock = threading.Lock()

    def add_read(self, nbytes: int) -> None:
        """Count a loaded result's bytes (no lock: a lost update only lowers the bound)."""
        self.seen_bytes += nbytes

    def decide(self, policy: Policy, c: Candidate) -> StoreDecision:
        """The policy's decision on ``c``, given the run's bytes here so far (``c``'s own
        included); an admitted intermediate's bytes are charged to the run at once."""
        if not policy.weighs_the_run:
            return policy.decide(c)
        with self._lock:
            self.seen_bytes += c.nbytes
            c = replace(c, run_seen_bytes=self.seen_bytes,
                        run_admitted_bytes=self.admitted_bytes)
            decision = policy.decide(c)
            if decision.store and not c.is_output:
                self.admitted_bytes += c.nbytes
        return decision

    def merge(self, other: RunBudget) -> None:
        """Add another process's bytes of the same run (a cluster's workers)."""
        self.seen_bytes += other.seen_bytes
        self.admitted_bytes += other.admitted_bytes

    def __getstate__(self) -> dict:
        return {"seen_bytes": self.seen_bytes, "admitted_bytes": self.admitted_bytes}

    def __setstate__(self, state: dict) -> None:
        self.__init__()
        self.seen_bytes = state["seen_bytes"]
        self.admitted_bytes = state["admitted_bytes"]
