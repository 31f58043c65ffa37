"""The cache service behind the routes: the Redis index over content-addressed storage.

Like Bazel's remote cache, an index hit counts only if the object it names can still be read
and verified; otherwise the entry is dropped (a ``corrupt`` event) and the answer is a miss.
Objects are durable before their manifest is written, and removed only once no entry
references their digest.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from anyio import to_thread

from cache_server.bodies import RequestBody
from cache_server.errors import BodyTooLarge, EntryNotFound, InvalidRequest
from cache_server.index import RedisIndex
from cache_server.metrics import Metrics
from cache_server.models import Manifest
from storage import (
    BodySizeMismatch,
    CorruptObject,
    LocalStorage,
    ObjectHeader,
    ObjectNotFound,
    StoredObject,
    TaskReference,
    is_digest,
)

__all__ = ["ResultCache", "Upload"]


@dataclass(frozen=True)
class Upload:
    """The validated metadata of one ``PUT /v1/objects/{hash}``."""

    task_hash: str
    header: ObjectHeader
    digest: str
    compute_seconds: float
    label: str
    type_name: str | None
    content_length: int | None

    def __post_init__(self) -> None:
        if not is_digest(self.digest):
            raise InvalidRequest("X-Result-Digest must be 32 lowercase hex characters")
        if not math.isfinite(self.compute_seconds) or self.compute_seconds < 0:
            raise InvalidRequest("X-Result-Compute-Seconds must be a finite float >= 0")


class _DigestLocks:
    """One asyncio lock per content digest in use, so that storing an object and deleting
    its last reference never interleave within this process."""

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


class ResultCache:
    """Lookup, store, load and delete task results. One instance per app; coroutine-safe."""

    def __init__(
        self, index: RedisIndex, storage: LocalStorage, metrics: Metrics, max_body_bytes: int
    ) -> None:
        self.index = index
        self.storage = storage
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self._digest_locks = _DigestLocks()

    async def lookup(self, hashes: list[str]) -> list[str]:
        found = await self.index.lookup(hashes)
        asked = len(set(hashes))
        self.metrics.lookups.inc(asked)
        self.metrics.misses.inc(asked - len(found))
        return found

    async def manifest(self, task_hash: str) -> Manifest:
        manifest = await self.index.manifest(task_hash)
        if manifest is None:
            raise EntryNotFound(task_hash)
        return manifest

    async def store(self, upload: Upload, body: RequestBody) -> tuple[Manifest, bool]:
        """Store an upload; returns the manifest and whether it is new (201) or not (200).

        Nothing is published unless the whole body arrived and matches digest, dtype and
        shape; the storage error propagates (400, 413, 422) and the index is untouched.
        """
        self._check_length(upload)
        existing = await self.index.manifest(upload.task_hash)
        if existing is not None:
            await body.drain()
            return existing, False
        now = time.time()
        reference = TaskReference(upload.task_hash, upload.label, upload.compute_seconds, now)
        async with self._digest_locks.hold(upload.digest):
            result = await to_thread.run_sync(
                lambda: self.storage.put(
                    upload.header,
                    body.pieces(),
                    digest=upload.digest,
                    task=reference,
                    type_name=upload.type_name,
                )
            )
            sidecar = result.sidecar
            manifest = Manifest(
                hash=upload.task_hash,
                digest=upload.digest,
                kind=upload.header.kind,
                storage=sidecar.storage,  # type: ignore[arg-type]
                nbytes=sidecar.nbytes,
                dtype=upload.header.dtype if upload.header.is_array else None,
                shape=list(upload.header.shape) if upload.header.shape is not None else None,
                type=upload.type_name or sidecar.type,
                compute_seconds=upload.compute_seconds,
                label=upload.label,
                created=now,
                last_access=now,
            )
            indexed, created = await self.index.add(manifest)
        self.metrics.bytes_received.inc(body.nbytes)
        if created:
            self.metrics.stores.inc()
        return indexed, created

    async def load(self, task_hash: str) -> tuple[Manifest, StoredObject]:
        """Read and verify an entry's object and count the hit; a missing or corrupt object
        drops the entry and raises :class:`EntryNotFound`."""
        manifest = await self.manifest(task_hash)
        try:
            stored = await to_thread.run_sync(self.storage.get, manifest.digest)
        except (ObjectNotFound, CorruptObject):
            await self._drop_corrupt(manifest)
            raise EntryNotFound(task_hash) from None
        await self.index.record_hit(manifest)
        self.metrics.hits.inc()
        self.metrics.bytes_sent.inc(stored.body.nbytes)
        return manifest, stored

    async def head(self, task_hash: str) -> Manifest:
        """The manifest, if its object still exists (not verified: that costs a full read)."""
        manifest = await self.manifest(task_hash)
        if not await to_thread.run_sync(self.storage.exists, manifest.digest):
            await self._drop_corrupt(manifest)
            raise EntryNotFound(task_hash)
        return manifest

    async def delete(self, task_hash: str) -> None:
        """Drop an entry; its object goes too once no other entry references the digest."""
        manifest = await self.manifest(task_hash)
        async with self._digest_locks.hold(manifest.digest):
            removed = await self.index.remove(task_hash)
            if removed is None:
                raise EntryNotFound(task_hash)
            _, remaining = removed
            await to_thread.run_sync(self._forget_object, manifest.digest, task_hash, remaining)

    def _check_length(self, upload: Upload) -> None:
        expected = upload.header.expected_nbytes
        if expected is not None and expected > self.max_body_bytes:
            raise BodyTooLarge(self.max_body_bytes)
        length = upload.content_length
        if length is None:
            return
        if length > self.max_body_bytes:
            raise BodyTooLarge(self.max_body_bytes)
        if expected is not None and length != expected:
            raise BodySizeMismatch(expected, length)

    async def _drop_corrupt(self, manifest: Manifest) -> None:
        self.metrics.corrupt.inc()
        async with self._digest_locks.hold(manifest.digest):
            await self.index.remove(manifest.hash, reason="corrupt")
            # A corrupt object is useless to every entry naming it: remove it now; the others
            # are dropped as they are next read.
            await to_thread.run_sync(self.storage.delete, manifest.digest)

    def _forget_object(self, digest: str, task_hash: str, remaining: int) -> None:
        try:
            if remaining == 0:
                self.storage.delete(digest)
            else:
                self.storage.remove_task(digest, task_hash)
        except (ObjectNotFound, CorruptObject):
            pass  # already gone: nothing left to forget
