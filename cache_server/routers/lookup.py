"""``POST /v1/lookup``: which of these task hashes are indexed (one Redis command).

A 100k-hash lookup must stay within ~100 ms (bench/batch_lookup.py), so the hash format is
checked in one pass over the joined hashes (a per-hash check costs ~1 µs each) and the
answer is written as JSON directly (its items are validated hex: nothing to escape).
"""

from __future__ import annotations

from fastapi import APIRouter, Response

from cache_server.dependencies import CacheDep, SettingsDep
from cache_server.errors import InvalidRequest
from cache_server.models import LookupRequest, LookupResponse
from storage import is_digest

__all__ = ["router"]

router = APIRouter(tags=["lookup"])

_HEX_DIGITS = b"0123456789abcdef"


def first_malformed(hashes: list[str]) -> str | None:
    """The first item that is not 32 lowercase hex characters, or None if all are."""
    joined = "".join(hashes)
    if (
        joined.isascii()
        and not joined.encode("ascii").translate(None, _HEX_DIGITS)
        and all(len(h) == 32 for h in hashes)
    ):
        return None
    return next(h for h in hashes if not is_digest(h))


@router.post("/v1/lookup", response_model=LookupResponse)
async def lookup(body: LookupRequest, cache: CacheDep, settings: SettingsDep) -> Response:
    """Counts every distinct hash asked in ``lookups`` and every absent one in ``misses``."""
    if len(body.hashes) > settings.max_lookup_hashes:
        raise InvalidRequest(
            f"{len(body.hashes)} hashes in one lookup; the limit is {settings.max_lookup_hashes}"
        )
    malformed = first_malformed(body.hashes)
    if malformed is not None:
        raise InvalidRequest(f"malformed task hash {malformed[:64]!r}: need 32 lowercase hex")
    found = await cache.lookup(body.hashes)
    text = '{"found":["' + '","'.join(found) + '"]}' if found else '{"found":[]}'
    return Response(text.encode("ascii"), media_type="application/json")
