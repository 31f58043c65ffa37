"""How fast this process loads results back: learned from its own recent loads, per kind
of object and size class, so the ``auto`` policy stores only what pays back
(docs/design/rewrite-and-policy.md, "Policy"). And how fast it stores them
(:class:`StoreSpeeds`).

Every :meth:`CacheClient.get <client_lib.transport.client.CacheClient.get>` records its kind, size
and wall time (request, transfer or direct read, digest, decode). Until a class has
samples the policy uses its conservative default (``result-cache.auto.latency`` and
``.throughput``). Thread safe; one table per process (a worker's own loads decide what
that worker stores).
"""

from __future__ import annotations

import bisect
import statistics
import threading
from collections import deque

__all__ = ["LOAD_SPEEDS", "SIZE_CLASSES", "STORE_SPEEDS", "LoadSpeeds", "StoreSpeeds"]

#: Upper bounds of the size classes (bytes): small objects cost their latency, large ones
#: their bytes; direct reads and HTTP differ most for the largest.
SIZE_CLASSES = (2**20, 64 * 2**20)
_SAMPLES = 16  # per class: recent loads only, the server and the path may change


class LoadSpeeds:
    """Recent load times by (kind, size class)."""

    def __init__(self) -> None:
        self._samples: dict[tuple[str, int], deque[tuple[int, float]]] = {}
        self._lock = threading.Lock()

    def record(self, kind: str, nbytes: int, seconds: float) -> None:
        if nbytes < 0 or not seconds > 0:
            return
        key = (kind, bisect.bisect_right(SIZE_CLASSES, nbytes))
        with self._lock:
            self._samples.setdefault(key, deque(maxlen=_SAMPLES)).append((nbytes, seconds))

    def estimate(self, kind: str, nbytes: int) -> tuple[float, int] | None:
        """(expected seconds to load ``nbytes`` of ``kind``, samples it rests on), or None
        without samples in its class. Small objects: the median time; larger ones: the
        median seconds per byte, times ``nbytes``."""
        size_class = bisect.bisect_right(SIZE_CLASSES, nbytes)
        with self._lock:
            samples = list(self._samples.get((kind, size_class), ()))
        if not samples:
            return None
        if size_class == 0:
            return statistics.median(s for _, s in samples), len(samples)
        rate = statistics.median(s / max(n, 1) for n, s in samples)
        return rate * nbytes, len(samples)

    def clear(self) -> None:
        with self._lock:
            self._samples.clear()


class StoreSpeeds:
    """Recent store requests (one ``PUT``, or one batch of small results) of at least
    ``min_bytes``, where the bytes dominate the request's time: the median seconds per
    byte. Smaller requests would price a byte by their latency."""

    def __init__(self, min_bytes: int = SIZE_CLASSES[0]) -> None:
        self.min_bytes = min_bytes
        self._rates: deque[float] = deque(maxlen=_SAMPLES)
        self._lock = threading.Lock()

    def record(self, nbytes: int, seconds: float) -> None:
        if nbytes >= self.min_bytes and seconds > 0:
            with self._lock:
                self._rates.append(seconds / nbytes)

    def rate(self) -> float | None:
        """Seconds per byte, or None before any store large enough."""
        with self._lock:
            rates = list(self._rates)
        return statistics.median(rates) if rates else None

    def clear(self) -> None:
        with self._lock:
            self._rates.clear()


LOAD_SPEEDS = LoadSpeeds()
STORE_SPEEDS = StoreSpeeds()
