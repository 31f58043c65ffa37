"""The write path: ``PUT`` (:meth:`Writes.store`), batch stores, overwrites, publishing.

What happens on a ``PUT``, in order (:meth:`Writes.store`):

1. The declared sizes are checked before a byte is read (:class:`BodyTooLarge`, or
   :class:`NoRoom` for an object larger than the cap), and the upload takes one of
   ``max_uploads`` places (:class:`Busy` beyond).
2. A hash indexed already (and not expired) answers at once; its body is drained. Unless
   the upload is an ``overwrite``.
3. The body streams into the storage's writer, cut off at ``max_body_bytes`` and read
   within ``body_timeout`` per piece; the writer verifies digest, dtype and shape.
4. Under the task hash's lock, then the digest's, the object is committed (durable) and
   published (:meth:`Writes._publish`): room is made under the cap for the bytes received
   and verified (:mod:`.capacity`), then the manifest is indexed in one Redis transaction.
   Uploads of one task hash publish one at a time, so the loser of a race removes its
   object at once instead of leaving an orphan.
5. The temporary data goes (also when the client went away), an overwrite's old object
   goes if nothing else references it (:mod:`.removal`), the hash's lease ends, and the cap
   is enforced once more with the new entry counted.

A direct write (:meth:`Writes.commit_staged`, docs/design/data-plane.md, "Direct writes") takes
the same steps with no body: a worker that sees the storage wrote the object's files into
its staging area (:meth:`Writes.staging` names the place), and step 3 is the storage
reading and verifying those files at commit.

Nothing is published unless the whole body arrived and matched; a write that finds the disk
full is :class:`NoRoom`. Objects are durable before their manifest is written
(docs/architecture.md, "Invariants").
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, Callable, Iterator
from contextlib import contextmanager, suppress

from anyio import CancelScope, to_thread
from redis.exceptions import ExecAbortError, OutOfMemoryError

from cache_server.index.redis_index import RedisIndex
from cache_server.metrics import Metrics
from cache_server.models import Manifest
from cache_server.service.body import Receiver, UploadBody
from cache_server.service.budget import DEFAULT_BODY_MEMORY, MemoryBudget
from cache_server.service.capacity import Capacity
from cache_server.service.errors import (
    BodyTooLarge,
    Busy,
    InvalidUpload,
    NoRoom,
    storage_full,
)
from cache_server.service.leases import Leases
from cache_server.service.locks import DigestLocks
from cache_server.service.removal import Removal
from cache_server.service.upload import Upload, manifest_for
from storage import (
    BatchItem,
    BodySizeMismatch,
    ObjectHeader,
    ObjectNotFound,
    ObjectStore,
    ObjectWriter,
    PutResult,
    Staging,
    TaskReference,
)

__all__ = ["Writes"]


class Writes:
    """Store uploads. Coroutine-safe within one event loop (the count of uploads in flight
    needs no lock there)."""

    def __init__(self, index: RedisIndex, storage: ObjectStore, locks: DigestLocks,
                 leases: Leases, removal: Removal, capacity: Capacity, metrics: Metrics, *,
                 max_body_bytes: int, max_uploads: int, body_timeout: float,
                 memory: MemoryBudget | None = None) -> None:
        self.index = index
        self.storage = storage
        self.locks = locks
        self.leases = leases
        self.removal = removal
        self.capacity = capacity
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.max_uploads = max_uploads
        self.body_timeout = body_timeout
        #: What batches in memory reserve (shared with the downloads in flight).
        self.memory = memory or MemoryBudget(DEFAULT_BODY_MEMORY)
        self._uploads = 0  # in flight now

    async def store(
        self, upload: Upload, chunks: AsyncIterable[bytes] | Receiver
    ) -> tuple[Manifest, bool]:
        """Store an upload whose body arrives as ``chunks``; returns the manifest and
        whether it is new (False: the hash was indexed already, the body is discarded).

        Nothing is published unless the whole body arrived and matches digest, dtype and
        shape; the error propagates (:class:`BodyTooLarge`, :class:`BodyTimeout`,
        :class:`Busy`, :class:`NoRoom`, or the storage's) and the index is untouched. An
        ``overwrite`` upload replaces an indexed entry once its object is durable, and
        removes the old object if nothing else references it. Storing a hash ends its lease
        (waiters load it now).
        """
        self._check_length(upload)
        with self._upload_slot():
            return await self._store(upload, self._body(chunks))

    def _check_length(self, upload: Upload) -> None:
        expected = upload.header.expected_nbytes
        if expected is not None and expected > self.max_body_bytes:
            raise BodyTooLarge(self.max_body_bytes)
        length = upload.content_length
        if length is not None and length > self.max_body_bytes:
            raise BodyTooLarge(self.max_body_bytes)
        if expected is not None and length is not None and length != expected:
            raise BodySizeMismatch(expected, length)
        size = upload.expected_nbytes
        cap = self.capacity.max_bytes
        if cap is not None and size is not None and size > cap:
            raise self.capacity.too_large(size)  # before a byte is read (it could never fit)

    @contextmanager
    def _upload_slot(self) -> Iterator[None]:
        """One of ``max_uploads`` places for an upload in flight, or :class:`Busy`."""
        if self._uploads >= self.max_uploads:
            self.metrics.uploads_refused.inc()
            raise Busy(f"{self._uploads} uploads are in flight (max_uploads); retry later",
                       retry_after=2)
        self._uploads += 1
        try:
            yield
        finally:
            self._uploads -= 1

    def _body(self, chunks: AsyncIterable[bytes] | Receiver) -> UploadBody:
        """The upload's body, cut off at ``max_body_bytes`` (:class:`BodyTooLarge`) or, when
        lower, at the cap (:class:`NoRoom`)."""
        cap = self.capacity.max_bytes
        if cap is not None and cap < self.max_body_bytes:
            return UploadBody(chunks, cap, lambda: self.capacity.too_large(None),
                              self.body_timeout)
        limit = self.max_body_bytes
        return UploadBody(chunks, limit, lambda: BodyTooLarge(limit), self.body_timeout)

    async def _store(self, upload: Upload, body: UploadBody) -> tuple[Manifest, bool]:
        existing = await self.removal.current(upload.task_hash)
        if existing is not None and not upload.overwrite:
            await self.index.confirm(upload.task_hash)  # acknowledged: replicated
            await body.drain()
            await self.leases.drop(upload.task_hash)
            return existing, False
        reference = self._reference(upload)
        writer = await to_thread.run_sync(lambda: self.storage.open_writer(
            upload.header, digest=upload.digest, task=reference, type_name=upload.type_name))
        return await self._commit(upload, writer, reference, body)

    async def staging(self, header: ObjectHeader) -> Staging:
        """A place to stage an object with this header (``storage.staging``), refused
        before anything is written when its declared size could never be stored
        (:class:`BodyTooLarge`, :class:`NoRoom`); :class:`~storage.StagingUnsupported`
        where the storage takes none."""
        expected = header.expected_nbytes
        if expected is not None and expected > self.max_body_bytes:
            raise BodyTooLarge(self.max_body_bytes)
        cap = self.capacity.max_bytes
        if cap is not None and expected is not None and expected > cap:
            raise self.capacity.too_large(expected)
        return await to_thread.run_sync(self.storage.staging, header)

    async def commit_staged(self, upload: Upload, staging_id: str) -> tuple[Manifest, bool]:
        """Store an object whose files a writer staged (``storage.open_staged``; see
        docs/design/data-plane.md, "Direct writes"): like :meth:`store`, with the body read from
        the staged files, verified before anything is published; the staged files go
        whatever happens. :class:`~storage.StagingNotFound` when nothing is staged there."""
        self._check_length(upload)
        with self._upload_slot():
            existing = await self.removal.current(upload.task_hash)
            reference = self._reference(upload)
            writer = await to_thread.run_sync(lambda: self.storage.open_staged(
                staging_id, upload.header, digest=upload.digest, task=reference,
                type_name=upload.type_name, max_nbytes=self._staged_limit()))
            if existing is not None and not upload.overwrite:
                await to_thread.run_sync(writer.abort)
                await self.leases.drop(upload.task_hash)
                return existing, False
            return await self._commit(upload, writer, reference, None)

    def _staged_limit(self) -> int:
        cap = self.capacity.max_bytes
        return self.max_body_bytes if cap is None else min(cap, self.max_body_bytes)

    @staticmethod
    def _reference(upload: Upload) -> TaskReference:
        now = time.time()
        return TaskReference(upload.task_hash, upload.label, upload.compute_seconds, now,
                             signature=upload.signature, expires=upload.expires(now))

    async def _commit(self, upload: Upload, writer: ObjectWriter, reference: TaskReference,
                      body: UploadBody | None) -> tuple[Manifest, bool]:
        """Receive the ``body`` into ``writer`` (None: a staged object, whose writer reads
        its files), then commit and publish it under the task hash's and the digest's
        locks; the writer is aborted in any case."""
        try:
            if body is not None:
                await body.write_to(writer.write)
            # The task hash's lock first, then the digest's (never the other way round):
            # uploads of one hash publish one at a time, so a loser never evicts.
            async with self.locks.hold_many([f"task:{upload.task_hash}", upload.digest]):
                try:
                    result = await to_thread.run_sync(writer.commit)
                except ObjectNotFound:
                    raise Busy("the stored object this upload matched was removed meanwhile; "
                               "upload it again") from None
                indexed, created, replaced = await self._publish(upload, result, reference)
        except OSError as exc:
            if storage_full(exc):
                raise NoRoom(f"the server's disk is full: {exc}") from exc
            raise
        finally:
            # Also when cancelled (the client went away): the temporary data goes now.
            with CancelScope(shield=True):
                await to_thread.run_sync(writer.abort)
        if replaced is not None and replaced[0].digest != upload.digest:
            await self.removal.forget_replaced(replaced[0])
        await self.leases.drop(upload.task_hash)
        if body is not None:
            self.metrics.bytes_received.inc(body.nbytes)
        if created:
            self.metrics.stores.inc()
            await self.capacity.settle(keep=upload.task_hash)
        return indexed, created

    async def _publish(self, upload: Upload, result: PutResult, reference: TaskReference
                       ) -> tuple[Manifest, bool, tuple[Manifest, int] | None]:
        """Index an upload whose object is durable (caller holds the task hash's and the
        digest's locks): the manifest indexed now, whether it is new, and what an overwrite
        replaced.

        An upload that lost the race to another of the same hash (with a different body)
        removes what it wrote at once, evicting nothing for it: no orphan is left for
        ``gc``, and every object on disk is one the index counts."""
        if not upload.overwrite and (winner := await self.removal.current(upload.task_hash)):
            await self.index.confirm(upload.task_hash)
            await self._forget_loser(upload, result, winner)
            return winner, False, None
        sidecar = result.sidecar
        if result.created:
            # Room is made now, for bytes received and verified, never for a declared
            # size: a failed or lying upload evicts nothing.
            try:
                await self.capacity.make_room(sidecar.nbytes)
            except NoRoom:
                await self.removal.forget_unindexed(upload.digest, upload.task_hash, True)
                raise
        manifest = manifest_for(sidecar, reference)
        manifest.type = upload.type_name or sidecar.type
        try:
            if upload.overwrite and (replaced := await self.index.replace(
                    manifest, run=upload.run)) is not None:
                return manifest, True, replaced
            indexed, created = await self.index.add(manifest, run=upload.run)
        except (OutOfMemoryError, ExecAbortError):
            # Redis at its maxmemory refused the transaction: certainly not indexed, so the
            # object goes now rather than as an orphan for gc. (A lost connection is no
            # such certainty: the entry may be indexed, so its object stays.)
            await self.removal.forget_unindexed(upload.digest, upload.task_hash,
                                                result.created)
            raise
        if not created:  # indexed meanwhile (by another server on the same Redis)
            await self._forget_loser(upload, result, indexed)
        return indexed, created, None

    async def _forget_loser(self, upload: Upload, result: PutResult, winner: Manifest) -> None:
        if winner.digest != upload.digest:
            await self.removal.forget_unindexed(upload.digest, upload.task_hash,
                                                result.created)

    # -- batches of small uploads -----------------------------------------------------------

    async def store_batch(
        self, chunks: AsyncIterable[bytes] | Receiver, limit: int,
        parse: Callable[[bytearray], list[tuple[Upload, memoryview]]],
        declared: int | None = None,
    ) -> tuple[list[tuple[Upload, memoryview]], list[tuple[Manifest, bool] | Exception]]:
        """Store a batch of small uploads whose body (at most ``limit`` bytes, each read
        within ``body_timeout``) arrives as ``chunks`` and ``parse`` cuts into uploads with
        their bodies (views of the one buffer the body is read into). Returns the uploads
        and, per upload in order, what :meth:`store` returns or the error that kept that
        upload out (the others are stored).

        The body is held in memory once, so it first reserves its size (``declared``, its
        Content-Length, else ``limit``) in the budget the downloads share
        (``max_body_memory``): :class:`Busy` (503 with Retry-After) when that is spent, so
        concurrent batches hold that budget at most, whatever their mix.

        One group commit (:meth:`storage.LocalStorage.put_batch`: one filesystem sync for
        all the objects) and one Redis transaction for the index; nothing is acknowledged
        before it is durable. Overwrites are not batched (:class:`InvalidUpload`); a hash
        repeated in the batch is stored once (later copies answer like an indexed hash).
        Storing ends the hashes' leases. Takes one of ``max_uploads`` places.
        """
        size = limit if declared is None else min(declared, limit)
        with self._upload_slot(), self.memory.reserve(size):
            body = UploadBody(chunks, limit, lambda: BodyTooLarge(limit), self.body_timeout)
            data = bytearray(size)  # filled in place: never a second copy of the batch
            del data[await body.read_into(data):]
            uploads = parse(data)
            return uploads, await self._store_batch(uploads)

    async def _store_batch(
        self, uploads: list[tuple[Upload, memoryview]]
    ) -> list[tuple[Manifest, bool] | Exception]:
        outcomes: list[tuple[Manifest, bool] | Exception | None] = [None] * len(uploads)
        existing = await self.index.manifests([u.task_hash for u, _ in uploads])
        now = time.time()
        new: dict[str, int] = {}  # task hash -> position of the upload that stores it
        for i, ((upload, body), found) in enumerate(zip(uploads, existing, strict=True)):
            if upload.overwrite:
                outcomes[i] = InvalidUpload("overwrites are not batched: PUT them")
            elif len(body) > self.max_body_bytes:
                outcomes[i] = BodyTooLarge(self.max_body_bytes)
            elif found is not None and (found.expires is None or found.expires > now):
                outcomes[i] = (found, False)
            elif upload.task_hash not in new:
                if found is not None:  # expired: gone now, stored again below
                    await self.removal.remove(found, "expire")
                new[upload.task_hash] = i
        if new:
            await self._store_new([(i, *uploads[i]) for i in new.values()], outcomes, now)
        for i, (upload, _) in enumerate(uploads):
            if outcomes[i] is None:  # a repeat of a hash this batch stored
                first = outcomes[new[upload.task_hash]]
                outcomes[i] = (first[0], False) if isinstance(first, tuple) else first
        stored = [u.task_hash for (u, _), o in zip(uploads, outcomes, strict=True)
                  if isinstance(o, tuple)]
        # Hashes found stored are acknowledged too: once replicated (new ones are already).
        await self.index.confirm(*(u.task_hash for (u, _), o in zip(uploads, outcomes, strict=True)
                                   if isinstance(o, tuple) and not o[1]))
        await self.leases.drop(*stored)
        created = sum(1 for o in outcomes if isinstance(o, tuple) and o[1])
        if created:
            self.metrics.stores.inc(created)
            with suppress(NoRoom):  # the cap again, as stores settle (pinned entries stay)
                await self.capacity.make_room(0)
        return outcomes  # type: ignore[return-value]

    async def _without_room(self, stored: list[tuple]) -> list[tuple]:
        """Make room under the cap for the new objects of ``stored`` (``(position, upload,
        reference, result)``); those left out, each with its :class:`NoRoom`. When the
        objects are larger together than the cap, those that fit are kept in the batch's
        order, as one ``PUT`` after another would keep them, and the rest are refused: a
        batch larger than the cache must not store nothing. One eviction round either way
        (a round may wait for another replica's)."""
        sizes = [r.sidecar.nbytes if r.created else 0 for *_, r in stored]
        cap, total = self.capacity.max_bytes, 0
        fits = []
        for size in sizes:
            fits.append(cap is None or total + size <= cap)
            total += size if fits[-1] else 0
        try:
            await self.capacity.make_room(total)
        except NoRoom as exc:
            fits, error = [not size for size in sizes], exc
        else:
            error = NoRoom(f"the batch's objects are larger together than the cache "
                           f"(max_bytes {cap}): this one did not fit beside the others")
        return [(*s, error) for s, fit in zip(stored, fits, strict=True) if not fit]

    async def _store_new(self, items: list[tuple[int, Upload, memoryview]],
                         outcomes: list, now: float) -> None:
        """The part of :meth:`store_batch` that writes: the objects (one group commit,
        under every digest's lock), room under the cap for the bytes that were new and
        verified, then one index transaction."""
        references = [TaskReference(u.task_hash, u.label, u.compute_seconds, now,
                                    signature=u.signature, expires=u.expires(now))
                      for _, u, _ in items]
        batch = [BatchItem(u.header, body, u.digest, ref, u.type_name)
                 for (_, u, body), ref in zip(items, references, strict=True)]
        async with self.locks.hold_many(sorted({u.digest for _, u, _ in items})):
            try:
                results = await to_thread.run_sync(self.storage.put_batch, batch)
            except OSError as exc:
                error = NoRoom(f"the server's disk is full: {exc}") if storage_full(exc) else exc
                for i, _, _ in items:
                    outcomes[i] = error
                return
            stored = [(i, u, ref, r) for (i, u, _), ref, r in zip(items, references, results,
                                                                   strict=True)
                      if not isinstance(r, Exception)]
            for (i, _, _), result in zip(items, results, strict=True):
                if isinstance(result, Exception):
                    outcomes[i] = result
            # room for what the batch added, received and verified
            for i, upload, _, result, exc in await self._without_room(stored):
                await self.removal.forget_unindexed(upload.digest, upload.task_hash,
                                                    result.created)
                outcomes[i] = exc
            stored = [s for s in stored if outcomes[s[0]] is None]
            if not stored:
                return
            manifests: list[Manifest] = []
            runs: list[str | None] = []
            for _, upload, ref, result in stored:
                runs.append(upload.run)
                manifest = manifest_for(result.sidecar, ref)
                manifest.type = upload.type_name or result.sidecar.type
                manifests.append(manifest)
                self.metrics.bytes_received.inc(result.sidecar.nbytes)
            for (i, *_), indexed in zip(stored, await self.index.add_many(manifests, runs),
                                        strict=True):
                outcomes[i] = indexed
