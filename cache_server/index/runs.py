"""Run summaries in Redis (docs/protocol.md, "Runs").

``<prefix>run:<id>`` holds a run's counts (small: the runs list reads many),
``<prefix>run:<id>:tasks`` its task list or counts by label (read for one run's page),
``<prefix>run:<id>:why`` why its tasks were recomputed (posted after it), and
``<prefix>runs`` is a sorted set of run ids by start time. Only the ``keep`` most recent
runs are kept: adding a run trims the oldest, so the keys stay bounded whatever clients send.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from cache_server.index.topology import Topology
from cache_server.models import RunSummary, RunTask, RunWhy, TaskState

__all__ = ["RunStore"]

_WHY_SECONDS = 90 * 86_400
_LISTS = {"task_list", "by_label", "stored_tasks", "saved_hashes", "why"}


class _Tasks(BaseModel):
    task_list: list[RunTask] = Field(default_factory=list)
    by_label: dict[str, dict[TaskState, int]] = Field(default_factory=dict)


class RunStore:
    """The runs of one cache (in a Redis Cluster, every key in the slot of no shard, so one
    transaction holds a run's keys and the list)."""

    def __init__(self, topology: Topology, keep: int = 1000) -> None:
        self.topology = topology
        self.redis = topology.redis
        self.prefix = topology.keys.globals
        self.keep = keep
        self._runs = f"{self.prefix}runs"

    def _key(self, run_id: str) -> str:
        return f"{self.prefix}run:{run_id}"

    async def put(self, run: RunSummary) -> RunSummary:
        """Record ``run``. A summary without a task list keeps the recorded one, with the
        tasks at ``stored_tasks`` set to stored. Returns the counts recorded (no lists)."""
        key, tasks_key = self._key(run.run_id), self._key(run.run_id) + ":tasks"
        counts = run.model_copy(update={"task_list": [], "by_label": {}, "stored_tasks": [],
                                        "saved_hashes": []})

        async def attempt(pipe: Any) -> None:
            await pipe.watch(tasks_key)
            tasks = None
            if run.task_list or run.by_label:
                tasks = _Tasks(task_list=run.task_list, by_label=run.by_label)
            elif run.stored_tasks:
                text = await pipe.get(tasks_key)
                if text is not None:
                    tasks = _Tasks.model_validate_json(text)
                    for i in run.stored_tasks:
                        if i < len(tasks.task_list):
                            tasks.task_list[i].state = "stored"
            pipe.multi()
            pipe.set(key, counts.model_dump_json(exclude=_LISTS))
            if tasks is not None:
                pipe.set(tasks_key, tasks.model_dump_json())
            pipe.zadd(self._runs, {run.run_id: run.started})
            await pipe.execute()

        await self.topology.transact(self._runs, attempt)
        await self._trim()
        return counts

    async def _trim(self) -> None:
        extra = await self.redis.zcard(self._runs) - self.keep
        if extra <= 0:
            return
        old = [str(r) for r in await self.redis.zrange(self._runs, 0, extra - 1)]
        if not old:
            return

        async def trim(client: Any) -> None:
            async with client.pipeline(transaction=True) as pipe:
                pipe.zrem(self._runs, *old)
                pipe.delete(*(self._key(r) for r in old),
                            *(self._key(r) + ":tasks" for r in old),
                            *(self._key(r) + ":why" for r in old))
                await pipe.execute()

        await self.topology.on_node_of(self._runs, trim)

    async def counts(self, run_id: str) -> RunSummary | None:
        """A run's recorded counts (without its task list), or None."""
        text = await self.redis.get(self._key(run_id))
        return None if text is None else RunSummary.model_validate_json(text)

    async def put_why(self, run_id: str, why: RunWhy) -> None:
        """Record why a run's tasks were recomputed (kept as long as the run, at most
        ``_WHY_SECONDS`` when the run is never recorded)."""
        await self.redis.set(self._key(run_id) + ":why", why.model_dump_json(),
                             ex=_WHY_SECONDS)

    async def get(self, run_id: str) -> RunSummary | None:
        key = self._key(run_id)
        text, tasks, why = await self.redis.mget([key, key + ":tasks", key + ":why"])
        if text is None:
            return None
        run = RunSummary.model_validate_json(text)
        if tasks is not None:
            lists = _Tasks.model_validate_json(tasks)
            run.task_list, run.by_label = lists.task_list, lists.by_label
        if why is not None:
            found = RunWhy.model_validate_json(why)
            run.why = found.groups
            for i, reason in found.reasons.items():
                if i < len(run.task_list):
                    run.task_list[i].why = reason
        return run

    async def recent(self, limit: int) -> list[RunSummary]:
        """The ``limit`` most recent runs (by start), newest first, without task lists."""
        ids = [str(r) for r in await self.redis.zrevrange(self._runs, 0, limit - 1)]
        if not ids:
            return []
        texts = await self.redis.mget([self._key(r) for r in ids])
        return [RunSummary.model_validate_json(t) for t in texts if t is not None]
