"""Recipes in Redis (docs/design/hashing.md, "Recipes and why").

``<prefix>recipe:<slot>`` holds the latest recipe recorded for a structural slot (the
task hash stored there, the recipe's JSON, when it was recorded, when its entry expires),
kept ``keep_seconds`` past the recording or the entry's expiry, so that a slot whose entry
expired or was evicted is still explained; ``<prefix>recorded`` is a sorted set of the
task hashes recorded, by time, trimmed to the newest ``keep_hashes`` (it tells entries
stored before recipes existed from those stored with one). Every key is in the slot of no
shard, like runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from cache_server.index.topology import Topology

__all__ = ["RecipeStore"]


class RecipeStore:
    """The recipes of one cache."""

    def __init__(self, topology: Topology, keep_seconds: float = 90 * 86_400.0,
                 keep_hashes: int = 1_000_000) -> None:
        self.topology = topology
        self.redis = topology.redis
        self.prefix = topology.keys.globals
        self.keep_seconds = keep_seconds
        self.keep_hashes = keep_hashes
        self._recorded = f"{self.prefix}recorded"

    def _key(self, slot: str) -> str:
        return f"{self.prefix}recipe:{slot}"

    async def put(self, records: Sequence[tuple[str, str, str, float | None]]) -> None:
        """Record ``(slot, task_hash, recipe JSON, expires)`` items: each slot's latest."""
        if not records:
            return
        now = time.time()

        async def write(client: Any) -> None:
            async with client.pipeline(transaction=False) as pipe:
                for slot, task_hash, recipe, expires in records:
                    body = json.dumps({"hash": task_hash, "recipe": recipe, "recorded": now,
                                       "expires": expires})
                    keep = max(self.keep_seconds, (expires or now) - now + self.keep_seconds)
                    pipe.set(self._key(slot), body, ex=int(keep))
                pipe.zadd(self._recorded, {h: now for _, h, _, _ in records})
                pipe.zremrangebyrank(self._recorded, 0, -self.keep_hashes - 1)
                await pipe.execute()

        await self.topology.on_node_of(self._recorded, write)

    async def previous(self, slots: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The latest record of each slot that has one. A record that does not parse is
        passed on as it is (``recipe`` its text): the client counts and ignores it."""
        if not slots:
            return {}
        texts = await self.redis.mget([self._key(s) for s in slots])
        found: dict[str, dict[str, Any]] = {}
        for slot, text in zip(slots, texts, strict=True):
            if text is None:
                continue
            try:
                record = json.loads(text)
                if not isinstance(record, dict) or not isinstance(record.get("hash"), str):
                    raise ValueError("not a record")
            except ValueError:
                record = {"hash": "", "recipe": str(text)[:256], "recorded": None,
                          "expires": None}
            found[slot] = record
        return found

    async def recorded_among(self, hashes: Sequence[str]) -> set[str]:
        """Which of ``hashes`` were stored with a recipe (as far as the set remembers)."""
        if not hashes:
            return set()
        scores = await self.redis.zmscore(self._recorded, list(hashes))
        return {h for h, s in zip(hashes, scores, strict=True) if s is not None}
