"""Per-digest locks shared by every replica of the cache (see :class:`DigestLocks`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager

from cache_server.index.client import IndexRedis
from cache_server.index.keyspace import Keyspace
from cache_server.index.locks import ReadMarks, RedisLock, RedisLocks

__all__ = ["DigestLocks"]


class DigestLocks:
    """One lock per content digest in use, so that storing an object, rewriting its
    sidecar and deleting its last reference never interleave, whichever replica does them:
    an asyncio lock within this process (waiters queue without polling Redis), then the
    digest's :class:`~cache_server.index.locks.RedisLock` across processes. Readers mark
    themselves (:meth:`reading`) so that a holder can see them (:meth:`readers`)."""

    def __init__(self, redis: IndexRedis, keys: Keyspace, ttl: float = 30.0) -> None:
        self._redis = redis
        self._ttl = ttl
        self._marks = ReadMarks(redis, keys, ttl)
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, digest: str) -> AsyncIterator[None]:
        async with self._local(digest):
            async with RedisLock(self._redis, self._marks.lock_key(digest), self._ttl).hold():
                yield

    @asynccontextmanager
    async def hold_many(self, names: Sequence[str]) -> AsyncIterator[None]:
        """:meth:`hold` of every name, taken in the given order (callers keep one order, so
        two holders never wait on each other): in one round trip to Redis and one to release
        when none is held elsewhere, else one after another."""
        keys = [self._marks.lock_key(name) for name in names]
        async with AsyncExitStack() as stack:
            for name in names:
                await stack.enter_async_context(self._local(name))
            group = RedisLocks(self._redis, keys, self._ttl)
            if not await stack.enter_async_context(group.held_if_free()):
                for key in keys:
                    await stack.enter_async_context(RedisLock(self._redis, key, self._ttl).hold())
            yield

    @asynccontextmanager
    async def _local(self, digest: str) -> AsyncIterator[None]:
        """This process's lock of ``digest``: its waiters queue here, not by polling Redis."""
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

    def reading(self, digest: str) -> AbstractAsyncContextManager[None]:
        """Mark a read of ``digest`` (waits while someone holds its lock)."""
        return self._marks.reading(digest)

    async def readers(self, digest: str) -> int:
        """Live readers of ``digest``; call while holding its lock."""
        return await self._marks.live_readers(digest)
