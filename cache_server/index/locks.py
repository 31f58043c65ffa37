"""Locks in Redis, shared by every replica of one cache (docs/design/replicas.md, "Replicas").

- :class:`RedisLock`: an exclusive lock with an expiry (``SET NX PX``), renewed while its
  holder runs and released only by its holder (compare-and-delete), so a replica killed
  while holding one blocks the others for at most ``ttl`` seconds. Used per content digest
  (store vs. remove of one object, sidecar rewrites) and as the maintenance lease (eviction
  and ``gc`` run on one replica at a time).
- Read marks: a reader of an object registers itself in ``reading:<digest>`` (a sorted set
  of reader ids by expiry) only while nobody holds that digest's lock; a holder of the lock
  sees the live readers and leaves the object alone (eviction skips it).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager, suppress
from typing import Any

from redis.exceptions import RedisError

from cache_server.index.client import IndexRedis
from cache_server.index.keyspace import Keyspace

__all__ = ["LockBusy", "ReadMarks", "RedisLock", "RedisLocks", "ReplicaRegistry"]

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
# KEYS: the digest's lock, its read marks; ARGV: reader id, expiry (ms since the epoch).
_MARK_READ = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('PEXPIREAT', KEYS[2], ARGV[2])
return 1
"""
# KEYS: the read marks; ARGV: now (ms since the epoch). Live readers, expired ones dropped.
_LIVE_READERS = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
return redis.call('ZCARD', KEYS[1])
"""

_POLL_FIRST, _POLL_MAX = 0.002, 0.05


class LockBusy(RuntimeError):
    """Another holder kept the lock for longer than the caller would wait."""


class RedisLock:
    """One exclusive lock ``key`` in Redis; a fresh holder id per acquisition.

    ``async with lock.hold(wait=...)`` waits up to ``wait`` seconds (None: forever) and
    raises :class:`LockBusy` after that; while held, a task renews the expiry every third
    of ``ttl``. Coroutine-safe; one instance per key and use.
    """

    def __init__(self, redis: IndexRedis, key: str, ttl: float = 30.0) -> None:
        self.redis = redis
        self.key = key
        self.ttl_ms = int(ttl * 1000)

    async def try_acquire(self) -> str | None:
        """The holder id (``host:pid:uuid``) if the lock was free, else None. A lock whose
        holder was a process of this host that is gone (killed mid-store, its server
        restarted) is taken over at once rather than after its ``ttl``."""
        holder = _new_holder()
        if await self.redis.set(self.key, holder, nx=True, px=self.ttl_ms):
            return holder
        current = await self.redis.get(self.key)
        if current is not None and _gone(current):
            await self.release(current)  # only if it is still that holder's
            if await self.redis.set(self.key, holder, nx=True, px=self.ttl_ms):
                return holder
        return None

    async def release(self, holder: str) -> None:
        await self.redis.eval(_RELEASE, 1, self.key, holder)

    @asynccontextmanager
    async def hold(self, wait: float | None = None) -> AsyncIterator[str]:
        deadline = None if wait is None else time.monotonic() + wait
        pause = _POLL_FIRST
        while (holder := await self.try_acquire()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise LockBusy(f"{self.key} is held by another replica")
            await asyncio.sleep(pause)
            pause = min(pause * 2, _POLL_MAX)
        try:
            async with _running_task(self._renew(holder)):
                yield holder
        finally:
            await self.release(holder)

    async def _renew(self, holder: str) -> None:
        while True:
            await asyncio.sleep(self.ttl_ms / 3000)
            await self.redis.eval(_RENEW, 1, self.key, holder, self.ttl_ms)


class RedisLocks:
    """Many :class:`RedisLock` keys taken at once while all are free: one pipelined
    ``SET NX PX`` per key, one holder id, one renewal task and one pipelined release for
    all of them. A batch store locks each of its objects' digests: a thousand locks one
    after another cost two round trips each (~0.2 s of a 1000-object batch)."""

    def __init__(self, redis: IndexRedis, keys: list[str], ttl: float = 30.0) -> None:
        self.redis = redis
        self.keys = keys
        self.ttl_ms = int(ttl * 1000)

    @asynccontextmanager
    async def held_if_free(self) -> AsyncIterator[bool]:
        """Yields True while holding every key, or False holding none of them (some key was
        held: the caller takes them one by one, :meth:`RedisLock.hold`, which waits)."""
        holder = _new_holder()
        async with self.redis.pipeline(transaction=False) as pipe:
            for key in self.keys:
                pipe.set(key, holder, nx=True, px=self.ttl_ms)
            taken = [k for k, ok in zip(self.keys, await pipe.execute(), strict=True) if ok]
        if len(taken) < len(self.keys):
            await self._each(taken, _RELEASE, holder)
            yield False
            return
        try:
            async with _running_task(self._renew(holder)):
                yield True
        finally:
            await self._each(self.keys, _RELEASE, holder)

    async def _each(self, keys: list[str], script: str, *args: object) -> None:
        if not keys:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.eval(script, 1, key, *args)
            await pipe.execute()

    async def _renew(self, holder: str) -> None:
        while True:
            await asyncio.sleep(self.ttl_ms / 3000)
            await self._each(self.keys, _RENEW, holder, self.ttl_ms)


class ReadMarks:
    """Readers of objects by digest, so that a lock holder can leave a read object alone.

    ``lock_key(digest)`` names the digest's :class:`RedisLock`; a reader waits while it is
    held (a removal or a store in progress) and then marks itself for ``ttl`` seconds
    (renewed while it reads). The two keys share a slot (:meth:`.Keyspace.read_marks`).
    """

    def __init__(self, redis: IndexRedis, keys: Keyspace, ttl: float = 30.0) -> None:
        self.redis = redis
        self.keys = keys
        self.ttl_ms = int(ttl * 1000)

    def lock_key(self, digest: str) -> str:
        return self.keys.digest_lock(digest)

    def marks_key(self, digest: str) -> str:
        return self.keys.read_marks(digest)

    @asynccontextmanager
    async def reading(self, digest: str) -> AsyncIterator[None]:
        reader = uuid.uuid4().hex
        keys = (self.lock_key(digest), self.marks_key(digest))
        pause = _POLL_FIRST
        while not await self.redis.eval(_MARK_READ, 2, *keys, reader, self._expiry()):
            await asyncio.sleep(pause)
            pause = min(pause * 2, _POLL_MAX)
        try:
            async with _running_task(self._renew(keys, reader)):
                yield
        finally:
            await self.redis.zrem(keys[1], reader)

    async def live_readers(self, digest: str) -> int:
        """How many readers hold ``digest`` now (call while holding its lock)."""
        now = int(time.time() * 1000)
        return int(await self.redis.eval(_LIVE_READERS, 1, self.marks_key(digest), now))

    def _expiry(self) -> int:
        return int(time.time() * 1000) + self.ttl_ms

    async def _renew(self, keys: tuple[str, str], reader: str) -> None:
        while True:
            await asyncio.sleep(self.ttl_ms / 3000)
            expiry = self._expiry()
            await self.redis.zadd(keys[1], {reader: expiry})
            await self.redis.pexpireat(keys[1], expiry)


class ReplicaRegistry:
    """The live replicas of one cache: ``replicas`` maps ``host:pid:uuid`` to the time its
    registration expires; each replica renews its own every third of ``ttl``. A
    registration from this host whose process is gone (killed, then restarted) is stale at
    once, not only after ``ttl``."""

    def __init__(self, redis: IndexRedis, prefix: str, ttl: float = 30.0) -> None:
        self.redis = redis
        self.key = f"{prefix}replicas"
        self.ttl = ttl
        self.replica_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"

    async def others_alive(self) -> int:
        """How many other replicas are registered, not expired, and (on this host) alive."""
        await self.redis.zremrangebyscore(self.key, "-inf", time.time())
        host = socket.gethostname()
        alive = 0
        for member in await self.redis.zrange(self.key, 0, -1):
            if member == self.replica_id:
                continue
            their_host, pid, _ = member.rsplit(":", 2)
            if their_host == host and (int(pid) == os.getpid() or not _running(int(pid))):
                await self.redis.zrem(self.key, member)
                continue
            alive += 1
        return alive

    async def register(self) -> None:
        """Register (or renew) this replica."""
        await self.redis.zadd(self.key, {self.replica_id: time.time() + self.ttl})

    async def keep_registered(self) -> None:
        """Register now and renew forever (run as a task; cancel it to stop). Redis being
        unreachable for a while only delays the next renewal."""
        while True:
            with suppress(RedisError, OSError):
                await self.register()
            await asyncio.sleep(self.ttl / 3)

    async def unregister(self) -> None:
        await self.redis.zrem(self.key, self.replica_id)


@asynccontextmanager
async def _running_task(renewal: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    """``renewal`` runs as a task while the block runs, and is cancelled and awaited when
    it ends (a holder's or reader's renewal, before its release)."""
    task = asyncio.create_task(renewal)
    try:
        yield
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task


def _new_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"


def _gone(holder: str | bytes) -> bool:
    """Whether a lock's holder id names a process of this host that no longer runs (an id
    of another host, or of another form, never is: it waits out its expiry)."""
    if isinstance(holder, bytes):
        holder = holder.decode("utf-8", "replace")
    host, _, rest = holder.partition(":")
    pid, _, _ = rest.partition(":")
    return (host == socket.gethostname() and pid.isdigit() and int(pid) != os.getpid()
            and not _running(int(pid)))


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True
