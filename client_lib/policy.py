"""Which computed results are worth storing. Pure functions, no I/O. DESIGN.md section 3.

A policy is consulted twice: before the run (``wraps``: may this task be stored at all,
so it is worth wrapping) and on the worker after the task ran (``should_store``, with the
measured compute time and result size).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dask.config

__all__ = ["AutoPolicy", "Candidate", "Policy", "resolve_policy"]


@dataclass(frozen=True)
class Candidate:
    """A computed result, as the policy sees it on the worker."""

    task_hash: str
    label: str
    compute_seconds: float  # this task alone
    upstream_seconds: float  # its most expensive uncached upstream chain, where known
    nbytes: int
    is_output: bool


@dataclass(frozen=True)
class Policy:
    """``mode``: ``"all"``, ``"outputs"``, ``"none"``, or ``"callable"`` with ``func``."""

    mode: str
    func: Callable[[Candidate], bool] | None = None

    def wraps(self, is_output: bool) -> bool:
        if self.mode == "none":
            return False
        if self.mode == "outputs":
            return is_output
        return True

    def may_store(self, cost_seconds: float, is_output: bool) -> bool:
        """False when no result of a task that cost this much could be stored: the worker
        then skips measuring its size (``dask.sizeof`` and the candidate cost a few µs per
        task, as much as a trivial task itself)."""
        return True

    def should_store(self, c: Candidate) -> bool:
        if self.mode == "callable":
            assert self.func is not None
            return bool(self.func(c))
        return self.wraps(c.is_output)


@dataclass(frozen=True)
class AutoPolicy(Policy):
    """Store a result when recomputing it costs more than loading it back.

    Recomputing costs its own time plus its uncached upstream chain (as dask/cache.py
    counts it); loading costs one request's latency plus the bytes at the measured
    throughput. Requested outputs are always stored.
    """

    mode: str = "auto"
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


def resolve_policy(policy: Any = None) -> Policy:
    """A :class:`Policy` from ``None`` (config ``result-cache.policy``), a name, a
    callable taking a :class:`Candidate`, or a :class:`Policy`."""
    if policy is None:
        policy = dask.config.get("result-cache.policy", "auto")
    if isinstance(policy, Policy):
        return policy
    if callable(policy):
        return Policy("callable", policy)
    if policy == "auto":
        return AutoPolicy(
            latency=float(dask.config.get("result-cache.auto.latency", 0.005)),
            throughput=float(dask.config.get("result-cache.auto.throughput", 500e6)),
        )
    if policy in ("all", "outputs", "none"):
        return Policy(policy)
    raise ValueError(f"unknown cache policy {policy!r}: use 'auto', 'all', 'outputs', "
                     "'none' or a callable taking a client_lib.Candidate")
