"""``/v1/entries``: manifests, listing, deletion."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from cache_server.api.auth import WriteAccess
from cache_server.api.dependencies import CacheDep, TaskHash
from cache_server.api.responses import errors
from cache_server.api.routers.runs import RunHeader
from cache_server.models import EntryList, Manifest, ObjectLocation
from cache_server.service.upload import MAX_LABEL_CHARS
from storage.header import DIGEST_PATTERN

__all__ = ["router"]

router = APIRouter(tags=["entries"])


@router.get("/v1/entries")
async def list_entries(
    cache: CacheDep,
    label: Annotated[
        str | None, Query(max_length=MAX_LABEL_CHARS, description="exact label to filter by")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(pattern=DIGEST_PATTERN)] = None,
) -> EntryList:
    """Entries in a stable order; pass ``next_cursor`` back for the next page."""
    entries, next_cursor = await cache.entries(label=label, limit=limit, cursor=cursor)
    return EntryList(entries=entries, next_cursor=next_cursor)


@router.get("/v1/entries/{task_hash}", responses=errors(404))
async def get_entry(task_hash: TaskHash, cache: CacheDep) -> Manifest:
    return await cache.manifest(task_hash)


@router.get("/v1/entries/{task_hash}/location", responses=errors(404))
async def locate_entry(task_hash: TaskHash, cache: CacheDep,
                       run: RunHeader = None) -> ObjectLocation:
    """The manifest and where its object lies, for a client that reads it in place and
    verifies it itself (docs/protocol.md, "Direct reads"). Counts a hit like ``GET
    /v1/objects/{hash}``."""
    manifest, location = await cache.locate(task_hash, run)
    return ObjectLocation(**manifest.model_dump(), location=location)


@router.post("/v1/entries/{task_hash}/pin", dependencies=[WriteAccess], responses=errors(403, 404))
async def pin_entry(task_hash: TaskHash, cache: CacheDep) -> Manifest:
    """Never evict this entry (``rm`` still deletes it). Idempotent; survives ``reindex``."""
    return await cache.set_pinned(task_hash, True)


@router.post(
    "/v1/entries/{task_hash}/unpin", dependencies=[WriteAccess], responses=errors(403, 404)
)
async def unpin_entry(task_hash: TaskHash, cache: CacheDep) -> Manifest:
    """Make a pinned entry evictable again. Idempotent."""
    return await cache.set_pinned(task_hash, False)


@router.post("/v1/entries/{task_hash}/untrusted", status_code=204, responses=errors(404))
async def report_untrusted(task_hash: TaskHash, cache: CacheDep) -> Response:
    """A client did not load this entry: its signature is missing or wrong for the client's
    key (docs/protocol.md, "Signed results"). Counted as ``untrusted``; the entry stays."""
    await cache.report_untrusted(task_hash)
    return Response(status_code=204)


@router.post("/v1/entries/{task_hash}/corrupt", responses=errors(404, 503))
async def report_corrupt(task_hash: TaskHash, cache: CacheDep) -> dict[str, bool]:
    """A client received this entry's body and it did not match its digest (bodies of at
    least ``zero_copy_min_bytes`` are sent unread by the server). The server reads and
    verifies the object itself and drops the entry if it is corrupt (a ``corrupt`` event);
    ``{"corrupt": true}`` then, else ``{"corrupt": false}`` (the bytes were damaged on the
    way, not in storage). One verification at a time: 503 with Retry-After while another
    runs."""
    return {"corrupt": await cache.verify_reported(task_hash)}


@router.delete(
    "/v1/entries/{task_hash}",
    status_code=204,
    dependencies=[WriteAccess],
    responses=errors(403, 404),
)
async def delete_entry(task_hash: TaskHash, cache: CacheDep) -> Response:
    """Drop the entry; the object goes once no other entry references its digest."""
    await cache.delete(task_hash)
    return Response(status_code=204)
