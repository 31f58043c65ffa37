"""What the tasks of each function cost in this process: a moving average of the compute
seconds of its stored candidates, by label (the function's name). docs/design/rewrite-and-policy.md,
The rewrite.

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

_LABELS_KEPT = 10_000
_WEIGHT = 0.25  # of the newest measurement: one slow outlier (a pre-empted thread) fades
_seconds: dict[str, float] = {}
_warned: set[str] = set()


def record_seconds(label: str, seconds: float, warned: bool = False) -> None:
    """Note what a task of ``label`` took to compute here (every wrapped task, ~0.2 µs)."""
    if warned:
        _warned.add(label)
    old = _seconds.get(label)
    if old is None:
        if len(_seconds) >= _LABELS_KEPT:  # forgetting only means wrapping and leasing again
            _seconds.clear()
            _warned.clear()
        _seconds[label] = seconds
    else:  # not atomic across threads: a lost update only shifts an estimate
        _seconds[label] = old + (seconds - old) * _WEIGHT


def expected_seconds(label: str) -> float | None:
    """What a task of ``label`` is expected to take here; None if never measured or if its
    tasks raised warnings."""
    if label in _warned:
        return None
    return _seconds.get(label)


def estimate(label: str) -> float | None:
    """The moving average itself (a lease renewal's estimate for waiters)."""
    return _seconds.get(label)


def forget() -> None:
    """Drop every estimate (as in a fresh process)."""
    _seconds.clear()
    _warned.clear()
