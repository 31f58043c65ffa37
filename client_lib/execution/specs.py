"""What a rewritten graph's cache tasks carry: :class:`StoreRun` (shared by every store of
one run, pickled once per graph) and :class:`StoreSpec` (one per store wrapper)."""

from __future__ import annotations

from dataclasses import dataclass

from ..policy.modes import Policy
from ..transport.interface import Transport
from .tally import TALLIES, RunTally

__all__ = ["StoreRun", "StoreSpec"]


@dataclass(frozen=True)
class StoreRun:
    """What every store of one ``cached_compute`` call shares; pickled once per graph."""

    cache: Transport
    policy: Policy
    run_id: str  # also the holder of this run's leases
    lease_ttl: float = 60.0
    lease_wait: float = 60.0  # the most a task waits for another's lease
    # Small results go through the process's StoreQueue (batched, group-committed); the
    # caller then waits for them with flush_stores (cached_compute on a scheduler it can
    # reach every executing process of: threads, sync, a distributed client).
    batch: bool = False

    def tally(self) -> RunTally:
        """What this run's tasks did in this process (:mod:`.tally`)."""
        return TALLIES.of(self.run_id)


@dataclass(slots=True)
class StoreSpec:
    """What a store wrapper needs to know about its task."""

    run: StoreRun
    task_hash: str
    label: str
    is_output: bool
    dep_hashes: tuple[str, ...]
    ttl: float | None = None  # seconds the entry lives; None: until evicted
    overwrite: bool = False  # refresh: replace the entry, whatever the policy says
    lease: str | None = None  # "held": this run leased the hash; "wait": another run did
    # What its cost is learned under (client_lib/policy/costs.py): the label and the code
    # fingerprint of its function; "": the label alone.
    cost_key: str = ""

    def __post_init__(self) -> None:
        if not self.cost_key:
            self.cost_key = self.label
