"""The cache service behind the routes: the Redis index over content-addressed storage.

:class:`ResultCache` is the one object the routes and the maintenance commands call; it
builds the parts below and hands each call to the one that does that job:

- :mod:`.writes`: what happens on a ``PUT`` and a batch store, overwrites, publishing.
- :mod:`.reads`: manifests, ``GET`` streams, ``HEAD``, direct-read locations, and dropping
  an entry whose object turns out missing or corrupt.
- :mod:`.capacity`: the size cap: making room, eviction, refusing what cannot fit.
- :mod:`.removal`: removing entries and their objects in the one safe order (manifest
  first, then the object once unreferenced), expiry.

Lookups, listings, statistics, events, runs, pins and the periodic sweeps are short enough
to live here. Knows nothing of HTTP: bodies arrive as async iterables of bytes, failures are
the errors of :mod:`cache_server.service.errors` and :mod:`storage.errors`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterable, Callable
from contextlib import suppress

from anyio import to_thread
from redis.exceptions import RedisError

from cache_server.index.leases import LeaseStore
from cache_server.index.locks import LockBusy, RedisLock, ReplicaRegistry
from cache_server.index.recipes import RecipeStore
from cache_server.index.redis_index import RedisIndex
from cache_server.index.runs import RunStore
from cache_server.metrics import Metrics
from cache_server.models import (
    MAX_COMPUTE_SECONDS,
    Event,
    Manifest,
    PreviousRecipes,
    PreviousRequest,
    RecipeBatch,
    RunSummary,
    RunWhy,
    Stats,
)
from cache_server.service.body import Receiver
from cache_server.service.budget import DEFAULT_BODY_MEMORY, MemoryBudget
from cache_server.service.capacity import Capacity
from cache_server.service.errors import EntryNotFound, IndexUnavailable, RunNotFound
from cache_server.service.leases import LeaseBounds, Leases
from cache_server.service.locks import DigestLocks
from cache_server.service.reads import ZERO_COPY_MIN_BYTES, FileBody, Reads
from cache_server.service.removal import Removal
from cache_server.service.upload import Upload
from cache_server.service.writes import Writes
from client_lib.wire.bounds import LEASE_BATCH
from storage import (
    CorruptObject,
    ObjectHeader,
    ObjectNotFound,
    ObjectStore,
    Staging,
    TaskReference,
)

__all__ = ["ResultCache"]

#: Beside other live replicas, a temporary path in storage untouched for this long is a
#: crash's leftover.
LEFTOVER_AGE = 3600.0
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
        max_lease_hashes: int = LEASE_BATCH,
        max_uploads: int = 64,
        body_timeout: float = 30.0,
        max_body_memory: int = DEFAULT_BODY_MEMORY,
        zero_copy_min_bytes: int = ZERO_COPY_MIN_BYTES,
        lease_bounds: LeaseBounds | None = None,
        max_run_bytes: int = 4 * 2**20,
        max_runs_bytes: int = 128 * 2**20,
    ) -> None:
        self.index = index
        self.storage = storage
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        bounds = lease_bounds or LeaseBounds()
        self.leases = Leases(LeaseStore(index.topology, bounds.max_leases,
                                        bounds.max_client_leases),
                             index, max_lease_hashes, bounds)
        self.replicas = ReplicaRegistry(index.redis, index.prefix)
        self.locks = DigestLocks(index.redis, index.keys)
        #: Eviction and gc run on one replica at a time.
        self.maintenance = RedisLock(index.redis, f"{index.prefix}maintenance")
        self.runs = RunStore(index.topology, max_run_bytes=max_run_bytes,
                             max_bytes=max_runs_bytes)
        self.recipes = RecipeStore(index.topology)
        self.max_uploads = max_uploads
        self.body_timeout = body_timeout
        self.memory = MemoryBudget(max_body_memory)
        self.removal = Removal(index, storage, self.locks, metrics)
        self.capacity = Capacity(index, self.removal, self.maintenance, metrics, max_bytes)
        self.reads = Reads(index, storage, self.locks, self.memory, self.removal, metrics,
                           zero_copy_min_bytes)
        self.writes = Writes(index, storage, self.locks, self.leases, self.removal,
                             self.capacity, metrics, max_body_bytes=max_body_bytes,
                             max_uploads=max_uploads, body_timeout=body_timeout,
                             memory=self.memory)

    @property
    def max_bytes(self) -> int | None:
        """The size cap (None: none)."""
        return self.capacity.max_bytes

    # -- the write path (.writes) -----------------------------------------------------------

    async def store(self, upload: Upload, chunks: AsyncIterable[bytes] | Receiver
                    ) -> tuple[Manifest, bool]:
        """See :meth:`.Writes.store`."""
        return await self.writes.store(upload, chunks)

    async def staging(self, header: ObjectHeader) -> Staging:
        """See :meth:`.Writes.staging`."""
        return await self.writes.staging(header)

    async def commit_staged(self, upload: Upload, staging_id: str) -> tuple[Manifest, bool]:
        """See :meth:`.Writes.commit_staged`."""
        return await self.writes.commit_staged(upload, staging_id)

    async def store_batch(
        self, chunks: AsyncIterable[bytes] | Receiver, limit: int,
        parse: Callable[[bytearray], list[tuple[Upload, memoryview]]],
        declared: int | None = None,
    ) -> tuple[list[tuple[Upload, memoryview]], list[tuple[Manifest, bool] | Exception]]:
        """See :meth:`.Writes.store_batch`."""
        return await self.writes.store_batch(chunks, limit, parse, declared)

    # -- the read path (.reads) -------------------------------------------------------------

    async def manifest(self, task_hash: str) -> Manifest:
        """See :meth:`.Reads.manifest`."""
        return await self.reads.manifest(task_hash)

    async def head(self, task_hash: str) -> Manifest:
        """See :meth:`.Reads.head`."""
        return await self.reads.head(task_hash)

    async def serve(self, task_hash: str, run: str | None = None, *, zero_copy: bool = False
                    ) -> tuple[Manifest, AsyncGenerator[memoryview] | FileBody]:
        """See :meth:`.Reads.serve`."""
        return await self.reads.serve(task_hash, run, zero_copy=zero_copy)

    async def verify_reported(self, task_hash: str) -> bool:
        """See :meth:`.Reads.verify_reported`."""
        return await self.reads.verify_reported(task_hash)

    async def stream(self, task_hash: str, run: str | None = None
                     ) -> tuple[Manifest, AsyncGenerator[memoryview]]:
        """See :meth:`.Reads.stream`."""
        return await self.reads.stream(task_hash, run)

    async def locate(self, task_hash: str, run: str | None = None
                     ) -> tuple[Manifest, str | None]:
        """See :meth:`.Reads.locate`."""
        return await self.reads.locate(task_hash, run)

    # -- removal and the cap (.removal, .capacity) ------------------------------------------

    async def delete(self, task_hash: str) -> None:
        """Drop an entry; its object goes too once no other entry references the digest."""
        manifest = await self.manifest(task_hash)
        if not await self.removal.remove(manifest, "delete"):
            raise EntryNotFound(task_hash)

    async def evict(self, task_hash: str) -> bool:
        """See :meth:`.Capacity.evict`."""
        return await self.capacity.evict(task_hash)

    async def enforce_cap(self) -> int:
        """See :meth:`.Capacity.enforce_cap`."""
        return await self.capacity.enforce_cap()

    async def remove_expired(self, limit: int = 1000) -> int:
        """See :meth:`.Removal.remove_expired`."""
        return await self.removal.remove_expired(limit)

    # -- lookups, pins, listings, statistics, events, runs ----------------------------------

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
                await self.removal.drop_corrupt(manifest, locked=True)
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

    async def report_untrusted(self, task_hash: str) -> None:
        """A client refused this entry for a missing or wrong signature: count it. The entry
        stays; only clients hold the key, so only they can judge it."""
        manifest = await self.manifest(task_hash)
        await self.index.record_untrusted(manifest)
        self.metrics.untrusted.inc()

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

    async def record_run_why(self, run_id: str, why: RunWhy) -> None:
        await self.runs.put_why(run_id, why)

    # -- recipes (docs/design/hashing.md, "Recipes and why") ---------------------------------

    async def record_recipes(self, batch: RecipeBatch) -> int:
        """Record the recipes of entries the index holds (others are dropped: a recipe
        describes a stored entry); each with its entry's expiry. Returns how many."""
        hashes = [r.hash for r in batch.recipes]
        manifests = await self.index.manifests(hashes) if hashes else []
        records = [(r.slot, r.hash, r.recipe.model_dump_json(exclude_defaults=True),
                    m.expires)
                   for r, m in zip(batch.recipes, manifests, strict=True) if m is not None]
        await self.recipes.put(records)
        return len(records)

    async def previous_recipes(self, request: PreviousRequest) -> PreviousRecipes:
        """The latest record of each slot, whether its entry is still held, and which
        ``labels`` have entries (among the first few by hash) stored without a recipe."""
        previous = await self.recipes.previous(request.slots)
        named = sorted({r["hash"] for r in previous.values() if r["hash"]})
        held = set(await self.index.lookup(named, counted=False)) if named else set()
        for record in previous.values():
            record["held"] = record["hash"] in held
        unrecorded = []
        for label in request.labels[:64]:
            entries, _ = await self.index.page(label=label, limit=20, cursor=None)
            hashes = [m.hash for m in entries]
            if hashes and len(await self.recipes.recorded_among(hashes)) < len(hashes):
                unrecorded.append(label)
        return PreviousRecipes(previous=previous, unrecorded=unrecorded)

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

