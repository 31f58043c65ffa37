"""Optimistic transactions: the WATCH/MULTI/EXEC retry loop every conditional write of the
index runs (:func:`watched`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.exceptions import WatchError

__all__ = ["watched"]

T = TypeVar("T")


async def watched(redis: Redis, attempt: Callable[[Any], Awaitable[T]]) -> T:
    """``attempt(pipe)`` on a transactional pipeline, again until it completes.

    An attempt WATCHes the keys its decision depends on, reads them (the pipeline executes
    commands at once until ``pipe.multi()``), then queues its writes after ``pipe.multi()``
    and runs them with ``pipe.execute()``, which raises ``WatchError`` if a watched key
    changed meanwhile: nothing is written then, and the attempt starts over on fresh reads.
    An attempt may raise ``WatchError`` itself to start over, and may return without
    writing anything.
    """
    async with redis.pipeline(transaction=True) as pipe:
        while True:
            try:
                return await attempt(pipe)
            except WatchError:
                await pipe.reset()  # unwatch whatever is still watched
