"""Which computed results are worth storing. Pure functions, no I/O.
docs/design/rewrite-and-policy.md, Policy.

A policy is consulted twice: before the run (``wraps``: may this task be stored at all,
so it is worth wrapping) and on the worker after the task ran (``may_store``, a cheap
shortcut, then ``should_store`` with the measured compute time and result size). One
class per mode; :func:`resolve_policy` turns the user's ``"auto" | "all" | "outputs" |
"none" | callable`` into one. ``auto`` also bounds the bytes a run adds
(:mod:`client_lib.policy.budget`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ..core.config import setting
from .decisions import OVER_BUDGET, Reason, StoreDecision

__all__ = [
    "LARGE_BYTES",
    "AllPolicy",
    "AutoPolicy",
    "CallablePolicy",
    "Candidate",
    "NonePolicy",
    "OutputsPolicy",
    "Policy",
    "StoreDecision",
    "resolve_policy",
]


#: Results this large are "large": ``auto`` stores them, outputs included, only when they
#: pay back, and the run report says why each was or was not stored.
LARGE_BYTES = 2**20


@dataclass(frozen=True)
class Candidate:
    """A computed result, as the policy sees it on the worker. ``kind`` is how it would
    travel (``ndarray``, ``parquet``, ``pickle``); ``load_seconds`` what loading that much of
    that kind took on this worker recently (:mod:`client_lib.policy.speeds`), ``None`` before any
    such load, with ``load_samples`` the number of loads it rests on."""

    task_hash: str
    label: str
    compute_seconds: float  # this task alone
    upstream_seconds: float  # its most expensive uncached upstream chain, where known
    nbytes: int
    is_output: bool
    kind: str = "pickle"
    load_seconds: float | None = None
    load_samples: int = 0
    # The bytes the run read so far in this process (None: a result weighed alone, outside
    # a run), and those of the intermediates it admitted.
    run_read_bytes: int | None = None
    run_admitted_bytes: int = 0


class Policy(ABC):
    """What to store. Subclasses are frozen dataclasses: they travel to the workers."""

    #: Whether the policy weighs the run (client_lib/policy/budget.py): intermediates share
    #: the run's byte bound.
    weighs_the_run: ClassVar[bool] = False

    def wraps(self, is_output: bool) -> bool:
        """Whether a task's result could be stored at all (decided before the run)."""
        return True

    def may_store(self, cost_seconds: float, is_output: bool) -> bool:
        """False when no result of a task that cost this much could be stored: the worker
        then skips measuring its size (``dask.sizeof`` and the candidate cost a few µs per
        task, as much as a trivial task itself)."""
        return True

    @abstractmethod
    def should_store(self, c: Candidate) -> bool:
        """The decision, on the worker, once the result exists."""

    def decide(self, c: Candidate) -> StoreDecision:
        """The decision, its reason and the numbers behind it (for the run report)."""
        stored = self.should_store(c)
        return StoreDecision(stored, Reason.POLICY, f"policy {type(self).__name__} says "
                             f"{'store' if stored else 'skip'}")


