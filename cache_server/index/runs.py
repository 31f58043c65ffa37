"""Run summaries in Redis (docs/protocol.md, "Runs").

``<prefix>run:<id>`` holds a run's summary JSON (task list included) and ``<prefix>runs`` is
a sorted set of run ids by start time. Only the ``keep`` most recent runs are kept: adding a
run trims the oldest, in the same transaction, so the keys stay bounded whatever clients send.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from cache_server.index.transactions import watched
from cache_server.models import RunSummary

__all__ = ["RunStore"]


class RunStore:
    def __init__(self, redis: Redis, prefix: str, keep: int = 1000) -> None:
        self.redis = redis
        self.prefix = prefix
        self.keep = keep
        self._runs = f"{prefix}runs"

    def _key(self, run_id: str) -> str:
        return f"{self.prefix}run:{run_id}"

    async def put(self, run: RunSummary) -> RunSummary:
        """Record ``run``; a summary without a task list keeps the one already recorded.
        Returns what is recorded now."""
        key = self._key(run.run_id)

        async def attempt(pipe: Any) -> RunSummary:
            await pipe.watch(key)
            text = await pipe.get(key)
            merged = run
            if text is not None and not run.task_list and not run.by_label:
                old = RunSummary.model_validate_json(text)
                merged = run.model_copy(update={"task_list": old.task_list,
                                                "by_label": old.by_label})
            pipe.multi()
            pipe.set(key, merged.model_dump_json())
            pipe.zadd(self._runs, {run.run_id: run.started})
            await pipe.execute()
            return merged

        recorded = await watched(self.redis, attempt)
        await self._trim()
        return recorded

    async def _trim(self) -> None:
        extra = await self.redis.zcard(self._runs) - self.keep
        if extra <= 0:
            return
        old = [str(r) for r in await self.redis.zrange(self._runs, 0, extra - 1)]
        if old:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.zrem(self._runs, *old)
                pipe.delete(*(self._key(r) for r in old))
                await pipe.execute()

    async def get(self, run_id: str) -> RunSummary | None:
        text = await self.redis.get(self._key(run_id))
        return None if text is None else RunSummary.model_validate_json(text)

    async def recent(self, limit: int) -> list[RunSummary]:
        """The ``limit`` most recent runs (by start), newest first, without task lists."""
        ids = [str(r) for r in await self.redis.zrevrange(self._runs, 0, limit - 1)]
        if not ids:
            return []
        texts = await self.redis.mget([self._key(r) for r in ids])
        runs = [RunSummary.model_validate_json(t) for t in texts if t is not None]
        return [r.model_copy(update={"task_list": [], "by_label": {}}) for r in runs]
