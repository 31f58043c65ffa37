"""The eviction score: compute seconds saved per byte, decayed by time since last access.

In the spirit of cachey: an entry is worth ``compute_seconds / nbytes`` (what keeping one
byte of it saves on each hit), and that worth halves every ``half_life`` seconds it goes
unused. The lowest score is evicted first.

Decay makes the score change with time, but the *order* of two entries does not: for
``score = c / n * 2 ** (-(now - last_access) / h)``,

    log2(score) = log2(c / n) + last_access / h - now / h

and ``now / h`` is the same for every entry. So the index keeps the time-free
:func:`eviction_rank` in a sorted set, updated on every hit, and evicting is reading its low
end: no scan, no clock in the comparison. Pure functions; no I/O.
"""

from __future__ import annotations

import math

__all__ = ["MIN_SECONDS", "eviction_rank", "eviction_score"]

#: Results that took no measurable time still differ by size: count them as 1 µs.
MIN_SECONDS = 1e-6


def eviction_rank(
    compute_seconds: float, nbytes: int, last_access: float, half_life: float
) -> float:
    """A time-free key ordering entries like :func:`eviction_score` at any single moment."""
    per_byte = max(compute_seconds, MIN_SECONDS) / max(nbytes, 1)
    return math.log2(per_byte) + last_access / half_life


def eviction_score(
    compute_seconds: float, nbytes: int, last_access: float, half_life: float, now: float
) -> float:
    """Seconds saved per byte, halved for every ``half_life`` seconds without access."""
    per_byte = max(compute_seconds, MIN_SECONDS) / max(nbytes, 1)
    return per_byte * 2.0 ** (-max(now - last_access, 0.0) / half_life)
