"""Shared dependencies of the routers, as ``Annotated`` aliases (FastAPI "bigger applications")."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Request

from cache_server.metrics import Metrics
from cache_server.service.cache import ResultCache
from cache_server.settings import Settings
from storage.header import DIGEST_PATTERN

__all__ = ["CacheDep", "MetricsDep", "SettingsDep", "TaskHash"]


# ``async``: FastAPI runs plain functions in its thread pool, which must never be needed to
# answer (docs/design/server-and-index.md, "Bounds").
async def get_cache(request: Request) -> ResultCache:
    return request.app.state.cache


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


CacheDep = Annotated[ResultCache, Depends(get_cache)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
#: A task hash in the path, refused with 422 before Redis or the disk is touched.
TaskHash = Annotated[str, Path(pattern=DIGEST_PATTERN, description="32 lowercase hex characters")]
