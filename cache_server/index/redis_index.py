"""The Redis index: task hash -> manifest, with the access order, pins, hit counts, byte
totals and expiries kept beside it.

Over 400 lines on purpose: every key of the index and every transaction over them stays in
this one class, so no write can forget a key another one maintains. The ``stats`` counters
and the ``events`` stream belong to :mod:`.telemetry`: this class's transactions count and
record into them atomically with the entry they change; lookups are counted per replica and
flushed there.

Keys (all under ``prefix``, default ``rc:``)::

    m:<hash>        STRING  manifest JSON (immutable fields; MGET-able)
    members         SET     every indexed hash: one SMISMEMBER answers a whole lookup
    by_hash         ZSET    every hash, score 0: lexicographic, stable pagination
    label:<label>   ZSET    hashes with that label, score 0
    access          ZSET    hash -> last access time
    evict           ZSET    unpinned hash -> eviction rank (lowest goes first; eviction.py)
    pinned          SET     hashes that are never evicted
    hits            HASH    hash -> hit count
    refs:<digest>   SET     hashes whose result is the object <digest>
    expires         ZSET    hash -> expiry time, for entries stored with a lifetime
    leases          HASH    hash -> deadline, holder, estimate: who computes it now (:mod:`.leases`)
    stats           HASH    the counters, with ``bytes`` and ``stored_bytes`` (:mod:`.telemetry`)
    events          STREAM  recent events (:mod:`.telemetry`)

``bytes`` sums ``nbytes`` over entries; ``stored_bytes`` sums it over distinct objects (a
digest counts from its first reference to the removal of its last): that is what the size
cap limits. Multi-key writes run in MULTI/EXEC transactions (with WATCH where they depend on
a read), so a crash never leaves a half-indexed entry or a wrong byte count. Safe for
concurrent use by many tasks and many server processes sharing one Redis
(:func:`~cache_server.index.transactions.watched` retries a transaction whose reads changed).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import WatchError

from cache_server.index.client import pack_fixed_width
from cache_server.index.eviction import eviction_rank
from cache_server.index.telemetry import Telemetry, stats_from
from cache_server.index.transactions import watched
from cache_server.models import MAX_COMPUTE_SECONDS, Event, Manifest, Stats

__all__ = ["REMOVAL_REASONS", "RedisIndex"]

#: Why an entry is removed (its event kind) -> the counter it adds to.
REMOVAL_REASONS = {"delete": "deletes", "corrupt": "corrupt", "evict": "evictions",
                   "expire": "expired"}


class RedisIndex:
    """The entries and every key kept beside them; counters and events through
    :attr:`telemetry`. ``redis`` must be created with ``decode_responses=True``."""

    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str = "rc:",
        events_maxlen: int = 10_000,
        eviction_half_life: float = 86_400.0,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.eviction_half_life = eviction_half_life
        self._members = f"{prefix}members"
        self._by_hash = f"{prefix}by_hash"
        self._access = f"{prefix}access"
        self._evict = f"{prefix}evict"
        self._pinned = f"{prefix}pinned"
        self._hits = f"{prefix}hits"
        self._expires = f"{prefix}expires"
        #: The counters and events; the transactions below count and record into them.
        self.telemetry = Telemetry(redis, prefix, events_maxlen)
        self._stats = self.telemetry.stats_key

    def _manifest_key(self, task_hash: str) -> str:
        return f"{self.prefix}m:{task_hash}"

    def _label_key(self, label: str) -> str:
        return f"{self.prefix}label:{label}"

    def _refs_key(self, digest: str) -> str:
        return f"{self.prefix}refs:{digest}"

    def _rank(self, manifest: Manifest, last_access: float) -> float:
        return eviction_rank(
            manifest.compute_seconds, manifest.nbytes, last_access, self.eviction_half_life
        )

    async def ping(self) -> bool:
        return bool(await self.redis.ping())

    # -- lookups ----------------------------------------------------------------------------

    async def lookup(self, hashes: Sequence[str]) -> list[str]:
        """The indexed subset of ``hashes`` (distinct, in order), with one SMISMEMBER.

        Counts every distinct hash in ``lookups``, the present ones in ``found`` and the
        absent ones in ``misses`` (:meth:`.Telemetry.count_lookup`).
        """
        unique = list(dict.fromkeys(hashes))
        if not unique:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.smismember(self._members, unique)
            pipe.zcard(self._expires)
            flags, expiring = await pipe.execute()
        found = [h for h, present in zip(unique, flags, strict=True) if present]
        if found and expiring:
            expired = await self.expired_among(found)
            found = [h for h in found if h not in expired]
        self.telemetry.count_lookup(len(unique), len(found))
        return found

    async def lookup_packed(self, packed: bytes) -> bytes:
        """One byte per hash, 1 if indexed, for 32-character hashes sent back to back
        (already validated), with one SMISMEMBER built straight from the buffer: one round
        trip to Redis unless some entry has an expiry.

        Counts every hash in ``lookups``, the present ones in ``found`` and the absent ones
        in ``misses``: senders send each hash once. Expired entries answer 0.
        """
        if not packed:
            return b""
        command = pack_fixed_width("SMISMEMBER", self._members, packed, 32)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.execute_command("SMISMEMBER", command)
            pipe.zcard(self._expires)
            flags, expiring = await pipe.execute()
        answer = bytes(flags)
        found = answer.count(1)
        if found and expiring:
            answer = await self._hide_expired(packed, answer)
            found = answer.count(1)
        self.telemetry.count_lookup(len(answer), found)
        return answer

    async def _hide_expired(self, packed: bytes, answer: bytes) -> bytes:
        found = [packed[32 * i:32 * i + 32].decode("ascii")
                 for i, flag in enumerate(answer) if flag]
        expired = await self.expired_among(found)
        if not expired:
            return answer
        return bytes(0 if flag and packed[32 * i:32 * i + 32].decode("ascii") in expired
                     else flag for i, flag in enumerate(answer))

    async def expired_among(self, hashes: Sequence[str], now: float | None = None) -> set[str]:
        """The hashes among ``hashes`` whose entries have expired (still indexed until they
        are removed: lazily by the service, or by ``gc``)."""
        if not hashes or not await self.redis.zcard(self._expires):
            return set()
        now = time.time() if now is None else now
        scores = await self.redis.zmscore(self._expires, list(hashes))
        return {h for h, s in zip(hashes, scores, strict=True) if s is not None and s <= now}

    async def all_expired(self, now: float | None = None, limit: int = 1000) -> list[str]:
        """Up to ``limit`` expired hashes, soonest expired first."""
        now = time.time() if now is None else now
        return [str(h) for h in await self.redis.zrangebyscore(
            self._expires, "-inf", now, start=0, num=limit)]

    async def contains(self, task_hash: str) -> bool:
        """Indexed and not expired; counts nothing (lease waiters poll this)."""
        if not await self.redis.sismember(self._members, task_hash):
            return False
        return not await self.expired_among([task_hash])

    async def manifest(self, task_hash: str) -> Manifest | None:
        manifests = await self.manifests([task_hash])
        return manifests[0]

    async def manifests(self, hashes: Sequence[str]) -> list[Manifest | None]:
        """Manifests with live ``hits`` and ``last_access``, in one round trip."""
        if not hashes:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.mget([self._manifest_key(h) for h in hashes])
            pipe.hmget(self._hits, list(hashes))
            pipe.zmscore(self._access, list(hashes))
            pipe.smismember(self._pinned, list(hashes))
            raw, hits, access, pinned = await pipe.execute()
        result: list[Manifest | None] = []
        for text, hit_count, last_access, is_pinned in zip(raw, hits, access, pinned, strict=True):
            if text is None:
                result.append(None)
                continue
            manifest = Manifest.model_validate_json(text)
            manifest.hits = int(hit_count or 0)
            manifest.last_access = float(last_access or manifest.created)
            manifest.pinned = bool(is_pinned)
            result.append(manifest)
        return result

    async def page(
        self, *, label: str | None, limit: int, cursor: str | None
    ) -> tuple[list[Manifest], str | None]:
        """One page of entries ordered by hash; the cursor is the last hash of the page."""
        key = self._by_hash if label is None else self._label_key(label)
        start = f"({cursor}" if cursor else "-"
        hashes = [str(h) for h in await self.redis.zrangebylex(key, start, "+", start=0, num=limit)]
        manifests = [m for m in await self.manifests(hashes) if m is not None]
        next_cursor = hashes[-1] if len(hashes) == limit else None
        return manifests, next_cursor

    # -- writes -----------------------------------------------------------------------------

    async def add(self, manifest: Manifest, *, record: bool = True, run: str | None = None
                  ) -> tuple[Manifest, bool]:
        """Index ``manifest`` unless its hash is indexed already.

        Returns the indexed manifest and whether it was added now. Call only once the object
        is durable in storage. ``manifest.pinned`` is kept; ``manifest.last_access`` is used
        when set (reindex), else ``created``. ``record=False`` (reindex) neither counts a
        store nor records an event; ``run``: the run id its ``store`` event names.
        """
        await self.telemetry.flush()
        key = self._manifest_key(manifest.hash)
        refs = self._refs_key(manifest.digest)

        async def attempt(pipe: Any) -> tuple[Manifest, bool]:
            await pipe.watch(key, refs)
            if await pipe.exists(key):
                await pipe.unwatch()
                existing = await self.manifest(manifest.hash)
                if existing is None:
                    raise WatchError("deleted meanwhile")  # start over
                return existing, False
            first_reference = not await pipe.exists(refs)
            pipe.multi()
            self._queue_add(pipe, manifest, first_reference, record, run)
            await pipe.execute()
            return manifest, True

        return await watched(self.redis, attempt)

    async def add_many(self, manifests: Sequence[Manifest],
                       runs: Sequence[str | None] | None = None
                       ) -> list[tuple[Manifest, bool]]:
        """:meth:`add` for many manifests (distinct hashes) in one transaction: what a
        batch store indexes once its objects are durable. Per manifest, in order, the
        indexed manifest and whether it was added now. ``runs``: per manifest, the run
        id its ``store`` event names."""
        await self.telemetry.flush()
        runs = list(runs) if runs is not None else [None] * len(manifests)
        if not manifests:
            return []
        keys = [self._manifest_key(m.hash) for m in manifests]
        refs = list(dict.fromkeys(self._refs_key(m.digest) for m in manifests))

        async def attempt(pipe: Any) -> list[tuple[Manifest, bool]]:
            await pipe.watch(*keys, *refs)
            async with self.redis.pipeline(transaction=False) as reads:
                for key in (*keys, *refs):
                    reads.exists(key)
                answers = await reads.execute()
            present = answers[:len(keys)]
            referenced = {ref for ref, n in zip(refs, answers[len(keys):], strict=True) if n}
            if all(present):
                await pipe.unwatch()
            else:
                pipe.multi()
                for manifest, found, run in zip(manifests, present, runs, strict=True):
                    if found:
                        continue
                    ref = self._refs_key(manifest.digest)
                    self._queue_add(pipe, manifest, ref not in referenced, True, run)
                    referenced.add(ref)
                await pipe.execute()
            existing = [m.hash for m, found in zip(manifests, present, strict=True) if found]
            current = dict(zip(existing, await self.manifests(existing), strict=True))
            if any(m is None for m in current.values()):
                raise WatchError("deleted meanwhile")  # start over (nothing was written)
            return [(current[m.hash], False) if found else (m, True)  # type: ignore[misc]
                    for m, found in zip(manifests, present, strict=True)]

        return await watched(self.redis, attempt)

    def _queue_add(self, pipe: Any, manifest: Manifest, first_reference: bool,
                   record: bool, run: str | None = None) -> None:
        """Queue the writes that index ``manifest`` (inside a transaction); sets its
        ``last_access``."""
        stored = manifest.model_dump_json(exclude={"hits", "last_access", "pinned"})
        last_access = max(manifest.last_access, manifest.created)
        pipe.set(self._manifest_key(manifest.hash), stored)
        pipe.sadd(self._members, manifest.hash)
        pipe.zadd(self._by_hash, {manifest.hash: 0})
        pipe.zadd(self._label_key(manifest.label), {manifest.hash: 0})
        pipe.zadd(self._access, {manifest.hash: last_access})
        if manifest.pinned:
            pipe.sadd(self._pinned, manifest.hash)
        else:
            pipe.zadd(self._evict, {manifest.hash: self._rank(manifest, last_access)})
        pipe.hdel(self._hits, manifest.hash)
        if manifest.expires is not None:
            pipe.zadd(self._expires, {manifest.hash: manifest.expires})
        pipe.sadd(self._refs_key(manifest.digest), manifest.hash)
        pipe.hincrby(self._stats, "bytes", manifest.nbytes)
        if first_reference:
            pipe.hincrby(self._stats, "stored_bytes", manifest.nbytes)
        if record:
            pipe.hincrby(self._stats, "stores", 1)
            self.telemetry.add_event(pipe, "store", task_hash=manifest.hash,
                                     label=manifest.label, run=run)
        manifest.last_access = last_access

    async def remove(
        self, task_hash: str, *, reason: str = "delete"
    ) -> tuple[Manifest, int] | None:
        """Drop an entry; ``reason`` is the event kind (``delete``, ``corrupt``, ``evict``).

        Returns the removed manifest and how many entries still reference its digest, or
        None if the hash was not indexed. When none do, the object no longer counts in
        ``stored_bytes``: the caller deletes it (a crash before that leaves an orphan
        object for ``gc``, never a manifest without its object).
        """
        await self.telemetry.flush()
        counter = REMOVAL_REASONS[reason]
        key = self._manifest_key(task_hash)

        async def attempt(pipe: Any) -> tuple[Manifest, int] | None:
            manifest = await self._watched_manifest(pipe, key)
            if manifest is None:
                return None
            refs = self._refs_key(manifest.digest)
            await pipe.watch(refs)
            others = set(await pipe.smembers(refs)) - {task_hash}
            pipe.multi()
            pipe.delete(key)
            pipe.srem(self._members, task_hash)
            pipe.zrem(self._by_hash, task_hash)
            pipe.zrem(self._label_key(manifest.label), task_hash)
            pipe.zrem(self._access, task_hash)
            pipe.zrem(self._evict, task_hash)
            pipe.srem(self._pinned, task_hash)
            pipe.hdel(self._hits, task_hash)
            pipe.zrem(self._expires, task_hash)
            pipe.srem(refs, task_hash)
            pipe.hincrby(self._stats, "bytes", -manifest.nbytes)
            if not others:
                pipe.hincrby(self._stats, "stored_bytes", -manifest.nbytes)
            pipe.hincrby(self._stats, counter, 1)
            self.telemetry.add_event(pipe, reason, task_hash=task_hash, label=manifest.label)
            pipe.scard(refs)
            results = await pipe.execute()
            return manifest, int(results[-1])

        return await watched(self.redis, attempt)

    async def replace(self, manifest: Manifest, run: str | None = None
                      ) -> tuple[Manifest, int] | None:
        """Overwrite an indexed entry with ``manifest`` (a refreshed result), atomically.

        Returns the replaced manifest and how many entries still reference its digest
        (0: the caller deletes that object), or None if the hash was not indexed (then
        nothing changed: :meth:`add` it). Hits and the pin are kept; the label, cost,
        expiry and object are the new ones. Call only once the new object is durable.
        """
        await self.telemetry.flush()
        key = self._manifest_key(manifest.hash)
        new_refs = self._refs_key(manifest.digest)
        stored = manifest.model_dump_json(exclude={"hits", "last_access", "pinned"})

        async def attempt(pipe: Any) -> tuple[Manifest, int] | None:
            old = await self._watched_manifest(pipe, key)
            if old is None:
                return None
            old_refs = self._refs_key(old.digest)
            await pipe.watch(old_refs, new_refs, self._pinned)
            same = old.digest == manifest.digest
            others = set(await pipe.smembers(old_refs)) - {manifest.hash}
            first_reference = not same and not await pipe.exists(new_refs)
            pinned = bool(await pipe.sismember(self._pinned, manifest.hash))
            now = time.time()
            pipe.multi()
            pipe.set(key, stored)
            if old.label != manifest.label:
                pipe.zrem(self._label_key(old.label), manifest.hash)
                pipe.zadd(self._label_key(manifest.label), {manifest.hash: 0})
            pipe.zadd(self._access, {manifest.hash: now})
            if not pinned:
                pipe.zadd(self._evict, {manifest.hash: self._rank(manifest, now)})
            if manifest.expires is not None:
                pipe.zadd(self._expires, {manifest.hash: manifest.expires})
            else:
                pipe.zrem(self._expires, manifest.hash)
            if not same:
                pipe.srem(old_refs, manifest.hash)
                pipe.sadd(new_refs, manifest.hash)
                if not others:
                    pipe.hincrby(self._stats, "stored_bytes", -old.nbytes)
                if first_reference:
                    pipe.hincrby(self._stats, "stored_bytes", manifest.nbytes)
            pipe.hincrby(self._stats, "bytes", manifest.nbytes - old.nbytes)
            pipe.hincrby(self._stats, "stores", 1)
            pipe.hincrby(self._stats, "overwrites", 1)
            self.telemetry.add_event(pipe, "store", task_hash=manifest.hash,
                                     label=manifest.label, now=now, run=run)
            await pipe.execute()
            return old, len(others) + (1 if same else 0)

        return await watched(self.redis, attempt)

    @staticmethod
    async def _watched_manifest(pipe: Any, key: str) -> Manifest | None:
        """WATCH a manifest key and read it (a transaction that depends on it follows);
        ``None``, unwatched, if the entry does not exist."""
        await pipe.watch(key)
        text = await pipe.get(key)
        if text is None:
            await pipe.unwatch()
            return None
        return Manifest.model_validate_json(text)

    async def record_hit(self, manifest: Manifest, now: float | None = None,
                         run: str | None = None) -> None:
        """Count an object served: ``served``, saved seconds, the entry's hit count and
        access time, a ``hit`` event naming ``run`` when known (one transaction)."""
        await self.telemetry.flush()
        now = time.time() if now is None else now
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hincrby(self._stats, "served", 1)
            # (bounded: an entry stored before uploads were checked cannot make it infinite)
            saved = min(manifest.compute_seconds, MAX_COMPUTE_SECONDS)
            pipe.hincrbyfloat(self._stats, "saved_seconds", saved)
            pipe.hincrby(self._hits, manifest.hash, 1)
            pipe.zadd(self._access, {manifest.hash: now}, xx=True)
            pipe.zadd(self._evict, {manifest.hash: self._rank(manifest, now)}, xx=True)
            self.telemetry.add_event(pipe, "hit", task_hash=manifest.hash,
                                     label=manifest.label, now=now, seconds=saved, run=run)
            await pipe.execute()

    async def record_untrusted(self, manifest: Manifest) -> None:
        """Count a load a client refused for a missing or wrong signature (one transaction)."""
        await self.telemetry.flush()
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hincrby(self._stats, "untrusted", 1)
            self.telemetry.add_event(pipe, "untrusted", task_hash=manifest.hash,
                                     label=manifest.label)
            await pipe.execute()

    async def set_pinned(self, task_hash: str, pinned: bool) -> Manifest | None:
        """Pin (never evicted) or unpin an entry; None if it is not indexed. Idempotent."""
        key = self._manifest_key(task_hash)

        async def attempt(pipe: Any) -> bool:
            manifest = await self._watched_manifest(pipe, key)
            if manifest is None:
                return False
            last_access = await pipe.zscore(self._access, task_hash)
            last_access = float(last_access or manifest.created)
            pipe.multi()
            if pinned:
                pipe.sadd(self._pinned, task_hash)
                pipe.zrem(self._evict, task_hash)
            else:
                pipe.srem(self._pinned, task_hash)
                pipe.zadd(self._evict, {task_hash: self._rank(manifest, last_access)})
            await pipe.execute()
            return True

        if not await watched(self.redis, attempt):
            return None
        return await self.manifest(task_hash)

    async def stored_bytes(self) -> int:
        """Bytes of the distinct objects the index references (what the size cap limits)."""
        return int(await self.redis.hget(self._stats, "stored_bytes") or 0)

    async def eviction_candidates(self, count: int) -> list[str]:
        """Up to ``count`` unpinned hashes, lowest eviction score first."""
        return [str(h) for h in await self.redis.zrange(self._evict, 0, count - 1)]

    async def references(self, digest: str) -> set[str]:
        """The indexed hashes whose result is the object ``digest``."""
        return {str(h) for h in await self.redis.smembers(self._refs_key(digest))}

    async def all_hashes(self, batch: int = 1000) -> AsyncIterator[list[str]]:
        """Every indexed hash, in batches (SSCAN: entries added meanwhile may be missed)."""
        cursor: int | str = 0
        while True:
            cursor, hashes = await self.redis.sscan(self._members, cursor, count=batch)
            if hashes:
                yield [str(h) for h in hashes]
            if int(cursor) == 0:
                return

    async def recount(self) -> tuple[int, int]:
        """Recompute ``bytes`` and ``stored_bytes`` from the manifests and rebuild the
        eviction order (after a crash of an older version, or a new half-life).

        For maintenance (``gc``, ``reindex``) while no server writes to this index.
        Returns (bytes, stored_bytes).
        """
        total = stored = 0
        digests: set[str] = set()
        await self.redis.delete(self._evict)
        async for hashes in self.all_hashes():
            ranks: dict[str, float] = {}
            for manifest in await self.manifests(hashes):
                if manifest is None:
                    continue
                total += manifest.nbytes
                if manifest.digest not in digests:
                    digests.add(manifest.digest)
                    stored += manifest.nbytes
                if not manifest.pinned:
                    ranks[manifest.hash] = self._rank(manifest, manifest.last_access)
            if ranks:
                await self.redis.zadd(self._evict, ranks)
        await self.redis.hset(self._stats, mapping={"bytes": total, "stored_bytes": stored})
        return total, stored

    # -- statistics and events (kept by .telemetry) ------------------------------------------

    async def stats(self) -> Stats:
        """The counters (this replica's lookups flushed first) and the index's sizes."""
        await self.telemetry.flush()
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(self._stats)
            pipe.scard(self._members)
            pipe.scard(self._pinned)
            counters, entries, pinned = await pipe.execute()
        return stats_from(counters, int(entries), int(pinned))

    async def events(self, limit: int) -> list[Event]:
        """The most recent events, newest first."""
        return [event for _id, event in await self.telemetry.events_with_ids(limit)]

    async def events_with_ids(self, limit: int) -> list[tuple[str, Event]]:
        """The most recent events with their stream ids, newest first."""
        return await self.telemetry.events_with_ids(limit)

    async def events_after(self, last_id: str, limit: int, block_ms: int
                           ) -> list[tuple[str, Event]]:
        """See :meth:`.Telemetry.events_after`."""
        return await self.telemetry.events_after(last_id, limit, block_ms)

    async def record_run_event(self, run_id: str, status: str, stored: int | None) -> None:
        await self.telemetry.record_run_event(run_id, status, stored)

    async def close(self) -> None:
        """Add what this process counted to Redis (before the Redis client closes)."""
        await self.telemetry.close()
