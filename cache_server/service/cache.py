"""The cache service behind the routes: the Redis index over content-addressed storage.

Like Bazel's remote cache, an index hit counts only if the object it names can still be read
and verified; otherwise the entry is dropped (a ``corrupt`` event) and the answer is a miss.
Objects are durable before their manifest is written, and removed only once no entry
references their digest.

Order of operations (docs/architecture.md, "Invariants"). Storing: object durable, then
manifest. Removing (delete, evict, corrupt): manifest first (one Redis transaction that also
tells how many entries still reference the digest), then the object, only if none does. A
crash between the two steps therefore leaves an object without a manifest (swept by ``gc``),
never a manifest without its object. Both sequences hold the digest's lock, so a store that
reuses an existing object cannot interleave with the removal of that object's last
reference; uploads of one task hash also publish one at a time (the task hash's lock, taken
before the digest's), so the losers of a race remove their objects at once instead of
leaving orphans. The locks live in Redis (:mod:`cache_server.service.locks`), so this
holds across replicas of one cache too (docs/architecture.md, "Replicas and object storage").

Size cap (``max_bytes``): once an object is written and verified (and before it is indexed),
and again once it is indexed, entries are evicted, lowest :mod:`cache_server.index.eviction`
score first and pinned entries never, until the distinct stored objects fit; an object
being read (on any replica) is skipped, and eviction runs under the maintenance lease in
Redis, on one replica at a time. Room is never
made for a declared size: an upload that fails, or sends less than it claims, evicts
nothing. Uploads in flight take disk space before they count (at most ``max_uploads`` of
them). An object larger than the cap (refused before its body is read when its size is
declared), or one that only fits by evicting pinned entries, is refused with
:class:`NoRoom`, as is a write that finds the disk full.

Knows nothing of HTTP: bodies arrive as async iterables of bytes, failures are the errors of
:mod:`cache_server.service.errors` and :mod:`storage.errors`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Iterator
from contextlib import AsyncExitStack, contextmanager, suppress

from anyio import CancelScope, to_thread
from redis.exceptions import RedisError

from cache_server.index.leases import LeaseStore
from cache_server.index.locks import LockBusy, RedisLock, ReplicaRegistry
from cache_server.index.redis_index import RedisIndex
from cache_server.index.runs import RunStore
from cache_server.metrics import Metrics
from cache_server.models import MAX_COMPUTE_SECONDS, Event, Manifest, RunSummary, Stats
from cache_server.service.body import PIECE_BYTES, UploadBody
from cache_server.service.budget import MemoryBudget
from cache_server.service.errors import (
    BodyTooLarge,
    Busy,
    EntryNotFound,
    IndexUnavailable,
    InvalidUpload,
    NoRoom,
    RunNotFound,
    storage_full,
)
from cache_server.service.leases import Leases
from cache_server.service.locks import DigestLocks
from cache_server.service.upload import Upload, manifest_for
from storage import (
    BatchItem,
    BodySizeMismatch,
    CorruptObject,
    ObjectNotFound,
    ObjectReader,
    ObjectStore,
    PutResult,
    TaskReference,
)

__all__ = ["ResultCache"]

logger = logging.getLogger("cache_server")

#: Entries read from the low end of the eviction order per round trip.
_EVICTION_BATCH = 32
#: Beside other live replicas, a temporary path in storage untouched for this long is a
#: crash's leftover.
LEFTOVER_AGE = 3600.0
#: How long a store waits for another replica's eviction round before giving up (NoRoom).
MAINTENANCE_WAIT = 60.0
#: How often a replica deletes expired leases (when no other replica holds the
#: maintenance lease): the leases hash holds at most what expired in that time.
LEASE_SWEEP_SECONDS = 60.0


class ResultCache:
    """Lookup, store, load and delete task results. One instance per app; coroutine-safe."""

    def __init__(
        self,
        index: RedisIndex,
        storage: ObjectStore,
        metrics: Metrics,
        max_body_bytes: int,
        max_bytes: int | None = None,
        max_lease_hashes: int = 100_000,
        max_uploads: int = 64,
        body_timeout: float = 30.0,
        max_body_memory: int = 512 * 2**20,
    ) -> None:
        self.index = index
        self.storage = storage
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.max_bytes = max_bytes
        self.leases = Leases(LeaseStore(index.redis, index.prefix), index, max_lease_hashes)
        self.replicas = ReplicaRegistry(index.redis, index.prefix)
        self.locks = DigestLocks(index.redis, index.prefix)
        #: Eviction and gc run on one replica at a time.
        self.maintenance = RedisLock(index.redis, f"{index.prefix}maintenance")
        self.runs = RunStore(index.redis, index.prefix)
        self.max_uploads = max_uploads
        self.body_timeout = body_timeout
        self.memory = MemoryBudget(max_body_memory)
        self._uploads = 0  # in flight now (coroutines of one event loop: no lock needed)

    async def lookup(self, hashes: list[str]) -> list[str]:
        # Deduplicate once here: hashing 100k fresh strings costs ~10 ms, and the index's
        # own pass over these (now hashed) strings is cheap.
        unique = list(dict.fromkeys(hashes))
        found = await self.index.lookup(unique)
        self.metrics.lookups.inc(len(unique))
        self.metrics.hits.inc(len(found))
        self.metrics.misses.inc(len(unique) - len(found))
        return found

    async def lookup_packed(self, packed: bytes) -> bytes:
        """Presence flags for packed hashes (see :meth:`RedisIndex.lookup_packed`)."""
        answer = await self.index.lookup_packed(packed)
        self.metrics.lookups.inc(len(answer))
        self.metrics.hits.inc(answer.count(1))
        self.metrics.misses.inc(len(answer) - answer.count(1))
        return answer

    async def manifest(self, task_hash: str) -> Manifest:
        """The entry's manifest; :class:`EntryNotFound` if the hash is not indexed, or if
        its entry expired (it is removed now)."""
        manifest = await self.index.manifest(task_hash)
        if manifest is None:
            raise EntryNotFound(task_hash)
        if manifest.expires is not None and manifest.expires <= time.time():
            await self._remove(manifest, "expire")
            raise EntryNotFound(task_hash)
        return manifest

    async def remove_expired(self, limit: int = 1000) -> int:
        """Remove up to ``limit`` expired entries (lookups only hide them); how many."""
        removed = 0
        for task_hash in await self.index.all_expired(limit=limit):
            manifest = await self.index.manifest(task_hash)
            if manifest is not None and await self._remove(manifest, "expire"):
                removed += 1
        return removed

    async def entries(
        self, *, label: str | None, limit: int, cursor: str | None
    ) -> tuple[list[Manifest], str | None]:
        """One page of manifests in hash order, and the cursor of the next page (None
        after the last one)."""
        return await self.index.page(label=label, limit=limit, cursor=cursor)

    async def stats(self) -> Stats:
        """The index's counters, with this cache's size cap."""
        stats = await self.index.stats()
        stats.max_bytes = self.max_bytes
        return stats

    async def events(self, limit: int) -> list[Event]:
        """The most recent events, newest first."""
        return await self.index.events(limit)

    async def events_with_ids(self, limit: int) -> list[tuple[str, Event]]:
        """The most recent events with their stream ids, newest first."""
        return await self.index.events_with_ids(limit)

    async def events_after(self, last_id: str, limit: int, block_ms: int
                           ) -> list[tuple[str, Event]]:
        """Events after ``last_id``, oldest first, waiting up to ``block_ms`` for one;
        :class:`IndexUnavailable` if Redis does not answer."""
        try:
            return await self.index.events_after(last_id, limit, block_ms)
        except (RedisError, OSError) as exc:
            raise IndexUnavailable(f"the index (Redis) is unreachable: {exc}") from exc

    async def record_run(self, run: RunSummary) -> RunSummary:
        """Record a run's summary (docs/protocol.md, "Runs"); a ``run`` event marks its
        start and its end, not every progress report. The seconds saved are the compute
        seconds recorded with the entries of ``saved_hashes`` (never the client's figure);
        a post without them keeps the recorded sum."""
        before = await self.runs.counts(run.run_id)
        if run.saved_hashes:
            manifests = await self.index.manifests(sorted(set(run.saved_hashes)))
            run.seconds_saved = sum(min(m.compute_seconds, MAX_COMPUTE_SECONDS)
                                    for m in manifests if m is not None)
        else:
            run.seconds_saved = before.seconds_saved if before is not None else 0.0
        recorded = await self.runs.put(run)
        if before is None or before.status != run.status:
            await self.index.record_run_event(run.run_id, run.status, run.stored)
        return recorded

    async def run(self, run_id: str) -> RunSummary:
        run = await self.runs.get(run_id)
        if run is None:
            raise RunNotFound(run_id)
        return run

    async def recent_runs(self, limit: int) -> list[RunSummary]:
        return await self.runs.recent(limit)

    async def remove_leftovers(self) -> int:
        """Remove what interrupted writes left in storage; returns how many paths. With
        no other replica registered, every temporary path is a crash's leftover; beside
        live ones, only those untouched for ``LEFTOVER_AGE`` (another replica's upload in
        progress touches its files far more often)."""
        try:
            alone = not await self.replicas.others_alive()
        except (RedisError, OSError):
            alone = False  # unknown: assume company (the index answers 503 meanwhile)
        age = 0.0 if alone else LEFTOVER_AGE
        return await to_thread.run_sync(self.storage.sweep_temporary, age)

    async def sweep_leases(self) -> int:
        """Delete expired leases under the maintenance lease (so one replica at a time);
        0 without sweeping if another replica holds it (it evicts, or sweeps itself)."""
        try:
            async with self.maintenance.hold(wait=0):
                return await self.leases.sweep()
        except LockBusy:
            return 0

    async def keep_leases_swept(self) -> None:
        """Sweep every ``LEASE_SWEEP_SECONDS`` forever (run as a task; cancel it to stop).
        Redis being unreachable for a while only delays the next sweep."""
        while True:
            await asyncio.sleep(LEASE_SWEEP_SECONDS)
            with suppress(RedisError, OSError):
                await self.sweep_leases()

    async def check_health(self) -> None:
        """Return if the index answers, else raise :class:`IndexUnavailable`."""
        try:
            await self.index.ping()
        except (RedisError, OSError) as exc:
            raise IndexUnavailable(f"the index (Redis) is unreachable: {exc}") from exc

    async def store(
        self, upload: Upload, chunks: AsyncIterable[bytes]
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

    async def _store(self, upload: Upload, body: UploadBody) -> tuple[Manifest, bool]:
        existing = await self._current(upload.task_hash)
        if existing is not None and not upload.overwrite:
            await body.drain()
            await self.leases.drop(upload.task_hash)
            return existing, False
        now = time.time()
        reference = TaskReference(upload.task_hash, upload.label, upload.compute_seconds, now,
                                  signature=upload.signature, expires=upload.expires(now))
        writer = await to_thread.run_sync(lambda: self.storage.open_writer(
            upload.header, digest=upload.digest, task=reference, type_name=upload.type_name))
        try:
            await body.write_to(writer.write)
            # The task hash's lock first, then the digest's (never the other way round):
            # uploads of one hash publish one at a time, so a loser never evicts.
            async with self.locks.hold(f"task:{upload.task_hash}"), \
                    self.locks.hold(upload.digest):
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
            await self._forget_replaced(*replaced)
        await self.leases.drop(upload.task_hash)
        self.metrics.bytes_received.inc(body.nbytes)
        if created:
            self.metrics.stores.inc()
            await self._enforce_cap(keep=upload.task_hash)
        return indexed, created

    async def _current(self, task_hash: str) -> Manifest | None:
        """The hash's manifest, unless there is none or it expired (then it goes now)."""
        manifest = await self.index.manifest(task_hash)
        if manifest is not None and manifest.expires is not None and (
                manifest.expires <= time.time()):
            await self._remove(manifest, "expire")
            return None
        return manifest

    async def _publish(self, upload: Upload, result: PutResult, reference: TaskReference
                       ) -> tuple[Manifest, bool, tuple[Manifest, int] | None]:
        """Index an upload whose object is durable (caller holds the task hash's and the
        digest's locks): the manifest indexed now, whether it is new, and what an overwrite
        replaced.

        An upload that lost the race to another of the same hash (with a different body)
        removes what it wrote at once, evicting nothing for it: no orphan is left for
        ``gc``, and every object on disk is one the index counts."""
        if not upload.overwrite and (winner := await self._current(upload.task_hash)):
            await self._forget_loser(upload, result, winner)
            return winner, False, None
        sidecar = result.sidecar
        if result.created:
            # Room is made now, for bytes received and verified, never for a declared
            # size: a failed or lying upload evicts nothing.
            try:
                await self._make_room(sidecar.nbytes)
            except NoRoom:
                await self._forget_unindexed(upload.digest, upload.task_hash, True)
                raise
        manifest = manifest_for(sidecar, reference)
        manifest.type = upload.type_name or sidecar.type
        if upload.overwrite and (replaced := await self.index.replace(
                manifest, run=upload.run)) is not None:
            return manifest, True, replaced
        indexed, created = await self.index.add(manifest, run=upload.run)
        if not created:  # indexed meanwhile (by another server on the same Redis)
            await self._forget_loser(upload, result, indexed)
        return indexed, created, None

    async def _forget_loser(self, upload: Upload, result: PutResult, winner: Manifest) -> None:
        if winner.digest != upload.digest:
            await self._forget_unindexed(upload.digest, upload.task_hash, result.created)

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

    async def store_batch(
        self, chunks: AsyncIterable[bytes], limit: int,
        parse: Callable[[bytes], list[tuple[Upload, bytes]]],
    ) -> tuple[list[tuple[Upload, bytes]], list[tuple[Manifest, bool] | Exception]]:
        """Store a batch of small uploads whose body (at most ``limit`` bytes, each read
        within ``body_timeout``) arrives as ``chunks`` and ``parse`` cuts into uploads with
        their bodies. Returns the uploads and, per upload in order, what :meth:`store`
        returns or the error that kept that upload out (the others are stored).

        One group commit (:meth:`storage.LocalStorage.put_batch`: one filesystem sync for
        all the objects) and one Redis transaction for the index; nothing is acknowledged
        before it is durable. Overwrites are not batched (:class:`InvalidUpload`); a hash
        repeated in the batch is stored once (later copies answer like an indexed hash).
        Storing ends the hashes' leases. Takes one of ``max_uploads`` places.
        """
        with self._upload_slot():
            body = UploadBody(chunks, limit, lambda: BodyTooLarge(limit), self.body_timeout)
            data = bytearray()
            while (piece := await body.read_piece()) is not None:
                data += piece
            uploads = parse(bytes(data))
            return uploads, await self._store_batch(uploads)

    async def _store_batch(
        self, uploads: list[tuple[Upload, bytes]]
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
                    await self._remove(found, "expire")
                new[upload.task_hash] = i
        if new:
            await self._store_new([(i, *uploads[i]) for i in new.values()], outcomes, now)
        for i, (upload, _) in enumerate(uploads):
            if outcomes[i] is None:  # a repeat of a hash this batch stored
                first = outcomes[new[upload.task_hash]]
                outcomes[i] = (first[0], False) if isinstance(first, tuple) else first
        stored = [u.task_hash for (u, _), o in zip(uploads, outcomes, strict=True)
                  if isinstance(o, tuple)]
        await self.leases.drop(*stored)
        created = sum(1 for o in outcomes if isinstance(o, tuple) and o[1])
        if created:
            self.metrics.stores.inc(created)
            with suppress(NoRoom):  # the cap again, as stores settle (pinned entries stay)
                await self._make_room(0)
        return outcomes  # type: ignore[return-value]

    async def _store_new(self, items: list[tuple[int, Upload, bytes]],
                         outcomes: list, now: float) -> None:
        """The part of :meth:`store_batch` that writes: the objects (one group commit,
        under every digest's lock), room under the cap for the bytes that were new and
        verified, then one index transaction."""
        references = [TaskReference(u.task_hash, u.label, u.compute_seconds, now,
                                    signature=u.signature, expires=u.expires(now))
                      for _, u, _ in items]
        batch = [BatchItem(u.header, body, u.digest, ref, u.type_name)
                 for (_, u, body), ref in zip(items, references, strict=True)]
        async with AsyncExitStack() as locks:
            for digest in sorted({u.digest for _, u, _ in items}):  # one order: no deadlock
                await locks.enter_async_context(self.locks.hold(digest))
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
            try:  # room for what the batch added, received and verified
                await self._make_room(sum(r.sidecar.nbytes for *_, r in stored if r.created))
            except NoRoom as exc:
                for i, upload, _, result in stored:
                    await self._forget_unindexed(upload.digest, upload.task_hash,
                                                 result.created)
                    outcomes[i] = exc
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

    async def report_untrusted(self, task_hash: str) -> None:
        """A client refused this entry for a missing or wrong signature: count it. The entry
        stays; only clients hold the key, so only they can judge it."""
        manifest = await self.manifest(task_hash)
        await self.index.record_untrusted(manifest)
        self.metrics.untrusted.inc()

    async def _forget_replaced(self, old: Manifest, remaining: int) -> None:
        """After an overwrite with another object: the old object goes if nothing
        references it any more, else it just stops listing this entry in its sidecar."""
        async with self.locks.hold(old.digest):
            await to_thread.run_sync(self._forget_object, old.digest, old.hash, remaining)

    async def set_pinned(self, task_hash: str, pinned: bool) -> Manifest:
        """Pin (never evicted) or unpin an entry; idempotent. The pin is recorded in the
        object's sidecar first, then in the index, so a rebuilt index keeps it."""
        manifest = await self.manifest(task_hash)
        async with self.locks.hold(manifest.digest):
            try:
                await to_thread.run_sync(
                    self.storage.set_pinned, manifest.digest, task_hash, pinned
                )
            except (ObjectNotFound, CorruptObject):
                await self._drop_corrupt(manifest, locked=True)
                raise EntryNotFound(task_hash) from None
            except KeyError:  # the sidecar lost this reference: record it again
                reference = TaskReference(
                    task_hash, manifest.label, manifest.compute_seconds, manifest.created, pinned,
                    manifest.signature, manifest.expires,
                )
                await to_thread.run_sync(self.storage.add_task, manifest.digest, reference)
            updated = await self.index.set_pinned(task_hash, pinned)
        if updated is None:
            raise EntryNotFound(task_hash)
        return updated

    async def stream(self, task_hash: str, run: str | None = None
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
        manifest = await self.manifest(task_hash)
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
                await self._drop_corrupt(manifest)
                raise EntryNotFound(task_hash) from None
        except BaseException:
            await held.aclose()
            raise
        try:
            await self.index.record_hit(manifest, run=run)
        except RedisError as exc:  # the value is verified: a lost hit count must not lose it
            logger.warning("could not count a hit of %s: %s", task_hash, exc)
        self.metrics.served.inc()
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
            await self._drop_corrupt(manifest)
            raise
        finally:
            await held.aclose()

    async def locate(self, task_hash: str, run: str | None = None
                     ) -> tuple[Manifest, str | None]:
        """The manifest and where the object lies (``storage.location``) for a client
        about to read it in place (docs/architecture.md, "Direct reads"); counts the hit,
        as the client verifies the digest itself. A missing object drops the entry and
        raises :class:`EntryNotFound`."""
        manifest = await self.manifest(task_hash)
        try:
            location = await to_thread.run_sync(self.storage.location, manifest.digest)
        except ObjectNotFound:
            await self._drop_corrupt(manifest)
            raise EntryNotFound(task_hash) from None
        try:
            await self.index.record_hit(manifest, run=run)
        except RedisError as exc:
            logger.warning("could not count a hit of %s: %s", task_hash, exc)
        self.metrics.served.inc()
        self.metrics.located.inc()
        return manifest, location

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
        if not await self._remove(manifest, "delete"):
            raise EntryNotFound(task_hash)

    async def evict(self, task_hash: str) -> bool:
        """Evict one entry (pinned or not: callers choose) unless its object is being read;
        whether it was evicted."""
        manifest = await self.index.manifest(task_hash)
        if manifest is None or not await self._remove(manifest, "evict"):
            return False
        self.metrics.evictions.inc()
        return True

    async def enforce_cap(self) -> int:
        """Evict (never pinned entries) until the stored objects fit ``max_bytes``; returns
        how many entries were evicted. For ``gc`` (which holds the maintenance lease);
        stores do this themselves."""
        evicted = 0
        if self.max_bytes is not None:
            with suppress(NoRoom):  # what is pinned or being read stays
                evicted = await self._evict_until(self.max_bytes)
        return evicted

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

    async def _remove(self, manifest: Manifest, reason: str) -> bool:
        """Manifest first, then the object if no entry references it any more. An
        eviction leaves an object that is being read alone (False)."""
        async with self.locks.hold(manifest.digest):
            if reason == "evict" and await self.locks.readers(manifest.digest):
                return False
            removed = await self.index.remove(manifest.hash, reason=reason)
            if removed is None:
                return False
            _, remaining = removed
            await to_thread.run_sync(
                self._forget_object, manifest.digest, manifest.hash, remaining
            )
        return True

    def _too_large(self, nbytes: int | None) -> NoRoom:
        size = "the object" if nbytes is None else f"an object of {nbytes} bytes"
        return NoRoom(f"{size} is larger than the cache (max_bytes {self.max_bytes})")

    def _body(self, chunks: AsyncIterable[bytes]) -> UploadBody:
        """The upload's body, cut off at ``max_body_bytes`` (:class:`BodyTooLarge`) or, when
        lower, at the cap (:class:`NoRoom`)."""
        if self.max_bytes is not None and self.max_bytes < self.max_body_bytes:
            return UploadBody(chunks, self.max_bytes, lambda: self._too_large(None),
                              self.body_timeout)
        limit = self.max_body_bytes
        return UploadBody(chunks, limit, lambda: BodyTooLarge(limit), self.body_timeout)

    async def _make_room(self, need: int, keep: str | None = None) -> None:
        """Evict until ``need`` more bytes fit under the cap; :class:`NoRoom` if only pinned
        entries (and ``keep``) are left to evict."""
        cap = self.max_bytes
        if cap is None:
            return
        if need > cap:
            raise self._too_large(need)
        if await self.index.stored_bytes() + need <= cap:
            return
        try:
            async with self.maintenance.hold(wait=MAINTENANCE_WAIT):
                await self._evict_until(cap - need, keep)
        except LockBusy as exc:
            raise NoRoom(f"no room for {need} more bytes: {exc}") from None

    async def _enforce_cap(self, keep: str) -> None:
        """After indexing ``keep``: evict others until the cap holds again; if only pinned
        entries are left, evict ``keep`` itself and raise :class:`NoRoom`."""
        try:
            await self._make_room(0, keep=keep)
        except NoRoom:
            await self.evict(keep)
            raise

    async def _forget_unindexed(self, digest: str, task_hash: str, created: bool) -> None:
        """Undo a put that will not be indexed (caller holds the digest's lock)."""
        remaining = 0 if created else len(await self.index.references(digest))
        await to_thread.run_sync(self._forget_object, digest, task_hash, remaining)

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
        if self.max_bytes is not None and size is not None and size > self.max_bytes:
            raise self._too_large(size)  # before a byte is read (it could never fit)

    async def _drop_corrupt(self, manifest: Manifest, *, locked: bool = False) -> None:
        self.metrics.corrupt.inc()
        if locked:
            await self._drop_corrupt_locked(manifest)
            return
        async with self.locks.hold(manifest.digest):
            await self._drop_corrupt_locked(manifest)

    async def _drop_corrupt_locked(self, manifest: Manifest) -> None:
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

