"""``GET /v1/stats`` and ``GET /v1/events``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from cache_server.api.dependencies import CacheDep
from cache_server.models import EventList, Stats

__all__ = ["router"]

router = APIRouter(tags=["stats"])


@router.get("/v1/stats")
async def stats(cache: CacheDep) -> Stats:
    return await cache.stats()


@router.get("/v1/events", response_model_exclude_none=True)
async def events(cache: CacheDep, limit: Annotated[int, Query(ge=1, le=10_000)] = 100) -> EventList:
    """Recent events, most recent first."""
    return EventList(events=await cache.events(limit))
