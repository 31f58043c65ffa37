"""The server's budget of body memory in flight (docs/design/server-and-index.md, "Bounds")."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from cache_server.service.errors import Busy

__all__ = ["DEFAULT_BODY_MEMORY", "MemoryBudget"]

#: Bodies in flight together (downloads, uploads, batches): any mix stays within it.
DEFAULT_BODY_MEMORY = 256 * 2**20


class MemoryBudget:
    """Bytes that the object streams in flight may hold at once. Each stream reserves the
    most it can hold (a storage piece and a piece on its way to the socket) before it
    starts; beyond ``limit`` the request is refused (:class:`Busy`, 503 with Retry-After)
    rather than queued, so a crowd of slow readers costs a bounded amount of memory. A
    stream larger than the whole budget still runs when nothing else does. Coroutines of
    one event loop only (no lock)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    @contextmanager
    def reserve(self, nbytes: int) -> Iterator[None]:
        if self.used and self.used + nbytes > self.limit:
            raise Busy(f"{self.used} bytes of bodies are in flight (max_body_memory "
                       f"{self.limit}); retry later")
        self.used += nbytes
        try:
            yield
        finally:
            self.used -= nbytes
