"""The index's telemetry: the counters of the ``stats`` hash and the ``events`` stream.

Keys (under the index's ``prefix``; in a Redis Cluster, in the slot of no shard, and each
shard counts its own entries' stores, removals, hits and bytes in a ``stats`` hash of its
own, summed when read)::

    stats           HASH    hits, misses, lookups, stores, bytes, saved_seconds, deletes,
                            corrupt, evictions, stored_bytes, untrusted, expired,
                            overwrites
    events          STREAM  recent events, capped at about ``events_maxlen``

Two kinds of writer share them. The index's own transactions
(:class:`~cache_server.index.redis_index.RedisIndex`) count stores, removals, hits and bytes
and queue their event (:meth:`Telemetry.add_event`) inside the transaction that changes the
entry, so a count never disagrees with the index (in a Redis Cluster the event is added
right after that transaction, :meth:`Telemetry.publish`: the stream has a slot of its own).
Lookups change nothing in the index: their counts (``lookups``, ``found``, ``misses``) and
their ``lookup`` events are kept in this process and added to Redis in one pipeline for many
lookups (:meth:`Telemetry.flush`) within
``LOOKUP_FLUSH_SECONDS``, and before this replica writes any other event or reads the
counters or events, so its events stay in order and its own counts are exact when read
through it. A replica killed meanwhile loses those counts (never an entry); while Redis is
unreachable they wait for the next flush.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from contextlib import suppress
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from cache_server.models import Event, Stats

__all__ = ["COUNTERS", "LOOKUP_FLUSH_SECONDS", "Telemetry", "stats_from"]

#: At most this long between a lookup and its counts (and event) reaching Redis.
LOOKUP_FLUSH_SECONDS = 0.2
#: Lookup events kept in a process while Redis is unreachable (the counts are all kept).
_MAX_PENDING_EVENTS = 1000

#: The integer counters of the ``stats`` hash.
COUNTERS = (
    "found", "served", "misses", "lookups", "stores", "bytes", "deletes", "corrupt", "evictions",
    "stored_bytes", "untrusted", "expired", "overwrites",
)  # fmt: skip


def stats_from(counters: Mapping[str, str], entries: int, pinned: int) -> Stats:
    """The :class:`Stats` of the ``stats`` hash's fields and the index's sizes."""
    values: dict[str, Any] = {name: int(counters.get(name, 0)) for name in COUNTERS}
    found, misses = values["found"], values["misses"]
    return Stats(
        **values,
        hits=found,
        entries=entries,
        pinned=pinned,
        hit_rate=found / (found + misses) if found + misses else 0.0,
        saved_seconds=float(counters.get("saved_seconds", 0.0)),
    )


class _PendingLookups:
    """Lookups counted in this process and not yet in Redis: totals and one event each."""

    def __init__(self) -> None:
        self.lookups = 0
        self.found = 0
        self.events: list[tuple[float, int, int]] = []  # (time, found, missing)

    def add(self, asked: int, found: int) -> None:
        self.lookups += asked
        self.found += found
        if len(self.events) < _MAX_PENDING_EVENTS:
            self.events.append((time.time(), found, asked - found))

    def merge(self, older: _PendingLookups) -> None:
        self.lookups += older.lookups
        self.found += older.found
        self.events[:0] = older.events[: max(0, _MAX_PENDING_EVENTS - len(self.events))]


class Telemetry:
    """This replica's lookup counts on their way to Redis, and the events stream.
    Coroutine-safe within one event loop (one flush at a time)."""

    def __init__(self, redis: Redis | RedisCluster, prefix: str, events_maxlen: int
                 ) -> None:
        self.redis = redis
        self.events_maxlen = events_maxlen
        self.stats_key = f"{prefix}stats"
        self.events_key = f"{prefix}events"
        self._pending = _PendingLookups()
        self._flushing = asyncio.Lock()
        self._flusher: asyncio.Task[None] | None = None

    def count_lookup(self, asked: int, found: int) -> None:
        """Count a lookup in this process; :meth:`flush` adds the counts and the lookup
        events to Redis within ``LOOKUP_FLUSH_SECONDS``, many lookups in one round trip
        (they were one round trip each, a third of a lookup's cost in the server)."""
        self._pending.add(asked, found)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(LOOKUP_FLUSH_SECONDS)
        with suppress(RedisError, OSError):  # kept for the next flush
            await self.flush()

    async def close(self) -> None:
        """Add what this process counted to Redis and stop the delayed flush (before the
        Redis client closes)."""
        if self._flusher is not None:
            self._flusher.cancel()
            with suppress(asyncio.CancelledError, RedisError, OSError):
                await self._flusher
        await self.flush()

    async def flush(self) -> None:
        """Add the lookups counted in this process to Redis. Every read of the counters or
        events and every write of another event calls this first, so this replica's events
        stay in order and its own counts are exact when read through it."""
        if not self._pending.lookups and not self._flushing.locked():
            return
        async with self._flushing:  # one flush at a time: a later event never overtakes
            pending, self._pending = self._pending, _PendingLookups()
            if not pending.lookups:
                return
            try:
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.hincrby(self.stats_key, "lookups", pending.lookups)
                    if pending.found:
                        pipe.hincrby(self.stats_key, "found", pending.found)
                    if pending.lookups > pending.found:
                        pipe.hincrby(self.stats_key, "misses", pending.lookups - pending.found)
                    for when, found, missing in pending.events:
                        self.add_event(pipe, "lookup", now=when, found=found, missing=missing)
                    await pipe.execute()
            except BaseException:
                self._pending.merge(pending)  # Redis unreachable: counted next time
                raise

    def event(
        self,
        kind: str,
        *,
        task_hash: str | None = None,
        label: str | None = None,
        now: float | None = None,
        **counts: float | str | None,
    ) -> str:
        """One event, as the stream stores it."""
        event: dict[str, Any] = {"kind": kind, "time": time.time() if now is None else now}
        if task_hash is not None:
            event["hash"] = task_hash
            event["label"] = label
        event.update((k, v) for k, v in counts.items() if v is not None)
        return json.dumps(event, separators=(",", ":"))

    def add_event(self, pipe: Any, kind: str, **fields: Any) -> None:
        """Queue one event (:meth:`event`'s arguments) on ``pipe`` (the caller's transaction
        or pipeline); the stream keeps about ``events_maxlen`` of them."""
        self._queue(pipe, self.event(kind, **fields))

    def _queue(self, pipe: Any, event: str) -> None:
        pipe.xadd(self.events_key, {"e": event}, maxlen=self.events_maxlen, approximate=True)

    async def publish(self, events: list[str]) -> None:
        """Add events made by :meth:`event` for a transaction that could not hold them (in a
        Redis Cluster the stream lives in a slot of its own), in order. Best effort: a
        transaction that succeeded is not undone by an unreachable stream (its event is
        lost, never its entry or its counts)."""
        if not events:
            return
        with suppress(RedisError, OSError):
            async with self.redis.pipeline(transaction=False) as pipe:
                for event in events:
                    self._queue(pipe, event)
                await pipe.execute()

    async def events_with_ids(self, limit: int) -> list[tuple[str, Event]]:
        """The most recent events with their stream ids, newest first."""
        await self.flush()
        raw: Any = await self.redis.xrevrange(self.events_key, count=limit)
        return [(str(i), Event.model_validate(json.loads(f["e"]))) for i, f in raw]

    async def events_after(self, last_id: str, limit: int, block_ms: int
                           ) -> list[tuple[str, Event]]:
        """Events after stream id ``last_id``, oldest first, waiting up to ``block_ms`` for
        one to come (a live view follows the stream with this)."""
        await self.flush()
        raw: Any = await self.redis.xread({self.events_key: last_id}, count=limit,
                                          block=block_ms)
        return [(str(i), Event.model_validate(json.loads(f["e"])))
                for _stream, entries in raw or [] for i, f in entries]

    async def record_run_event(self, run_id: str, status: str, stored: int | None) -> None:
        """A ``run`` event: a run started or ended (docs/protocol.md, "Runs")."""
        await self.flush()
        async with self.redis.pipeline(transaction=False) as pipe:
            fields = {"stored": stored} if stored is not None else {}
            self.add_event(pipe, "run", run=run_id, status=status, **fields)
            await pipe.execute()
