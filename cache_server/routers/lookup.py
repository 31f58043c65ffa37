"""``POST /v1/lookup``: which of these task hashes are indexed (one Redis command)."""

from __future__ import annotations

from fastapi import APIRouter

from cache_server.dependencies import CacheDep, SettingsDep
from cache_server.errors import InvalidRequest
from cache_server.models import LookupRequest, LookupResponse
from storage import is_digest

__all__ = ["router"]

router = APIRouter(tags=["lookup"])


@router.post("/v1/lookup")
async def lookup(body: LookupRequest, cache: CacheDep, settings: SettingsDep) -> LookupResponse:
    """Counts every distinct hash asked in ``lookups`` and every absent one in ``misses``."""
    if len(body.hashes) > settings.max_lookup_hashes:
        raise InvalidRequest(
            f"{len(body.hashes)} hashes in one lookup; the limit is {settings.max_lookup_hashes}"
        )
    for task_hash in body.hashes:
        if not is_digest(task_hash):
            raise InvalidRequest(f"malformed task hash {task_hash[:64]!r}: need 32 lowercase hex")
    return LookupResponse(found=await cache.lookup(body.hashes))
