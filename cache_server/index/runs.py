"""Run summaries in Redis (docs/protocol.md, "Runs").

``<prefix>run:<id>`` holds a run's counts (small: the runs list reads many),
``<prefix>run:<id>:tasks`` its task list or counts by label (read for one run's page),
``<prefix>run:<id>:why`` why its tasks were recomputed (posted after it), and
``<prefix>runs`` is a sorted set of run ids by start time, ``<prefix>run-sizes`` each run's
bytes. A run's counts and task list hold at most ``max_run_bytes`` (:class:`RunTooLarge`
beyond: nothing is recorded), and only the ``keep`` most recent runs are kept, at most
``max_bytes`` of them in all: adding a run trims the oldest, so the keys stay bounded
whatever clients send.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from cache_server.index.topology import Topology
from cache_server.models import RunSummary, RunTask, RunWhy, TaskState

__all__ = ["RunStore", "RunTooLarge"]

_WHY_SECONDS = 90 * 86_400
_LISTS = {"task_list", "by_label", "stored_tasks", "saved_hashes", "why"}


class _Tasks(BaseModel):
    task_list: list[RunTask] = Field(default_factory=list)
    by_label: dict[str, dict[TaskState, int]] = Field(default_factory=dict)


class RunTooLarge(ValueError):
    """A run summary larger than ``max_run_bytes`` as stored; nothing was recorded."""

    def __init__(self, nbytes: int, limit: int) -> None:
        super().__init__(f"the run summary takes {nbytes} bytes, more than max_run_bytes "
                         f"({limit}): send counts by label (by_label) instead of a task list")
        self.nbytes = nbytes
        self.limit = limit


class RunStore:
    """The runs of one cache (in a Redis Cluster, every key in the slot of no shard, so one
    transaction holds a run's keys and the list)."""

    def __init__(self, topology: Topology, keep: int = 1000, *,
                 max_run_bytes: int = 4 * 2**20, max_bytes: int = 128 * 2**20) -> None:
        self.topology = topology
        self.redis = topology.redis
        self.prefix = topology.keys.globals
        self.keep = keep
        self.max_run_bytes = max_run_bytes
        self.max_bytes = max(max_bytes, max_run_bytes)
        self._runs = f"{self.prefix}runs"
        self._sizes = f"{self.prefix}run-sizes"

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
            text = counts.model_dump_json(exclude=_LISTS)
            tasks_text = None if tasks is None else tasks.model_dump_json()
            if tasks_text is None:  # the recorded list stays: it counts as it is
                kept = int(await pipe.strlen(tasks_key))
            else:
                kept = len(tasks_text)
            size = len(text) + kept
            if size > self.max_run_bytes:
                raise RunTooLarge(size, self.max_run_bytes)
            size += int(await pipe.strlen(key + ":why"))  # bounded by itself, counted here
            pipe.multi()
            pipe.set(key, text)
            if tasks_text is not None:
                pipe.set(tasks_key, tasks_text)
            pipe.zadd(self._runs, {run.run_id: run.started})
            pipe.hset(self._sizes, run.run_id, size)
            await pipe.execute()

        await self.topology.transact(self._runs, attempt)
        await self._trim()
        return counts

    async def _trim(self) -> None:
        """Drop the oldest runs beyond ``keep`` or ``max_bytes`` (the newest always stays).
        Reads the sizes of all kept runs: at most ``keep`` + 1 small fields."""
        ids = [str(r) for r in await self.redis.zrange(self._runs, 0, -1)]
        sizes = [int(n or 0) for n in await self.redis.hmget(self._sizes, ids)] if ids else []
        total, drop = sum(sizes), 0
        while drop < len(ids) - 1 and (len(ids) - drop > self.keep or total > self.max_bytes):
            total -= sizes[drop]
            drop += 1
        old = ids[:drop]
        if not old:
            return

        async def trim(client: Any) -> None:
            async with client.pipeline(transaction=True) as pipe:
                pipe.zrem(self._runs, *old)
                pipe.hdel(self._sizes, *old)
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
        text = why.model_dump_json()
        if len(text) > self.max_run_bytes:
            raise RunTooLarge(len(text), self.max_run_bytes)
        await self.redis.set(self._key(run_id) + ":why", text, ex=_WHY_SECONDS)
        # Counted in the run's size (its next post counts it again, exactly).
        if await self.redis.hexists(self._sizes, run_id):
            await self.redis.hincrby(self._sizes, run_id, len(text))

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
