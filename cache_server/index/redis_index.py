"""The Redis index: task hash -> manifest, with the access order, pins, hit counts, byte
totals and expiries kept beside it. :class:`RedisIndex` writes; its reads are
:class:`~.queries.IndexReads`.

Every transaction over the index's keys stays in this one class, so no write can forget a
key another one maintains. The ``stats`` counters and the ``events`` stream belong to
:mod:`.telemetry`: this class's transactions count and record into them atomically with the
entry they change; lookups are counted per replica and flushed there.

Keys (all under ``prefix``, default ``rc:``; in a Redis Cluster, each shard has its own set
of them: :mod:`.keyspace`)::

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
    durable         STRING  written before each ``WAIT`` for replicas (:mod:`.durability`)

``bytes`` sums ``nbytes`` over entries; ``stored_bytes`` sums it over distinct objects (a
digest counts from its first reference to the removal of its last): that is what the size
cap limits. Multi-key writes run in MULTI/EXEC transactions (with WATCH where they depend on
a read), so a crash never leaves a half-indexed entry or a wrong byte count. Safe for
concurrent use by many tasks and many server processes sharing one Redis
(:func:`~cache_server.index.transactions.watched` retries a transaction whose reads changed).

In a Redis Cluster a transaction holds the keys of one shard. An entry's keys, and the
``refs`` of the digests its shard's entries name, are in its shard; whether a digest is
referenced *elsewhere* (its first reference, its last) is read from the other shards inside
the transaction, before its ``EXEC``. That read is exact while nobody else adds or removes a
reference to the same digest meanwhile, which the service makes sure of: it holds the
digest's lock around every add and removal (:mod:`cache_server.service.removal`). The
events of a shard's transaction are added right after it (the stream is in a slot of its
own): a crash in between loses an event, never an entry or a count.

Stores are acknowledged once replicated (:mod:`.durability`): :meth:`add`, :meth:`add_many`,
:meth:`replace` and :meth:`set_pinned` return only after ``WAIT`` for the replicas asked
for (:class:`~.durability.NotReplicated` if they do not answer in time).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from redis.exceptions import WatchError

from cache_server.index.client import IndexRedis
from cache_server.index.durability import Durability
from cache_server.index.eviction import eviction_rank
from cache_server.index.keyspace import Shard
from cache_server.index.queries import IndexReads
from cache_server.models import MAX_COMPUTE_SECONDS, Manifest

__all__ = ["REMOVAL_REASONS", "RedisIndex"]

#: Why an entry is removed (its event kind) -> the counter it adds to.
REMOVAL_REASONS = {"delete": "deletes", "corrupt": "corrupt", "evict": "evictions",
                   "expire": "expired"}


class RedisIndex(IndexReads):
    """The entries and every key kept beside them; counters and events through
    :attr:`telemetry`. ``redis`` comes from :func:`.client.connect` (or returns strings
    otherwise: ``decode_responses=True``). ``min_replicas`` and ``replica_timeout``: how
    stores wait for replicas (:class:`~.durability.Durability`)."""

    def __init__(
        self,
        redis: IndexRedis,
        *,
        prefix: str = "rc:",
        events_maxlen: int = 10_000,
        eviction_half_life: float = 86_400.0,
        min_replicas: int | None = None,
        replica_timeout: float = 1.0,
    ) -> None:
        super().__init__(redis, prefix, events_maxlen)
        self.eviction_half_life = eviction_half_life
        self.durability = Durability(self.topology, min_replicas, replica_timeout)

    def _rank(self, manifest: Manifest, last_access: float) -> float:
        return eviction_rank(
            manifest.compute_seconds, manifest.nbytes, last_access, self.eviction_half_life
        )

    def _event(self, pipe: Any, later: list[str], kind: str, **fields: Any) -> None:
        """Record an event with the transaction ``pipe``; in a Cluster, in ``later``, which
        :meth:`_published` adds to the stream once the transaction succeeded."""
        if self.keys.sharded:
            later.append(self.telemetry.event(kind, **fields))
        else:
            self.telemetry.add_event(pipe, kind, **fields)

    async def _published(self, later: list[str], durable: Iterable[Shard] = ()) -> None:
        """After a transaction: its events (Cluster), then the wait for replicas of the
        shards in ``durable``."""
        await self.telemetry.publish(later)
        await self.durability.confirm(durable)

    async def _elsewhere(self, digest: str, shard: Shard) -> int:
        """How many entries outside ``shard`` reference ``digest`` (0 on one Redis)."""
        if not self.keys.sharded:
            return 0
        answers = await self.topology.per_shard(
            [(other, lambda pipe, other=other: pipe.scard(other.refs(digest)))
             for other in self.keys.shards if other.number != shard.number])
        return sum(int(n) for (n,) in answers)

    async def confirm(self, *task_hashes: str) -> None:
        """Return once the entries of ``task_hashes``, as the primary has them now, are
        replicated as stores are: before answering "already stored" (that entry may be
        another request's store, not replicated yet)."""
        await self.durability.confirm({self.keys.shard_of(h) for h in task_hashes})

    # -- writes -----------------------------------------------------------------------------

    async def add(self, manifest: Manifest, *, record: bool = True, run: str | None = None
                  ) -> tuple[Manifest, bool]:
        """Index ``manifest`` unless its hash is indexed already.

        Returns the indexed manifest and whether it was added now, once it is replicated.
        Call only once the object is durable in storage. ``manifest.pinned`` is kept;
        ``manifest.last_access`` is used when set (reindex), else ``created``.
        ``record=False`` (reindex) neither counts a store nor records an event; ``run``:
        the run id its ``store`` event names.
        """
        await self.telemetry.flush()
        later: list[str] = []
        shard = self.keys.shard_of(manifest.hash)
        key, refs = shard.manifest(manifest.hash), shard.refs(manifest.digest)

        async def attempt(pipe: Any) -> tuple[Manifest, bool]:
            later.clear()
            await pipe.watch(key, refs)
            if await pipe.exists(key):
                await pipe.unwatch()
                existing = await self.manifest(manifest.hash)
                if existing is None:
                    raise WatchError("deleted meanwhile")  # start over
                return existing, False
            first_reference = (not await pipe.exists(refs)
                               and not await self._elsewhere(manifest.digest, shard))
            pipe.multi()
            self._queue_adds(pipe, shard, [(manifest, first_reference, run)], record, later)
            await pipe.execute()
            return manifest, True

        result = await self.topology.transact(shard.prefix, attempt)
        await self._published(later, [shard])
        return result

    async def add_many(self, manifests: Sequence[Manifest],
                       runs: Sequence[str | None] | None = None
                       ) -> list[tuple[Manifest, bool]]:
        """:meth:`add` for many manifests (distinct hashes) in one transaction (in a
        Cluster: one per shard, in shard order): what a batch store indexes once its
        objects are durable. Per manifest, in order, the indexed manifest and whether it
        was added now. ``runs``: per manifest, the run id its ``store`` event names."""
        await self.telemetry.flush()
        runs = list(runs) if runs is not None else [None] * len(manifests)
        if not manifests:
            return []
        later: list[str] = []
        # Cluster: which shards referenced each digest before, and the digests this batch
        # references now (an earlier shard's transaction counted them).
        before = await self._referencing_shards({m.digest for m in manifests})
        counted: set[str] = set()
        results: list[tuple[Manifest, bool] | None] = [None] * len(manifests)
        groups = self.keys.group([m.hash for m in manifests])
        for shard, positions in groups:
            part = [(manifests[i], runs[i]) for i in positions]
            answers = await self._add_in_shard(shard, part, before, counted, later)
            for i, result in zip(positions, answers, strict=True):
                results[i] = result
        await self._published(later, [shard for shard, _ in groups])
        return results  # type: ignore[return-value]

    async def _referencing_shards(self, digests: set[str]) -> dict[str, set[int]]:
        """Cluster: digest -> the shards whose entries reference it ({} on one Redis)."""
        if not self.keys.sharded or not digests:
            return {}
        order = sorted(digests)
        answers = await self.topology.per_shard(
            [(shard, lambda pipe, shard=shard: [pipe.exists(shard.refs(d)) for d in order])
             for shard in self.keys.shards])
        found: dict[str, set[int]] = {d: set() for d in order}
        for shard, flags in zip(self.keys.shards, answers, strict=True):
            for digest, flag in zip(order, flags, strict=True):
                if flag:
                    found[digest].add(shard.number)
        return found

    async def _add_in_shard(self, shard: Shard, part: list[tuple[Manifest, str | None]],
                            before: dict[str, set[int]], counted: set[str],
                            later: list[str]) -> list[tuple[Manifest, bool]]:
        keys = [shard.manifest(m.hash) for m, _ in part]
        digests = list(dict.fromkeys(m.digest for m, _ in part))
        refs = [shard.refs(d) for d in digests]
        events_before = len(later)

        async def attempt(pipe: Any) -> list[tuple[Manifest, bool]]:
            del later[events_before:]
            await pipe.watch(*keys, *refs)
            client = await self.topology.client_for(shard.prefix)
            async with client.pipeline(transaction=False) as reads:
                for key in (*keys, *refs):
                    reads.exists(key)
                answers = await reads.execute()
            present = answers[:len(keys)]
            referenced = {d for d, n in zip(digests, answers[len(keys):], strict=True)
                          if n or d in counted or before.get(d, set()) - {shard.number}}
            added: set[str] = set()
            if all(present):
                await pipe.unwatch()
            else:
                new: list[tuple[Manifest, bool, str | None]] = []
                for (manifest, run), found in zip(part, present, strict=True):
                    if found:
                        continue
                    new.append((manifest, manifest.digest not in referenced, run))
                    referenced.add(manifest.digest)
                    added.add(manifest.digest)
                pipe.multi()
                self._queue_adds(pipe, shard, new, True, later)
                await pipe.execute()
            counted.update(added)
            existing = [m.hash for (m, _), found in zip(part, present, strict=True) if found]
            current = dict(zip(existing, await self.manifests(existing), strict=True))
            if any(m is None for m in current.values()):
                raise WatchError("deleted meanwhile")  # start over (nothing was written)
            return [(current[m.hash], False) if found else (m, True)  # type: ignore[misc]
                    for (m, _), found in zip(part, present, strict=True)]

        return await self.topology.transact(shard.prefix, attempt)

    def _queue_adds(self, pipe: Any, shard: Shard,
                    items: Sequence[tuple[Manifest, bool, str | None]], record: bool,
                    later: list[str]) -> None:
        """Queue the writes that index each ``(manifest, first_reference, run)`` of
        ``items`` (distinct hashes, inside a transaction on ``shard``); sets their
        ``last_access``. One command per key for the whole batch, not per entry: each
        reply of a transaction is read on its own (two per command), and a batch store
        paid ~300 µs per entry for a dozen commands each (BENCHMARKS.md, section 19)."""
        if not items:
            return
        stored: dict[str, str] = {}
        access: dict[str, float] = {}
        evict: dict[str, float] = {}
        expires: dict[str, float] = {}
        labels: dict[str, dict[str, int]] = {}
        refs: dict[str, list[str]] = {}
        pinned: list[str] = []
        nbytes = first_bytes = 0
        for manifest, first_reference, _ in items:
            h = manifest.hash
            last_access = max(manifest.last_access, manifest.created)
            stored[shard.manifest(h)] = manifest.model_dump_json(
                exclude={"hits", "last_access", "pinned"})
            access[h] = last_access
            labels.setdefault(manifest.label, {})[h] = 0
            if manifest.pinned:
                pinned.append(h)
            else:
                evict[h] = self._rank(manifest, last_access)
            if manifest.expires is not None:
                expires[h] = manifest.expires
            refs.setdefault(manifest.digest, []).append(h)
            nbytes += manifest.nbytes
            if first_reference:
                first_bytes += manifest.nbytes
            manifest.last_access = last_access
        hashes = list(access)
        pipe.mset(stored)
        pipe.sadd(shard.members, *hashes)
        pipe.zadd(shard.by_hash, dict.fromkeys(hashes, 0))
        for label, members in labels.items():
            pipe.zadd(shard.label(label), members)
        pipe.zadd(shard.access, access)
        if pinned:
            pipe.sadd(shard.pinned, *pinned)
        if evict:
            pipe.zadd(shard.evict, evict)
        pipe.hdel(shard.hits, *hashes)
        if expires:
            pipe.zadd(shard.expires, expires)
        for digest, members in refs.items():
            pipe.sadd(shard.refs(digest), *members)
        pipe.hincrby(shard.stats, "bytes", nbytes)
        if first_bytes:
            pipe.hincrby(shard.stats, "stored_bytes", first_bytes)
        if record:
            pipe.hincrby(shard.stats, "stores", len(items))
            for manifest, _, run in items:
                self._event(pipe, later, "store", task_hash=manifest.hash,
                            label=manifest.label, run=run)

    async def remove(
        self, task_hash: str, *, reason: str = "delete", digest: str | None = None
    ) -> tuple[Manifest, int] | None:
        """Drop an entry; ``reason`` is the event kind (``delete``, ``corrupt``, ``evict``).

        Returns the removed manifest and how many entries still reference its digest, or
        None if the hash was not indexed (or, given ``digest``, its entry names another
        object now: a refresh replaced it, so it is left alone). When none do, the object
        no longer counts in ``stored_bytes``: the caller deletes it (a crash before that
        leaves an orphan object for ``gc``, never a manifest without its object).
        """
        await self.telemetry.flush()
        counter = REMOVAL_REASONS[reason]
        shard = self.keys.shard_of(task_hash)
        key = shard.manifest(task_hash)
        later: list[str] = []

        async def attempt(pipe: Any) -> tuple[Manifest, int] | None:
            later.clear()
            manifest = await self._watched_manifest(pipe, key)
            if manifest is None or digest not in (None, manifest.digest):
                return None
            refs = shard.refs(manifest.digest)
            await pipe.watch(refs)
            others = set(await pipe.smembers(refs)) - {task_hash}
            elsewhere = await self._elsewhere(manifest.digest, shard)
            pipe.multi()
            pipe.delete(key)
            pipe.srem(shard.members, task_hash)
            pipe.zrem(shard.by_hash, task_hash)
            pipe.zrem(shard.label(manifest.label), task_hash)
            pipe.zrem(shard.access, task_hash)
            pipe.zrem(shard.evict, task_hash)
            pipe.srem(shard.pinned, task_hash)
            pipe.hdel(shard.hits, task_hash)
            pipe.zrem(shard.expires, task_hash)
            pipe.srem(refs, task_hash)
            pipe.hincrby(shard.stats, "bytes", -manifest.nbytes)
            if not others and not elsewhere:
                pipe.hincrby(shard.stats, "stored_bytes", -manifest.nbytes)
            pipe.hincrby(shard.stats, counter, 1)
            self._event(pipe, later, reason, task_hash=task_hash, label=manifest.label)
            pipe.scard(refs)
            results = await pipe.execute()
            return manifest, int(results[-1]) + elsewhere

        removed = await self.topology.transact(shard.prefix, attempt)
        await self._published(later)
        return removed

    async def replace(self, manifest: Manifest, run: str | None = None
                      ) -> tuple[Manifest, int] | None:
        """Overwrite an indexed entry with ``manifest`` (a refreshed result), atomically.

        Returns the replaced manifest and how many entries still reference its digest
        (0: the caller deletes that object), or None if the hash was not indexed (then
        nothing changed: :meth:`add` it). Hits and the pin are kept; the label, cost,
        expiry and object are the new ones. Call only once the new object is durable.
        """
        await self.telemetry.flush()
        shard = self.keys.shard_of(manifest.hash)
        key = shard.manifest(manifest.hash)
        new_refs = shard.refs(manifest.digest)
        stored = manifest.model_dump_json(exclude={"hits", "last_access", "pinned"})
        later: list[str] = []

        async def attempt(pipe: Any) -> tuple[Manifest, int] | None:
            later.clear()
            old = await self._watched_manifest(pipe, key)
            if old is None:
                return None
            old_refs = shard.refs(old.digest)
            await pipe.watch(old_refs, new_refs, shard.pinned)
            same = old.digest == manifest.digest
            others = set(await pipe.smembers(old_refs)) - {manifest.hash}
            old_elsewhere = 0 if same else await self._elsewhere(old.digest, shard)
            first_reference = not same and not await pipe.exists(new_refs) and not (
                await self._elsewhere(manifest.digest, shard))
            pinned = bool(await pipe.sismember(shard.pinned, manifest.hash))
            now = time.time()
            pipe.multi()
            pipe.set(key, stored)
            if old.label != manifest.label:
                pipe.zrem(shard.label(old.label), manifest.hash)
                pipe.zadd(shard.label(manifest.label), {manifest.hash: 0})
            pipe.zadd(shard.access, {manifest.hash: now})
            if not pinned:
                pipe.zadd(shard.evict, {manifest.hash: self._rank(manifest, now)})
            if manifest.expires is not None:
                pipe.zadd(shard.expires, {manifest.hash: manifest.expires})
            else:
                pipe.zrem(shard.expires, manifest.hash)
            if not same:
                pipe.srem(old_refs, manifest.hash)
                pipe.sadd(new_refs, manifest.hash)
                if not others and not old_elsewhere:
                    pipe.hincrby(shard.stats, "stored_bytes", -old.nbytes)
                if first_reference:
                    pipe.hincrby(shard.stats, "stored_bytes", manifest.nbytes)
            pipe.hincrby(shard.stats, "bytes", manifest.nbytes - old.nbytes)
            pipe.hincrby(shard.stats, "stores", 1)
            pipe.hincrby(shard.stats, "overwrites", 1)
            self._event(pipe, later, "store", task_hash=manifest.hash, label=manifest.label,
                        now=now, run=run)
            await pipe.execute()
            return old, len(others) + old_elsewhere + (1 if same else 0)

        replaced = await self.topology.transact(shard.prefix, attempt)
        await self._published(later, [shard])
        return replaced

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
        shard = self.keys.shard_of(manifest.hash)
        # (bounded: an entry stored before uploads were checked cannot make it infinite)
        saved = min(manifest.compute_seconds, MAX_COMPUTE_SECONDS)
        later: list[str] = []

        async def count(client: Any) -> None:
            later.clear()
            async with client.pipeline(transaction=True) as pipe:
                pipe.hincrby(shard.stats, "served", 1)
                pipe.hincrbyfloat(shard.stats, "saved_seconds", saved)
                pipe.hincrby(shard.hits, manifest.hash, 1)
                pipe.zadd(shard.access, {manifest.hash: now}, xx=True)
                pipe.zadd(shard.evict, {manifest.hash: self._rank(manifest, now)}, xx=True)
                self._event(pipe, later, "hit", task_hash=manifest.hash,
                            label=manifest.label, now=now, seconds=saved, run=run)
                await pipe.execute()

        await self.topology.on_node_of(shard.prefix, count)
        await self._published(later)

    async def record_untrusted(self, manifest: Manifest) -> None:
        """Count a load a client refused for a missing or wrong signature (one transaction)."""
        await self.telemetry.flush()
        shard = self.keys.shard_of(manifest.hash)
        later: list[str] = []

        async def count(client: Any) -> None:
            later.clear()
            async with client.pipeline(transaction=True) as pipe:
                pipe.hincrby(shard.stats, "untrusted", 1)
                self._event(pipe, later, "untrusted", task_hash=manifest.hash,
                            label=manifest.label)
                await pipe.execute()

        await self.topology.on_node_of(shard.prefix, count)
        await self._published(later)

    async def set_pinned(self, task_hash: str, pinned: bool) -> Manifest | None:
        """Pin (never evicted) or unpin an entry; None if it is not indexed. Idempotent;
        returns once replicated."""
        shard = self.keys.shard_of(task_hash)
        key = shard.manifest(task_hash)

        async def attempt(pipe: Any) -> bool:
            manifest = await self._watched_manifest(pipe, key)
            if manifest is None:
                return False
            last_access = await pipe.zscore(shard.access, task_hash)
            last_access = float(last_access or manifest.created)
            pipe.multi()
            if pinned:
                pipe.sadd(shard.pinned, task_hash)
                pipe.zrem(shard.evict, task_hash)
            else:
                pipe.srem(shard.pinned, task_hash)
                pipe.zadd(shard.evict, {task_hash: self._rank(manifest, last_access)})
            await pipe.execute()
            return True

        if not await self.topology.transact(shard.prefix, attempt):
            return None
        await self._published([], [shard])
        return await self.manifest(task_hash)

    async def recount(self) -> tuple[int, int]:
        """Recompute ``bytes`` and ``stored_bytes`` from the manifests and rebuild the
        eviction order (after a crash of an older version, or a new half-life).

        For maintenance (``gc``, ``reindex``) while no server writes to this index.
        Returns (bytes, stored_bytes).
        """
        total = stored = 0
        digests: set[str] = set()
        for shard in self.keys.shards:
            client = await self.topology.client_for(shard.prefix)
            shard_total = shard_stored = 0
            await client.delete(shard.evict)
            cursor = 0
            while True:
                cursor, hashes = await client.sscan(shard.members, cursor, count=1000)
                ranks: dict[str, float] = {}
                for manifest in await self.manifests([str(h) for h in hashes]):
                    if manifest is None:
                        continue
                    shard_total += manifest.nbytes
                    if manifest.digest not in digests:  # counted in the first shard naming it
                        digests.add(manifest.digest)
                        shard_stored += manifest.nbytes
                    if not manifest.pinned:
                        ranks[manifest.hash] = self._rank(manifest, manifest.last_access)
                if ranks:
                    await client.zadd(shard.evict, ranks)
                if int(cursor) == 0:
                    break
            await client.hset(shard.stats, mapping={"bytes": shard_total,
                                                    "stored_bytes": shard_stored})
            total, stored = total + shard_total, stored + shard_stored
        return total, stored

    # -- run events (kept by .telemetry) ------------------------------------------------------

    async def record_run_event(self, run_id: str, status: str, stored: int | None) -> None:
        await self.telemetry.record_run_event(run_id, status, stored)

    async def close(self) -> None:
        """Add what this process counted to Redis (before the Redis client closes)."""
        await self.telemetry.close()

