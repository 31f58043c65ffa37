"""A store decision as data: whether a computed result is stored, the reason (an enum the
run's tally counts by) and the numbers behind it (the text the run report prints). Made
once, where the result is weighed, and never re-read from its text."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["OVER_BUDGET", "Reason", "StoreDecision"]

#: Why an intermediate that pays was not stored (the report's wording).
OVER_BUDGET = "over the run's byte bound"


class Reason(enum.Enum):
    """Why a result was or was not stored."""

    REFRESH = "refresh: the entry is replaced, whatever the policy says"
    POLICY = "the policy's own rule (all, outputs, none, a callable)"
    OUTPUT = "a requested output that is not large"
    PAYS = "recomputing costs more than a load"
    DOES_NOT_PAY = "a load costs at least as much as recomputing"
    OVER_BUDGET = "it pays but the run's byte bound is spent"
    CHEAP = "cheaper to recompute than any load (its size not even measured)"
    NOTHING = "nothing to store (None, or a handle to external state)"
    DROPPED = "chosen, but the store buffer was full (dropped from storing)"
    PRESSURE = "chosen, but the worker's memory neared its limit (dropped from storing)"
    FAILED = "chosen, but the server did not store it"


@dataclass(frozen=True)
class StoreDecision:
    """``store``: whether to store; ``reason``; ``numbers``: the numbers as the report says
    them, or a function that says them (a run weighs thousands of results and prints the
    text of a few: formatting each one's cost ~40 ms of a 4k-task run)."""

    store: bool
    reason: Reason
    numbers: str | Callable[[], str]

    @property
    def why(self) -> str:
        return self.numbers if isinstance(self.numbers, str) else self.numbers()

    @property
    def short(self) -> str:
        """The reason in a few words, for the per-function counts of the report."""
        return _SHORT[self.reason]

    def line(self, label: str, nbytes: int) -> str:
        """The run report's line for a large result."""
        return (f"{label} ({_size(nbytes)}): {'stored' if self.store else 'not stored'}: "
                f"{self.why}")


_SHORT = {Reason.REFRESH: "refresh", Reason.POLICY: "policy", Reason.OUTPUT: "output",
          Reason.PAYS: "pays", Reason.DOES_NOT_PAY: "load costs more",
          Reason.OVER_BUDGET: "over byte bound", Reason.CHEAP: "cheap",
          Reason.NOTHING: "nothing to store", Reason.DROPPED: "buffer full",
          Reason.PRESSURE: "memory pressure",
          Reason.FAILED: "store failed"}


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"
