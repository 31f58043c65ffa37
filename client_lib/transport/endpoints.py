"""The servers of one cache: ``result-cache.url`` as a comma-separated list of replicas.

Every URL in the list must serve the same cache: replicas over one Redis and one storage
(docs/design/deployment.md, "Configuration"). Requests rotate over the list, so
lookups spread; a server that failed (no connection, 5xx) goes to the back of the order for
``DOWN_SECONDS``, so later requests do not pay for it first, but it is still tried last
rather than never.
"""

from __future__ import annotations

import itertools
import threading
import time

__all__ = ["DOWN_SECONDS", "Endpoints", "normalize_urls"]

#: How long a server that failed is tried only after the others.
DOWN_SECONDS = 10.0


def normalize_urls(spec: str) -> str:
    """``spec`` with each URL stripped of blanks, a trailing slash and a trailing ``/v1``
    (the API's prefix, which every request path adds); raises ``ValueError`` for an empty
    entry or one that is not http(s)."""
    urls = [_base_url(part) for part in spec.split(",")]
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"cache URL must start with http:// or https://, got {url!r}"
                             + (f" in {spec!r}" if len(urls) > 1 else ""))
    return ",".join(urls)


def _base_url(url: str) -> str:
    url = url.strip().rstrip("/")
    return url.removesuffix("/v1") if url.endswith("/v1") else url


class Endpoints:
    """The rotation over a list of base URLs, and which of them failed lately. Thread safe."""

    def __init__(self, spec: str) -> None:
        self.urls = tuple(normalize_urls(spec).split(","))
        self._turn = itertools.count()
        self._down_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def order(self) -> list[str]:
        """The URLs to try for one request: the next in rotation first, recently failed
        ones last."""
        start = next(self._turn) % len(self.urls)
        rotated = self.urls[start:] + self.urls[:start]
        if not self._down_until:
            return list(rotated)
        now = time.monotonic()
        with self._lock:
            down = {u for u, until in self._down_until.items() if until > now}
        return [u for u in rotated if u not in down] + [u for u in rotated if u in down]

    def failed(self, url: str) -> None:
        with self._lock:
            self._down_until[url] = time.monotonic() + DOWN_SECONDS

    def answered(self, url: str) -> None:
        if url in self._down_until:
            with self._lock:
                self._down_until.pop(url, None)
