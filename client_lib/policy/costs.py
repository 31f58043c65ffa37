"""What the tasks of each function cost in this process: a moving average of the compute
seconds of its stored candidates, by cost key (``StoreSpec.cost_key``: the function's name
and its code fingerprint, so ``cheap.work`` and ``slow.work`` keep their own estimates, and
an edited function starts unmeasured). docs/design/rewrite-and-policy.md, The rewrite.

Two decisions before a run rest on it, both only ever skipping work for tasks measured as
cheap: a task cheaper than one load's latency is not leased (waiting for another run's
result and loading it would cost more than computing it; :mod:`.leases`), and, in a wide
graph, most tasks of a function whose whole upstream chain is that cheap are not wrapped
for storing at all (the ``auto`` policy could not store them; :mod:`.rewrite`). A function
never measured here, or whose tasks raised warnings (they must be recorded to be replayed),
has no estimate: its tasks are leased and wrapped.
"""

from __future__ import annotations

__all__ = ["estimate", "expected_seconds", "forget", "record_seconds"]

_KEYS_KEPT = 10_000
_WEIGHT = 0.25  # of the newest measurement: one slow outlier (a pre-empted thread) fades
_seconds: dict[str, float] = {}
_warned: set[str] = set()


def record_seconds(cost_key: str, seconds: float, warned: bool = False) -> None:
    """Note what a task under ``cost_key`` took to compute here (every wrapped task, ~0.2 µs)."""
    if warned:
        _warned.add(cost_key)
    old = _seconds.get(cost_key)
    if old is None:
        if len(_seconds) >= _KEYS_KEPT:  # forgetting only means wrapping and leasing again
            _seconds.clear()
            _warned.clear()
        _seconds[cost_key] = seconds
    else:  # not atomic across threads: a lost update only shifts an estimate
        _seconds[cost_key] = old + (seconds - old) * _WEIGHT


def expected_seconds(cost_key: str) -> float | None:
    """What a task under ``cost_key`` is expected to take here; None if never measured or if its
    tasks raised warnings."""
    if cost_key in _warned:
        return None
    return _seconds.get(cost_key)


def estimate(cost_key: str) -> float | None:
    """The moving average itself (a lease renewal's estimate for waiters)."""
    return _seconds.get(cost_key)


def forget() -> None:
    """Drop every estimate (as in a fresh process)."""
    _seconds.clear()
    _warned.clear()