@dataclass(frozen=True)
class AutoPolicy(Policy):
    """Store a result when loading it later beats recomputing it from where a future
    branch would start, within the bytes the run may add.

    Recomputing costs its own time plus its uncached upstream chain (as dask/cache.py
    counts it): a link of a chain that took seconds and loads in milliseconds is exactly
    what a branch leaving the chain there reuses. Loading costs what loads of that kind
    and size took on this worker recently (``Candidate.load_seconds``), or, before any,
    the conservative default: one request's latency plus the bytes at ``throughput``
    (about what a 1 GiB load over HTTP delivers). A result cheaper than one load's
    latency is never stored (its size is not even measured). Requested outputs are
    stored unless they are large (``LARGE_BYTES``) and would not pay back: a 2 GiB array
    computed in 4 s that takes 14 s to load is recomputed, not stored.

    Intermediates that pay are stored while the run's intermediates add at most
    ``max_run_bytes`` times the bytes the run read so far, plus ``min_run_bytes``
    (client_lib/policy/budget.py; first come). Storing is off the critical path (the
    write-behind of client_lib/execution/store_queue.py), so what it costs in seconds no
    longer limits what a run keeps.
    """

    weighs_the_run: ClassVar[bool] = True
    latency: float = 0.005
    throughput: float = 150e6
    max_run_bytes: float = 1.0
    min_run_bytes: int = 64 * 2**20

    def load_seconds(self, nbytes: int) -> float:
        return self.latency + nbytes / self.throughput

    def may_store(self, cost_seconds: float, is_output: bool) -> bool:
        # Loading costs at least the latency, whatever the size.
        return is_output or cost_seconds > self.latency

    def should_store(self, c: Candidate) -> bool:
        return self.decide(c).store

    def decide(self, c: Candidate) -> StoreDecision:
        recompute = c.compute_seconds + c.upstream_seconds
        load = self.load_seconds(c.nbytes) if c.load_seconds is None else c.load_seconds
        pays = recompute > load

        def why() -> str:
            basis = (f"default {self.throughput / 1e9:.2g} GB/s, no {c.kind} load of this "
                     "size yet" if c.load_seconds is None
                     else f"learned from {c.load_samples} recent {c.kind} load(s)")
            return (f"recompute {recompute:.3g} s {'>' if pays else '<='} load {load:.3g} s "
                    f"({basis})")

        if c.is_output and not pays and c.nbytes < LARGE_BYTES:
            return StoreDecision(True, Reason.OUTPUT, lambda: f"requested output; {why()}")
        if not pays or c.is_output or c.run_read_bytes is None:
            return StoreDecision(pays, Reason.PAYS if pays else Reason.DOES_NOT_PAY, why)
        allowed = self.max_run_bytes * c.run_read_bytes + self.min_run_bytes
        if c.run_admitted_bytes + c.nbytes > allowed:
            def over() -> str:
                assert c.run_read_bytes is not None
                bound = (f"the run's intermediates {c.run_admitted_bytes / 2**20:.1f} MiB + "
                         f"this > {allowed / 2**20:.1f} MiB ({self.max_run_bytes:g} x "
                         f"{c.run_read_bytes / 2**20:.1f} MiB read + "
                         f"{self.min_run_bytes / 2**20:.0f} MiB, "
                         "result-cache.auto.max-run-bytes)")
                return f"{OVER_BUDGET}: {bound}; {why()}"
            return StoreDecision(False, Reason.OVER_BUDGET, over)
        return StoreDecision(True, Reason.PAYS, why)

@dataclass(frozen=True)
class AllPolicy(Policy):
    """Store every result."""

    def should_store(self, c: Candidate) -> bool:
        return True


@dataclass(frozen=True)
class OutputsPolicy(Policy):
    """Store the requested outputs only."""

    def wraps(self, is_output: bool) -> bool:
        return is_output

    def should_store(self, c: Candidate) -> bool:
        return c.is_output


@dataclass(frozen=True)
class NonePolicy(Policy):
    """Store nothing (loads still happen)."""

    def wraps(self, is_output: bool) -> bool:
        return False

    def should_store(self, c: Candidate) -> bool:
        return False


@dataclass(frozen=True)
class CallablePolicy(Policy):
    """Store what the user's function says, given each :class:`Candidate`."""

    func: Callable[[Candidate], bool]

    def should_store(self, c: Candidate) -> bool:
        return bool(self.func(c))


_NAMED: dict[str, type[Policy]] = {"all": AllPolicy, "outputs": OutputsPolicy,
                                   "none": NonePolicy}


def resolve_policy(policy: Any = None) -> Policy:
    """A :class:`Policy` from ``None`` (config ``result-cache.policy``), a name, a
    callable taking a :class:`Candidate`, or a :class:`Policy`."""
    if policy is None:
        policy = setting("policy")
    if isinstance(policy, Policy):
        return policy
    if callable(policy):
        return CallablePolicy(policy)
    if policy == "auto":
        return AutoPolicy(
            latency=float(setting("auto.latency")),
            throughput=float(setting("auto.throughput")),
            max_run_bytes=float(setting("auto.max-run-bytes")),
            min_run_bytes=int(setting("auto.min-run-bytes")),
        )
    if policy in _NAMED:
        return _NAMED[policy]()
    raise ValueError(f"unknown cache policy {policy!r}: use 'auto', 'all', 'outputs', "
                     "'none' or a callable taking a client_lib.Candidate")
