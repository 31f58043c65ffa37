"""Which computed results are worth storing. Pure functions, no I/O. docs/architecture.md,
The rewrite.

A policy is consulted twice: before the run (``wraps``: may this task be stored at all,
so it is worth wrapping) and on the worker after the task ran (``may_store``, a cheap
shortcut, then ``should_store`` with the measured compute time and result size). One
class per mode; :func:`resolve_policy` turns the user's ``"auto" | "all" | "outputs" |
"none" | callable`` into one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dask.config

__all__ = [
    "AllPolicy",
    "AutoPolicy",
    "CallablePolicy",
    "Candidate",
    "NonePolicy",
    "OutputsPolicy",
    "Policy",
    "resolve_policy",
]


@dataclass(frozen=True)
class Candidate:
    """A computed result, as the policy sees it on the worker."""

    task_hash: str
    label: str
    compute_seconds: float  # this task alone
    upstream_seconds: float  # its most expensive uncached upstream chain, where known
    nbytes: int
    is_output: bool


class Policy(ABC):
    """What to store. Subclasses are frozen dataclasses: they travel to the workers."""

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


@dataclass(frozen=True)
class AutoPolicy(Policy):
    """Store a result when recomputing it costs more than loading it back.

    Recomputing costs its own time plus its uncached upstream chain (as dask/cache.py
    counts it); loading costs one request's latency plus the bytes at the measured
    throughput. Requested outputs are always stored.
    """

    latency: float = 0.005
    throughput: float = 500e6

    def load_seconds(self, nbytes: int) -> float:
        return self.latency + nbytes / self.throughput

    def may_store(self, cost_seconds: float, is_output: bool) -> bool:
        # Loading costs at least the latency, whatever the size.
        return is_output or cost_seconds > self.latency

    def should_store(self, c: Candidate) -> bool:
        if c.is_output:
            return True
        return c.compute_seconds + c.upstream_seconds > self.load_seconds(c.nbytes)


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
        policy = dask.config.get("result-cache.policy", "auto")
    if isinstance(policy, Policy):
        return policy
    if callable(policy):
        return CallablePolicy(policy)
    if policy == "auto":
        return AutoPolicy(
            latency=float(dask.config.get("result-cache.auto.latency", 0.005)),
            throughput=float(dask.config.get("result-cache.auto.throughput", 500e6)),
        )
    if policy in _NAMED:
        return _NAMED[policy]()
    raise ValueError(f"unknown cache policy {policy!r}: use 'auto', 'all', 'outputs', "
                     "'none' or a callable taking a client_lib.Candidate")
