"""The Redis index: task hash -> manifest, plus counters, access order and recent events.

Keys (all under ``prefix``, default ``rc:``)::

    m:<hash>        STRING  manifest JSON (immutable fields; MGET-able)
    members         SET     every indexed hash: one SMISMEMBER answers a whole lookup
    by_hash         ZSET    every hash, score 0: lexicographic, stable pagination
    label:<label>   ZSET    hashes with that label, score 0
    access          ZSET    hash -> last access time (eviction order)
    hits            HASH    hash -> hit count
    refs:<digest>   SET     hashes whose result is the object <digest>
    stats           HASH    hits, misses, lookups, stores, bytes, saved_seconds, deletes, corrupt
    events          STREAM  recent events, capped at about ``events_maxlen``

Multi-key writes run in MULTI/EXEC transactions (with WATCH where they depend on a read), so
a crash never leaves a half-indexed entry. Safe for concurrent use by many tasks and many
server processes sharing one Redis.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import WatchError

from cache_server.models import Event, Manifest, Stats

__all__ = ["RedisIndex"]

_COUNTERS = ("hits", "misses", "lookups", "stores", "bytes", "deletes", "corrupt")


class RedisIndex:
    """All Redis access of the server. ``redis`` must be created with ``decode_responses=True``."""

    def __init__(self, redis: Redis, *, prefix: str = "rc:", events_maxlen: int = 10_000) -> None:
        self.redis = redis
        self.prefix = prefix
        self.events_maxlen = events_maxlen
        self._members = f"{prefix}members"
        self._by_hash = f"{prefix}by_hash"
        self._access = f"{prefix}access"
        self._hits = f"{prefix}hits"
        self._stats = f"{prefix}stats"
        self._events = f"{prefix}events"

    def _manifest_key(self, task_hash: str) -> str:
        return f"{self.prefix}m:{task_hash}"

    def _label_key(self, label: str) -> str:
        return f"{self.prefix}label:{label}"

    def _refs_key(self, digest: str) -> str:
        return f"{self.prefix}refs:{digest}"

    async def ping(self) -> bool:
        return bool(await self.redis.ping())

    # -- lookups ----------------------------------------------------------------------------

    async def lookup(self, hashes: Sequence[str]) -> list[str]:
        """The indexed subset of ``hashes`` (distinct, in order), with one SMISMEMBER.

        Counts every distinct hash in ``lookups`` and the absent ones in ``misses``.
        """
        unique = list(dict.fromkeys(hashes))
        if not unique:
            return []
        flags = await self.redis.smismember(self._members, unique)
        found = [h for h, present in zip(unique, flags, strict=True) if present]
        missing = len(unique) - len(found)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hincrby(self._stats, "lookups", len(unique))
            if missing:
                pipe.hincrby(self._stats, "misses", missing)
            self._add_event(pipe, "lookup", found=len(found), missing=missing)
            await pipe.execute()
        return found

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
            raw, hits, access = await pipe.execute()
        result: list[Manifest | None] = []
        for text, hit_count, last_access in zip(raw, hits, access, strict=True):
            if text is None:
                result.append(None)
                continue
            manifest = Manifest.model_validate_json(text)
            manifest.hits = int(hit_count or 0)
            manifest.last_access = float(last_access or manifest.created)
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

    async def add(self, manifest: Manifest) -> tuple[Manifest, bool]:
        """Index ``manifest`` unless its hash is indexed already.

        Returns the indexed manifest and whether it was added now. Call only once the object
        is durable in storage.
        """
        key = self._manifest_key(manifest.hash)
        stored = manifest.model_dump_json(exclude={"hits", "last_access"})
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(key)
                    if await pipe.exists(key):
                        await pipe.unwatch()
                        existing = await self.manifest(manifest.hash)
                        if existing is not None:
                            return existing, False
                        continue  # deleted meanwhile: try again
                    pipe.multi()
                    pipe.set(key, stored)
                    pipe.sadd(self._members, manifest.hash)
                    pipe.zadd(self._by_hash, {manifest.hash: 0})
                    pipe.zadd(self._label_key(manifest.label), {manifest.hash: 0})
                    pipe.zadd(self._access, {manifest.hash: manifest.created})
                    pipe.hdel(self._hits, manifest.hash)
                    pipe.sadd(self._refs_key(manifest.digest), manifest.hash)
                    pipe.hincrby(self._stats, "stores", 1)
                    pipe.hincrby(self._stats, "bytes", manifest.nbytes)
                    self._add_event(pipe, "store", task_hash=manifest.hash, label=manifest.label)
                    await pipe.execute()
                    return manifest, True
                except WatchError:
                    continue

    async def remove(
        self, task_hash: str, *, reason: str = "delete"
    ) -> tuple[Manifest, int] | None:
        """Drop an entry; ``reason`` is the event kind (``delete`` or ``corrupt``).

        Returns the removed manifest and how many entries still reference its digest, or
        None if the hash was not indexed.
        """
        key = self._manifest_key(task_hash)
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(key)
                    text = await pipe.get(key)
                    if text is None:
                        await pipe.unwatch()
                        return None
                    manifest = Manifest.model_validate_json(text)
                    refs = self._refs_key(manifest.digest)
                    pipe.multi()
                    pipe.delete(key)
                    pipe.srem(self._members, task_hash)
                    pipe.zrem(self._by_hash, task_hash)
                    pipe.zrem(self._label_key(manifest.label), task_hash)
                    pipe.zrem(self._access, task_hash)
                    pipe.hdel(self._hits, task_hash)
                    pipe.srem(refs, task_hash)
                    pipe.hincrby(self._stats, "bytes", -manifest.nbytes)
                    pipe.hincrby(self._stats, "deletes" if reason == "delete" else "corrupt", 1)
                    self._add_event(pipe, reason, task_hash=task_hash, label=manifest.label)
                    pipe.scard(refs)
                    results = await pipe.execute()
                    return manifest, int(results[-1])
                except WatchError:
                    continue

    async def record_hit(self, manifest: Manifest, now: float | None = None) -> None:
        """Count a served hit: hits, saved seconds, access time, event (one transaction)."""
        now = time.time() if now is None else now
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hincrby(self._stats, "hits", 1)
            pipe.hincrbyfloat(self._stats, "saved_seconds", manifest.compute_seconds)
            pipe.hincrby(self._hits, manifest.hash, 1)
            pipe.zadd(self._access, {manifest.hash: now}, xx=True)
            self._add_event(pipe, "hit", task_hash=manifest.hash, label=manifest.label, now=now)
            await pipe.execute()

    # -- statistics and events --------------------------------------------------------------

    async def stats(self) -> Stats:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(self._stats)
            pipe.scard(self._members)
            counters, entries = await pipe.execute()
        values: dict[str, Any] = {name: int(counters.get(name, 0)) for name in _COUNTERS}
        hits, misses = values["hits"], values["misses"]
        return Stats(
            **values,
            entries=int(entries),
            hit_rate=hits / (hits + misses) if hits + misses else 0.0,
            saved_seconds=float(counters.get("saved_seconds", 0.0)),
        )

    async def events(self, limit: int) -> list[Event]:
        """The most recent events, newest first."""
        raw: Any = await self.redis.xrevrange(self._events, count=limit)
        return [Event.model_validate(json.loads(fields["e"])) for _id, fields in raw]

    def _add_event(
        self,
        pipe: Any,
        kind: str,
        *,
        task_hash: str | None = None,
        label: str | None = None,
        now: float | None = None,
        **counts: int,
    ) -> None:
        event: dict[str, Any] = {"kind": kind, "time": time.time() if now is None else now}
        if task_hash is not None:
            event["hash"] = task_hash
            event["label"] = label
        event.update(counts)
        pipe.xadd(
            self._events,
            {"e": json.dumps(event, separators=(",", ":"))},
            maxlen=self.events_maxlen,
            approximate=True,
        )
