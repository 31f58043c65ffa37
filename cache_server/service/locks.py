"""One asyncio lock per content digest in use (see :class:`DigestLocks`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["DigestLocks"]


class DigestLocks:
    """One asyncio lock per content digest in use, so that storing an object and deleting
    its last reference never interleave within this process. Locks exist only while held
    or awaited."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, digest: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(digest, (asyncio.Lock(), 0))
        self._locks[digest] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[digest]
            if users == 1:
                del self._locks[digest]
            else:
                self._locks[digest] = (lock, users - 1)
