"""The index's reads: lookups, manifests, listings, expiries, byte totals and statistics
(:class:`IndexReads`, the base of :class:`~.redis_index.RedisIndex`, which writes).

On one Redis each read is what it always was: one ``SMISMEMBER`` for a whole lookup, one
``MGET`` (and friends) for manifests. In a Redis Cluster the same commands go to every shard
the hashes fall in, each master getting its shards' commands in one pipeline, all masters
at once (:meth:`.Topology.per_shard`); totals are summed over the shards, orders merged.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np

from cache_server.index.client import IndexRedis, pack_fixed_width
from cache_server.index.keyspace import Keyspace, Shard
from cache_server.index.telemetry import COUNTERS, Telemetry, stats_from
from cache_server.index.topology import Topology
from cache_server.models import Event, Manifest, Stats

__all__ = ["IndexReads"]

#: ASCII byte -> its value as a hex digit (lowercase; the API admits nothing else).
_HEX = np.zeros(256, np.uint8)
_HEX[np.frombuffer(b"0123456789abcdef", np.uint8)] = np.arange(16, dtype=np.uint8)
#: Shards a listing asks at once, when the first it asks holds too few entries.
_PAGE_SHARDS = 8


class IndexReads:
    """Everything that reads the index (see :mod:`.redis_index` for its keys)."""

    def __init__(self, redis: IndexRedis, prefix: str, events_maxlen: int) -> None:
        self.redis = redis
        self.prefix = prefix
        #: Which client holds which keys (one Redis, or the masters of a Cluster).
        self.topology = Topology(redis, prefix)
        self.keys: Keyspace = self.topology.keys
        #: The counters and events; the transactions count and record into them.
        self.telemetry = Telemetry(redis, self.keys.globals, events_maxlen)

    async def ping(self) -> bool:
        return bool(await self.redis.ping())

    def _by_shard(self, hashes: Sequence[str]) -> list[tuple[Shard, list[int] | None, list[str]]]:
        """(shard, positions in ``hashes`` or None for all of them, its hashes)."""
        if not self.keys.sharded:
            return [(self.keys.shards[0], None, list(hashes))]
        return [(shard, positions, [hashes[i] for i in positions])
                for shard, positions in self.keys.group(hashes)]

    # -- lookups ----------------------------------------------------------------------------

    async def lookup(self, hashes: Sequence[str], *, counted: bool = True) -> list[str]:
        """The indexed subset of ``hashes`` (distinct, in order): one SMISMEMBER per shard.

        Counts every distinct hash in ``lookups``, the present ones in ``found`` and the
        absent ones in ``misses`` (:meth:`.Telemetry.count_lookup`), unless ``counted`` is
        false: the server's own questions (explanations) are not a client's lookups.
        """
        unique = list(dict.fromkeys(hashes))
        if not unique:
            return []
        groups = self._by_shard(unique)
        answers = await self.topology.per_shard(
            [(shard, lambda pipe, shard=shard, part=part: (
                pipe.smismember(shard.members, part), pipe.zcard(shard.expires)))
             for shard, _, part in groups])
        expiring = any(expiring_here for _, expiring_here in answers)
        if len(groups) == 1:
            found = [h for h, flag in zip(unique, answers[0][0], strict=True) if flag]
        else:
            present = {h for (_, _, part), (flags, _) in zip(groups, answers, strict=True)
                       for h, flag in zip(part, flags, strict=True) if flag}
            found = [h for h in unique if h in present]
        if found and expiring:
            expired = await self.expired_among(found)
            found = [h for h in found if h not in expired]
        if counted:
            self.telemetry.count_lookup(len(unique), len(found))
        return found

    async def lookup_packed(self, packed: bytes) -> bytes:
        """One byte per hash, 1 if indexed, for 32-character hashes sent back to back
        (already validated), with one SMISMEMBER per shard built straight from the buffer:
        one round trip to Redis (to each master of a Cluster) unless some entry has an
        expiry.

        Counts every hash in ``lookups``, the present ones in ``found`` and the absent ones
        in ``misses``: senders send each hash once. Expired entries answer 0.
        """
        if not packed:
            return b""
        if not self.keys.sharded:
            shard = self.keys.shards[0]
            command = pack_fixed_width("SMISMEMBER", shard.members, packed, 32)
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.execute_command("SMISMEMBER", command)  # type: ignore[arg-type]
                pipe.zcard(shard.expires)
                flags, expiring = await pipe.execute()
            answer = bytes(flags)
        else:
            answer, expiring = await self._lookup_sharded(packed)
        found = answer.count(1)
        if found and expiring:
            answer = await self._hide_expired(packed, answer)
            found = answer.count(1)
        self.telemetry.count_lookup(len(answer), found)
        return answer

    async def _lookup_sharded(self, packed: bytes) -> tuple[bytes, bool]:
        """The presence flags of packed hashes in a Cluster: the hashes sorted by shard
        (one stable argsort), one prepacked SMISMEMBER per shard, the flags put back."""
        rows = np.frombuffer(packed, np.uint8).reshape(-1, 32)
        numbers = ((_HEX[rows[:, 0]] << 4) | _HEX[rows[:, 1]]) >> self.keys.shift
        order = np.argsort(numbers, kind="stable")
        counts = np.bincount(numbers, minlength=len(self.keys.shards))
        by_shard = rows[order].tobytes()
        work, start = [], 0
        for shard, count in zip(self.keys.shards, counts.tolist(), strict=True):
            if count:
                command = pack_fixed_width("SMISMEMBER", shard.members,
                                           by_shard[32 * start:32 * (start + count)], 32)
                work.append((shard, lambda pipe, shard=shard, command=command: (
                    pipe.execute_command("SMISMEMBER", command), pipe.zcard(shard.expires))))
                start += count
        answers = await self.topology.per_shard(work)
        flags = np.empty(len(rows), np.uint8)
        flags[order] = np.fromiter((f for part, _ in answers for f in part), np.uint8,
                                   count=len(rows))
        return flags.tobytes(), any(expiring for _, expiring in answers)

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
        if not hashes:
            return set()
        now = time.time() if now is None else now
        groups = self._by_shard(hashes)
        answers = await self.topology.per_shard(
            [(shard, lambda pipe, shard=shard: pipe.zcard(shard.expires))
             for shard, _, _ in groups])
        groups = [g for g, (expiring,) in zip(groups, answers, strict=True) if expiring]
        answers = await self.topology.per_shard(
            [(shard, lambda pipe, shard=shard, part=part: pipe.zmscore(shard.expires, part))
             for shard, _, part in groups])
        return {h for (_, _, part), (scores,) in zip(groups, answers, strict=True)
                for h, s in zip(part, scores, strict=True) if s is not None and s <= now}

    async def all_expired(self, now: float | None = None, limit: int = 1000) -> list[str]:
        """Up to ``limit`` expired hashes, soonest expired first."""
        now = time.time() if now is None else now
        answers = await self.topology.per_shard(
            [(shard, lambda pipe, shard=shard: pipe.zrangebyscore(
                shard.expires, "-inf", now, start=0, num=limit, withscores=True))
             for shard in self.keys.shards])
        merged = heapq.merge(*(part for (part,) in answers), key=lambda item: item[1])
        return [str(h) for h, _ in list(merged)[:limit]]

    async def contains(self, task_hash: str) -> bool:
        """Indexed and not expired; counts nothing (lease waiters poll this)."""
        shard = self.keys.shard_of(task_hash)
        client = await self.topology.client_for(shard.prefix)
        if not await client.sismember(shard.members, task_hash):
            return False
        return not await self.expired_among([task_hash])

    # -- manifests and listings -------------------------------------------------------------

    async def manifest(self, task_hash: str) -> Manifest | None:
        manifests = await self.manifests([task_hash])
        return manifests[0]

    async def manifests(self, hashes: Sequence[str]) -> list[Manifest | None]:
        """Manifests with live ``hits`` and ``last_access``, in one round trip (to each
        master of a Cluster)."""
        if not hashes:
            return []
        groups = self._by_shard(hashes)
        answers = await self.topology.per_shard(
            [(shard, lambda pipe, shard=shard, part=part: (
                pipe.mget([shard.manifest(h) for h in part]), pipe.hmget(shard.hits, part),
                pipe.zmscore(shard.access, part), pipe.smismember(shard.pinned, part)))
             for shard, _, part in groups])
        result: list[Manifest | None] = [None] * len(hashes)
        for (_, positions, _), (raw, hits, access, pinned) in zip(groups, answers, strict=True):
            rows = zip(raw, hits, access, pinned, strict=True)
            for i, (text, hit_count, last_access, is_pinned) in zip(
                    positions or range(len(hashes)), rows, strict=True):
                if text is None:
                    continue
                manifest = Manifest.model_validate_json(text)
                manifest.hits = int(hit_count or 0)
                manifest.last_access = float(last_access or manifest.created)
                manifest.pinned = bool(is_pinned)
                result[i] = manifest
        return result

    async def page(
        self, *, label: str | None, limit: int, cursor: str | None
    ) -> tuple[list[Manifest], str | None]:
        """One page of entries ordered by hash; the cursor is the last hash of the page.
        (The shards hold the hashes in order: a page reads the cursor's shard, then the
        next ones, a few at once, until it is full.)"""
        hashes: list[str] = []
        first = self.keys.shard_of(cursor).number if cursor else 0
        pending, window = list(self.keys.shards[first:]), 1
        while pending and len(hashes) < limit:
            ask, pending, window = pending[:window], pending[window:], _PAGE_SHARDS
            want = limit - len(hashes)
            answers = await self.topology.per_shard(
                [(shard, lambda pipe, shard=shard, want=want: pipe.zrangebylex(
                    shard.by_hash if label is None else shard.label(label),
                    f"({cursor}" if cursor and shard.number == first else "-", "+",
                    start=0, num=want))
                 for shard in ask])
            for (part,) in answers:  # in shard order, so in hash order
                hashes += [str(h) for h in part[:limit - len(hashes)]]
        manifests = [m for m in await self.manifests(hashes) if m is not None]
        next_cursor = hashes[-1] if len(hashes) == limit else None
        return manifests, next_cursor

    async def eviction_candidates(self, count: int) -> list[str]:
        """Up to ``count`` unpinned hashes, lowest eviction score first."""
        answers = await self.topology.per_shard(
            [(shard, lambda pipe, shard=shard: pipe.zrange(shard.evict, 0, count - 1,
                                                           withscores=True))
             for shard in self.keys.shards])
        merged = heapq.merge(*(part for (part,) in answers), key=lambda item: item[1])
        return [str(h) for h, _ in list(merged)[:count]]

    async def references(self, digest: str) -> set[str]:
        """The indexed hashes whose result is the object ``digest``."""
        answers = await self.topology.per_shard(
            [(shard, lambda pipe, shard=shard: pipe.smembers(shard.refs(digest)))
             for shard in self.keys.shards])
        return {str(h) for (part,) in answers for h in part}

    async def all_hashes(self, batch: int = 1000) -> AsyncIterator[list[str]]:
        """Every indexed hash, in batches (SSCAN: entries added meanwhile may be missed)."""
        for shard in self.keys.shards:
            client = await self.topology.client_for(shard.prefix)
            cursor = 0
            while True:
                cursor, hashes = await client.sscan(shard.members, cursor, count=batch)
                if hashes:
                    yield [str(h) for h in hashes]
                if int(cursor) == 0:
                    break

    # -- byte totals, statistics and events (kept by .telemetry) -----------------------------

    async def stored_bytes(self) -> int:
        """Bytes of the distinct objects the index references (what the size cap limits)."""
        answers = await self.topology.per_shard(
            [(shard, lambda pipe, shard=shard: pipe.hget(shard.stats, "stored_bytes"))
             for shard in self.keys.shards])
        return sum(int(value or 0) for (value,) in answers)

    async def stats(self) -> Stats:
        """The counters (this replica's lookups flushed first) and the index's sizes."""
        await self.telemetry.flush()
        answers = await self.topology.per_shard(
            [(shard, lambda pipe, shard=shard: (
                pipe.hgetall(shard.stats), pipe.scard(shard.members), pipe.scard(shard.pinned)))
             for shard in self.keys.shards])
        hashes = [counters for counters, _, _ in answers]
        if self.keys.sharded:
            hashes.append(await self.redis.hgetall(self.telemetry.stats_key))
        totals: dict[str, Any] = {}
        for counters in hashes:
            for name, value in counters.items():
                add = float(value) if name not in COUNTERS else int(value)
                totals[name] = totals.get(name, 0) + add
        entries = sum(int(n) for _, n, _ in answers)
        pinned = sum(int(n) for _, _, n in answers)
        return stats_from(totals, entries, pinned)

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
