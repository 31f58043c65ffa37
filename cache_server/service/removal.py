"""Removing entries and the objects they name, in the one safe order.

Order of operations (docs/architecture.md, "Invariants"). Storing: object durable, then
manifest (:mod:`.writes`). Removing (delete, evict, expire, corrupt): manifest first (one
Redis transaction that also tells how many entries still reference the digest), then the
object, only if none does. A crash between the two steps therefore leaves an object without
a manifest (swept by ``gc``), never a manifest without its object. Both sequences hold the
digest's lock, so a store that reuses an existing object cannot interleave with the removal
of that object's last reference. The locks live in Redis (:mod:`cache_server.service.locks`),
so this holds across replicas of one cache too (docs/design/replicas.md, "Replicas").
"""

from __future__ import annotations

import time

from anyio import to_thread

from cache_server.index.redis_index import RedisIndex
from cache_server.metrics import Metrics
from cache_server.models import Manifest
from cache_server.service.locks import DigestLocks
from storage import CorruptObject, ObjectNotFound, ObjectStore

__all__ = ["Removal"]


class Removal:
    """Remove entries, and their objects once unreferenced. Coroutine-safe."""

    def __init__(self, index: RedisIndex, storage: ObjectStore, locks: DigestLocks,
                 metrics: Metrics) -> None:
        self.index = index
        self.storage = storage
        self.locks = locks
        self.metrics = metrics

    async def current(self, task_hash: str) -> Manifest | None:
        """The hash's manifest, unless there is none or it expired (then it goes now)."""
        manifest = await self.index.manifest(task_hash)
        if manifest is not None and manifest.expires is not None and (
                manifest.expires <= time.time()):
            await self.remove(manifest, "expire")
            return None
        return manifest

    async def remove(self, manifest: Manifest, reason: str) -> bool:
        """Manifest first, then the object if no entry references it any more; whether the
        entry was removed. An eviction leaves an object that is being read alone (False)."""
        async with self.locks.hold(manifest.digest):
            if reason == "evict" and await self.locks.readers(manifest.digest):
                return False
            removed = await self.index.remove(manifest.hash, reason=reason)
            if removed is None:
                return False
            _, remaining = removed
            await to_thread.run_sync(
                self.forget_object, manifest.digest, manifest.hash, remaining
            )
        return True

    async def remove_expired(self, limit: int = 1000) -> int:
        """Remove up to ``limit`` expired entries (lookups only hide them); how many."""
        removed = 0
        for task_hash in await self.index.all_expired(limit=limit):
            manifest = await self.index.manifest(task_hash)
            if manifest is not None and await self.remove(manifest, "expire"):
                removed += 1
        return removed

    async def drop_corrupt(self, manifest: Manifest, *, locked: bool = False) -> bool:
        """Drop an entry whose object is missing or failed its check, and the object
        (``locked``: the caller holds the digest's lock). Only if the entry still names
        that object: one replaced meanwhile (a refresh) is the new object's, so it stays,
        and nothing counts as corrupt. Whether it was dropped."""
        if locked:
            return await self._drop_corrupt_locked(manifest)
        async with self.locks.hold(manifest.digest):
            return await self._drop_corrupt_locked(manifest)

    async def _drop_corrupt_locked(self, manifest: Manifest) -> bool:
        if await self.index.remove(manifest.hash, reason="corrupt",
                                   digest=manifest.digest) is None:
            return False
        self.metrics.corrupt.inc()
        # A corrupt object is useless to every entry naming it: remove it now; the others
        # are dropped as they are next read.
        await to_thread.run_sync(self.storage.delete, manifest.digest)
        return True

    async def forget_replaced(self, old: Manifest) -> None:
        """After an overwrite with another object: the old object goes if nothing
        references it any more and nobody reads it, else it just stops listing this entry
        in its sidecar (one being read is left, unreferenced, for ``gc``: a refresh never
        cuts a download off). The references are counted under the old digest's lock, not
        taken from the overwrite's transaction: a store that reused the old object since
        then holds a reference the object must keep."""
        async with self.locks.hold(old.digest):
            remaining = len(await self.index.references(old.digest))
            if remaining == 0 and await self.locks.readers(old.digest):
                remaining = -1  # read now: unlisted, not deleted
            await to_thread.run_sync(self.forget_object, old.digest, old.hash, remaining)

    async def forget_unindexed(self, digest: str, task_hash: str, created: bool) -> None:
        """Undo a put that will not be indexed (caller holds the digest's lock)."""
        remaining = 0 if created else len(await self.index.references(digest))
        await to_thread.run_sync(self.forget_object, digest, task_hash, remaining)

    def forget_object(self, digest: str, task_hash: str, remaining: int) -> None:
        """In a worker thread: delete the object if no entry references it any more
        (``remaining`` is 0), else drop ``task_hash`` from its sidecar (caller holds the
        digest's lock)."""
        try:
            if remaining == 0:
                self.storage.delete(digest)
            else:
                self.storage.remove_task(digest, task_hash)
        except (ObjectNotFound, CorruptObject):
            pass  # already gone: nothing left to forget
