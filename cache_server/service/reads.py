"""The read path: manifests, ``GET`` (a verified stream), ``HEAD`` and direct-read locations.

Like Bazel's remote cache, an index hit counts only if the object it names can still be read
and verified; otherwise the entry is dropped (a ``corrupt`` event, :meth:`Removal.drop_corrupt`)
and the answer is a miss (:class:`EntryNotFound`). An expired entry is removed when it is
read. While a stream is open its object carries a read mark in Redis, so no replica evicts
it, and the stream holds its pieces' reservation of the memory budget.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack
from dataclasses import dataclass

from anyio import Lock, to_thread
from redis.exceptions import RedisError

from cache_server.index.redis_index import RedisIndex
from cache_server.metrics import Metrics
from cache_server.models import Manifest
from cache_server.service.body import PIECE_BYTES
from cache_server.service.budget import MemoryBudget
from cache_server.service.errors import Busy, EntryNotFound
from cache_server.service.locks import DigestLocks
from cache_server.service.removal import Removal
from storage import CorruptObject, FileRange, ObjectNotFound, ObjectReader, ObjectStore

__all__ = ["ZERO_COPY_MIN_BYTES", "ZERO_COPY_RESERVE", "FileBody", "Reads"]

logger = logging.getLogger("cache_server")

#: Bodies at least this large go out as they lie in their files, without the server reading
#: them (zero-copy, when the connection allows it); smaller ones are read and verified
#: before anything is sent, as every body used to be (docs/design/data-plane.md,
#: "Zero-copy bodies").
ZERO_COPY_MIN_BYTES = 16 * 2**20
#: What a zero-copy download holds of the memory budget: no buffer of ours, but up to a
#: socket send buffer of the kernel's (Linux grows one to 4 MiB by default).
ZERO_COPY_RESERVE = 4 * 2**20


@dataclass
class FileBody:
    """An entry's body as ranges of files, to be sent as they lie (unverified: the client
    checks the digest); ``held`` keeps the read mark and the memory reservation until it is
    closed (:meth:`close`)."""

    ranges: list[FileRange]
    held: AsyncExitStack

    async def close(self) -> None:
        await self.held.aclose()


class Reads:
    """Read entries and their objects. Coroutine-safe."""

    def __init__(self, index: RedisIndex, storage: ObjectStore, locks: DigestLocks,
                 memory: MemoryBudget, removal: Removal, metrics: Metrics,
                 zero_copy_min_bytes: int = ZERO_COPY_MIN_BYTES) -> None:
        self.zero_copy_min_bytes = zero_copy_min_bytes
        self.index = index
        self.storage = storage
        self.locks = locks
        self.memory = memory
        self.removal = removal
        self.metrics = metrics
        self._verifying = Lock()

    async def manifest(self, task_hash: str) -> Manifest:
        """The entry's manifest; :class:`EntryNotFound` if the hash is not indexed, or if
        its entry expired (it is removed now)."""
        manifest = await self.removal.current(task_hash)
        if manifest is None:
            raise EntryNotFound(task_hash)
        return manifest

    async def head(self, task_hash: str) -> Manifest:
        """The manifest, if its object still exists (not verified: that costs a full read)."""
        manifest = await self.manifest(task_hash)
        if not await to_thread.run_sync(self.storage.exists, manifest.digest):
            await self.removal.drop_corrupt(manifest)
            raise EntryNotFound(task_hash)
        return manifest

    async def serve(self, task_hash: str, run: str | None = None, *, zero_copy: bool = False
                    ) -> tuple[Manifest, AsyncGenerator[memoryview] | FileBody]:
        """The entry's body for a ``GET``: as its files (a :class:`FileBody`) when
        ``zero_copy`` is possible for the connection, the body at least
        ``zero_copy_min_bytes`` and the storage keeps it raw in files; else the verified
        pieces of :meth:`stream`. Counts the hit. A missing object (or file too short)
        drops the entry and raises :class:`EntryNotFound`. Nothing of a :class:`FileBody`
        is read by the server: corruption shows at the client, which reports it
        (:meth:`verify_reported`)."""
        manifest = await self.manifest(task_hash)
        if not zero_copy or manifest.nbytes < self.zero_copy_min_bytes:
            return await self.stream(task_hash, run, manifest)
        held = AsyncExitStack()
        try:
            await held.enter_async_context(self.locks.reading(manifest.digest))
            try:
                ranges = await to_thread.run_sync(self.storage.body_ranges, manifest.digest)
            except (ObjectNotFound, CorruptObject):
                await held.aclose()
                await self.removal.drop_corrupt(manifest)
                raise EntryNotFound(task_hash) from None
            if ranges is None:
                await held.aclose()
                return await self.stream(task_hash, run, manifest)
            held.enter_context(self.memory.reserve(min(ZERO_COPY_RESERVE, manifest.nbytes)))
        except BaseException:
            await held.aclose()
            raise
        await self._count_hit(manifest, run)
        self.metrics.bytes_sent.inc(manifest.nbytes)
        return manifest, FileBody(ranges, held)

    async def verify_reported(self, task_hash: str) -> bool:
        """A client found the entry's body not matching its digest: read and verify the
        object here (one verification at a time: :class:`Busy` while another runs) and drop
        the entry if it is corrupt (a ``corrupt`` event). True if it was corrupt. The
        client's word alone never removes anything."""
        manifest = await self.manifest(task_hash)
        if self._verifying.locked():
            raise Busy("another reported object is being verified; retry later", retry_after=2)
        async with self._verifying, self.locks.reading(manifest.digest):
            def verify() -> bool:
                try:
                    with self.storage.open_reader(manifest.digest) as reader:
                        while reader.read() is not None:
                            pass
                except (ObjectNotFound, CorruptObject):
                    return True
                return False

            corrupt = await to_thread.run_sync(verify)
        if corrupt:
            await self.removal.drop_corrupt(manifest)
        return corrupt

    async def stream(self, task_hash: str, run: str | None = None,
                     manifest: Manifest | None = None
                     ) -> tuple[Manifest, AsyncGenerator[memoryview]]:
        """An entry's body as verified pieces read from storage one at a time (each in a
        worker thread, never holding the whole object), and the manifest; counts the hit.

        The first piece is read (and verified) before this returns, so a missing or corrupt
        object, or one that is a single piece, drops the entry and raises
        :class:`EntryNotFound` before anything is sent. A later piece that fails its check
        drops the entry and raises from the generator: the response is cut off and the
        client never sees a complete body. While the generator lives it holds its memory
        reservation (:class:`Busy` if the budget is spent) and its read mark; close it.
        ``run``: the run that loads it (its ``hit`` event names it)."""
        manifest = manifest or await self.manifest(task_hash)
        held = AsyncExitStack()
        try:
            await held.enter_async_context(self.locks.reading(manifest.digest))
            try:
                reader = await to_thread.run_sync(self.storage.open_reader, manifest.digest)
                held.callback(reader.close)
                held.enter_context(self.memory.reserve(
                    reader.piece_bytes + min(PIECE_BYTES, reader.sidecar.nbytes)))
                first = await to_thread.run_sync(reader.read)
            except (ObjectNotFound, CorruptObject):
                await held.aclose()
                await self.removal.drop_corrupt(manifest)
                raise EntryNotFound(task_hash) from None
        except BaseException:
            await held.aclose()
            raise
        await self._count_hit(manifest, run)
        return manifest, self._pieces(manifest, reader, first, held)

    async def _pieces(self, manifest: Manifest, reader: ObjectReader, piece: memoryview | None,
                      held: AsyncExitStack) -> AsyncGenerator[memoryview]:
        try:
            while piece is not None:
                self.metrics.bytes_sent.inc(piece.nbytes)
                yield piece
                piece = await to_thread.run_sync(reader.read)
        except (ObjectNotFound, CorruptObject):
            await held.aclose()
            await self.removal.drop_corrupt(manifest)
            raise
        finally:
            await held.aclose()

    async def locate(self, task_hash: str, run: str | None = None
                     ) -> tuple[Manifest, str | None]:
        """The manifest and where the object lies (``storage.location``) for a client
        about to read it in place (docs/design/data-plane.md, "Direct reads"); counts the hit,
        as the client verifies the digest itself. A missing object drops the entry and
        raises :class:`EntryNotFound`."""
        manifest = await self.manifest(task_hash)
        try:
            location = await to_thread.run_sync(self.storage.location, manifest.digest)
        except ObjectNotFound:
            await self.removal.drop_corrupt(manifest)
            raise EntryNotFound(task_hash) from None
        await self._count_hit(manifest, run)
        self.metrics.located.inc()
        return manifest, location

    async def _count_hit(self, manifest: Manifest, run: str | None) -> None:
        try:
            await self.index.record_hit(manifest, run=run)
        except RedisError as exc:  # the value is verified: a lost hit count must not lose it
            logger.warning("could not count a hit of %s: %s", manifest.hash, exc)
        self.metrics.served.inc()
