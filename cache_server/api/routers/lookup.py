"""``POST /v1/lookup`` and ``POST /v1/lookup/packed``: which of these task hashes are
indexed (one Redis command).

A 100k-hash lookup must stay within ~100 ms (bench/batch_lookup.py). The JSON route checks
the hash format in one pass over the joined hashes (a per-hash check costs ~1 µs each) and
writes its answer directly (its items are validated hex: nothing to escape); what it still
spends on JSON and on cutting the body into strings is what the packed route saves: its
hashes arrive back to back, are validated with one ``translate`` and go to Redis in one
buffer, and the answer is one byte per hash.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from itertools import compress
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

from cache_server.api.auth import Scope, refusal
from cache_server.api.errors import InvalidRequest
from cache_server.models import LookupRequest, LookupResponse
from cache_server.service.cache import ResultCache
from cache_server.settings import Settings
from storage import is_digest

__all__ = ["PACKED", "PlainRoute", "first_malformed", "packed_hashes", "router"]

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


async def lookup(request: Request) -> Response:
    """Counts every distinct hash asked in ``lookups`` and every absent one in ``misses``.

    A lookup may hold ``max_lookup_hashes`` (1M, 36 MB of JSON): parsing, checking and
    deduplicating it and writing the answer run in a worker thread, in C calls of a few
    tenths of a second at most, and the index is asked with the packed route's one buffer,
    so the event loop keeps answering ``/healthz`` and other clients meanwhile (issue 29,
    row 11; parsed by pydantic on the loop, 2 x 2 such lookups held health for 6.9 s).
    """
    denied = await refusal(request, Scope.read)
    if denied is not None:
        raise denied
    settings: Settings = request.app.state.settings
    cache: ResultCache = request.app.state.cache
    body = await request.body()
    unique = await run_in_threadpool(_unique_hashes, body, settings.max_lookup_hashes)
    flags = await cache.lookup_packed("".join(unique).encode("ascii"))
    text = await run_in_threadpool(_found_json, unique, flags)
    return Response(text, media_type="application/json")


def _unique_hashes(body: bytes, limit: int) -> list[str]:
    """The distinct hashes of a ``LookupRequest`` body, in order; 422 for anything else."""
    try:
        request = json.loads(body)
    except ValueError as exc:
        raise InvalidRequest(f"the body is not JSON: {exc}") from None
    hashes = request.get("hashes") if isinstance(request, dict) else None
    if not isinstance(hashes, list):
        raise InvalidRequest('the body must be {"hashes": [<task hash>, ...]}')
    if len(hashes) > limit:
        raise InvalidRequest(f"{len(hashes)} hashes in one lookup; the limit is {limit}")
    if not all(isinstance(h, str) for h in hashes):
        raise InvalidRequest("every task hash must be a string")
    malformed = first_malformed(hashes)
    if malformed is not None:
        raise InvalidRequest(f"malformed task hash {malformed[:64]!r}: need 32 lowercase hex")
    return list(dict.fromkeys(hashes))


def _found_json(hashes: list[str], flags: bytes) -> bytes:
    """``{"found": [...]}`` for the hashes flagged 1 (validated hex: nothing to escape)."""
    found = list(compress(hashes, flags))
    text = '{"found":["' + '","'.join(found) + '"]}' if found else '{"found":[]}'
    return text.encode("ascii")


PACKED = "application/octet-stream"


class PlainRoute(APIRoute):
    """A route whose endpoint takes the request and answers it alone: FastAPI documents it
    from its declaration but solves no dependency and validates nothing per request (a
    tenth of the packed lookup's server CPU at saturation, BENCHMARKS.md section 14). The
    endpoint checks access itself, as the router's ``ReadAccess`` would."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        return self.endpoint


async def lookup_packed(request: Request) -> Response:
    """Like ``POST /v1/lookup`` for hashes sent back to back (send each once: every hash
    counts in ``lookups``, every absent one in ``misses``)."""
    denied = await refusal(request, Scope.read)
    if denied is not None:
        raise denied
    settings: Settings = request.app.state.settings
    cache: ResultCache = request.app.state.cache
    packed = packed_hashes(await request.body())
    if len(packed) // 32 > settings.max_lookup_hashes:
        raise InvalidRequest(f"{len(packed) // 32} hashes in one lookup; the limit is "
                             f"{settings.max_lookup_hashes}")
    answer = await cache.lookup_packed(packed)
    return Response(answer, media_type=PACKED)


def packed_hashes(packed: bytes) -> bytes:
    """``packed`` if it is 32-byte lowercase hex hashes back to back, else 422."""
    count, rest = divmod(len(packed), 32)
    if rest:
        raise InvalidRequest(f"{len(packed)} bytes is not a whole number of 32-byte hashes")
    if packed.translate(None, _HEX_DIGITS):
        bad = next(i for i in range(count) if packed[32 * i:32 * i + 32].translate(
            None, _HEX_DIGITS))
        raise InvalidRequest(f"malformed task hash {packed[32 * bad:32 * bad + 32]!r} at "
                             f"position {bad}: need 32 lowercase hex")
    return packed


router.add_api_route(
    "/v1/lookup",
    lookup,
    methods=["POST"],
    route_class_override=PlainRoute,
    response_model=LookupResponse,
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
        "schema": LookupRequest.model_json_schema()}}}},
)
router.add_api_route(
    "/v1/lookup/packed",
    lookup_packed,
    methods=["POST"],
    route_class_override=PlainRoute,
    response_class=Response,
    openapi_extra={"requestBody": {"required": True, "content": {PACKED: {"schema": {
        "type": "string", "format": "binary",
        "description": "task hashes, 32 lowercase hex characters each, back to back"}}}}},
    responses={200: {"content": {PACKED: {"schema": {
        "type": "string", "format": "binary",
        "description": "one byte per hash, in order: 1 if indexed, 0 if not"}}}}},
)
