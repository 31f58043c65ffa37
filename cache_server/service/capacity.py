"""The size cap (``max_bytes``): making room, evicting, refusing what cannot fit.

Once an object is written and verified (and before it is indexed), and again once it is
indexed, entries are evicted, lowest :mod:`cache_server.index.eviction` score first and
pinned entries never, until the distinct stored objects fit; an object being read (on any
replica) is skipped, and eviction runs under the maintenance lease in Redis, on one replica
at a time. Room is never made for a declared size: an upload that fails, or sends less than
it claims, evicts nothing. Uploads in flight take disk space before they count (at most
``max_uploads`` of them, :mod:`.writes`). An object larger than the cap (refused before its
body is read when its size is declared), or one that only fits by evicting pinned entries,
is refused with :class:`NoRoom`.
"""

from __future__ import annotations

from contextlib import suppress

from cache_server.index.locks import LockBusy, RedisLock
from cache_server.index.redis_index import RedisIndex
from cache_server.metrics import Metrics
from cache_server.service.errors import NoRoom
from cache_server.service.removal import Removal

__all__ = ["MAINTENANCE_WAIT", "Capacity"]

#: Entries read from the low end of the eviction order per round trip.
_EVICTION_BATCH = 32
#: How long a store waits for another replica's eviction round before giving up (NoRoom).
MAINTENANCE_WAIT = 60.0


class Capacity:
    """Keep the stored objects under ``max_bytes`` (None: no cap). Coroutine-safe;
    eviction rounds take ``maintenance`` (one replica at a time)."""

    def __init__(self, index: RedisIndex, removal: Removal, maintenance: RedisLock,
                 metrics: Metrics, max_bytes: int | None) -> None:
        self.index = index
        self.removal = removal
        self.maintenance = maintenance
        self.metrics = metrics
        self.max_bytes = max_bytes

    def too_large(self, nbytes: int | None) -> NoRoom:
        """The error for an object that could never fit (``None``: size unknown yet)."""
        size = "the object" if nbytes is None else f"an object of {nbytes} bytes"
        return NoRoom(f"{size} is larger than the cache (max_bytes {self.max_bytes})")

    async def make_room(self, need: int, keep: str | None = None) -> None:
        """Evict until ``need`` more bytes fit under the cap; :class:`NoRoom` if only pinned
        entries (and ``keep``) are left to evict."""
        cap = self.max_bytes
        if cap is None:
            return
        if need > cap:
            raise self.too_large(need)
        if await self.index.stored_bytes() + need <= cap:
            return
        try:
            async with self.maintenance.hold(wait=MAINTENANCE_WAIT):
                await self._evict_until(cap - need, keep)
        except LockBusy as exc:
            raise NoRoom(f"no room for {need} more bytes: {exc}") from None

    async def settle(self, keep: str) -> None:
        """After indexing ``keep``: evict others until the cap holds again; if only pinned
        entries are left, evict ``keep`` itself and raise :class:`NoRoom`."""
        try:
            await self.make_room(0, keep=keep)
        except NoRoom:
            await self.evict(keep)
            raise

    async def enforce_cap(self) -> int:
        """Evict (never pinned entries) until the stored objects fit ``max_bytes``; returns
        how many entries were evicted. For ``gc`` (which holds the maintenance lease);
        stores do this themselves."""
        evicted = 0
        if self.max_bytes is not None:
            with suppress(NoRoom):  # what is pinned or being read stays
                evicted = await self._evict_until(self.max_bytes)
        return evicted

    async def evict(self, task_hash: str) -> bool:
        """Evict one entry (pinned or not: callers choose) unless its object is being read;
        whether it was evicted."""
        manifest = await self.index.manifest(task_hash)
        if manifest is None or not await self.removal.remove(manifest, "evict"):
            return False
        self.metrics.evictions.inc()
        return True

    async def _evict_until(self, limit: int, keep: str | None = None) -> int:
        """Evict until stored bytes are at most ``limit``; :class:`NoRoom` if what is left
        is pinned, ``keep`` or being read. Caller holds the maintenance lease."""
        evicted = 0
        skipped = {keep} if keep else set()
        while (used := await self.index.stored_bytes()) > limit:
            candidates = await self.index.eviction_candidates(_EVICTION_BATCH + len(skipped))
            victims = [h for h in candidates if h not in skipped][:_EVICTION_BATCH]
            if not victims:
                raise NoRoom(
                    f"no room: {used} bytes stored of a cap of {self.max_bytes}, held by "
                    "pinned entries or entries being read (unpin some, or raise "
                    "RESULT_CACHE_MAX_BYTES)"
                )
            for task_hash in victims:
                if await self.evict(task_hash):
                    evicted += 1
                else:
                    skipped.add(task_hash)
                if await self.index.stored_bytes() <= limit:
                    break
        return evicted
