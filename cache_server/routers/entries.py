"""``/v1/entries``: manifests, listing, deletion."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from cache_server.dependencies import CacheDep, IndexDep, TaskHash
from cache_server.models import EntryList, Manifest
from storage.header import DIGEST_PATTERN

__all__ = ["router"]

router = APIRouter(tags=["entries"])


@router.get("/v1/entries")
async def list_entries(
    index: IndexDep,
    label: Annotated[str | None, Query(description="exact label to filter by")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(pattern=DIGEST_PATTERN)] = None,
) -> EntryList:
    """Entries in a stable order; pass ``next_cursor`` back for the next page."""
    entries, next_cursor = await index.page(label=label, limit=limit, cursor=cursor)
    return EntryList(entries=entries, next_cursor=next_cursor)


@router.get("/v1/entries/{task_hash}", responses={404: {"description": "unknown hash"}})
async def get_entry(task_hash: TaskHash, cache: CacheDep) -> Manifest:
    return await cache.manifest(task_hash)


@router.delete(
    "/v1/entries/{task_hash}", status_code=204, responses={404: {"description": "unknown hash"}}
)
async def delete_entry(task_hash: TaskHash, cache: CacheDep) -> Response:
    """Drop the entry; the object goes once no other entry references its digest."""
    await cache.delete(task_hash)
    return Response(status_code=204)
