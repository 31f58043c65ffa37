"""``/v1/leases``: in-flight deduplication (docs/protocol.md, "Leases").

Taking, renewing and releasing leases needs a write token (only writers compute and
store); reading a lease's state needs a read token. Batches are bounded by
``max_lease_hashes``, TTLs by ``[1, 3600]`` seconds (and cut to ``max_lease_ttl``);
holders are short plain names (:mod:`cache_server.models`). New leases count in the
quota of the client that asks: its bearer token, or without one its address
(:func:`client_of`).
"""

from __future__ import annotations

import hashlib
import math
import re

from fastapi import APIRouter, Request
from starlette.responses import Response

from cache_server.api.auth import Scope, WriteAccess, refusal
from cache_server.api.dependencies import CacheDep, TaskHash
from cache_server.api.errors import InvalidRequest
from cache_server.api.responses import errors
from cache_server.api.routers.lookup import PACKED, PlainRoute, first_malformed, packed_hashes
from cache_server.models import (
    LeaseGrant,
    LeaseRelease,
    LeaseRenewal,
    LeaseRequest,
    LeaseReturn,
    LeaseState,
    LeaseUpdate,
)
from cache_server.service.cache import ResultCache
from client_lib.wire.bounds import MAX_LEASE_SECONDS, MIN_LEASE_SECONDS

__all__ = ["router"]

router = APIRouter(tags=["leases"])


def _json_list(hashes: list[str]) -> str:
    return '["' + '","'.join(hashes) + '"]' if hashes else "[]"


def client_of(request: Request) -> str:
    """Whose lease quota a request counts in: a short digest of its bearer token (checked
    already: a write token) when the server has tokens, else of its address (a holder name,
    or an unchecked header, is the client's own choice, so neither can be what a quota
    counts)."""
    if request.app.state.tokens.enabled:
        who = request.headers.get("authorization", "")
    else:
        who = "addr:" + (request.client.host if request.client else "")
    return hashlib.sha256(who.encode("utf-8", "replace")).hexdigest()[:16]


def _well_formed(hashes: list[str]) -> list[str]:
    malformed = first_malformed(hashes)
    if malformed is not None:
        raise InvalidRequest(f"malformed task hash {malformed[:64]!r}: need 32 lowercase hex")
    return hashes


@router.post("/v1/leases", dependencies=[WriteAccess], responses=errors(403, 429),
             response_model=LeaseGrant)
async def acquire(body: LeaseRequest, cache: CacheDep, request: Request) -> Response:
    """Lease each hash to ``holder`` for ``ttl`` seconds unless it is stored or another
    holder leases it. A holder's own leases are renewed (idempotent). 429 (nothing leased)
    if the leases outstanding could pass ``max_leases`` or this client's
    ``max_client_leases``."""
    granted, stored, held = await cache.leases.acquire(
        _well_formed(body.hashes), body.holder, body.ttl, client_of(request))
    # Written directly, as the lookup's answer: the items are validated hex (100k hashes
    # through the response model cost more than the rest of the route but Redis).
    text = (f'{{"granted":{_json_list(granted)},"stored":{_json_list(stored)},'
            f'"held":{_json_list(held)}}}')
    return Response(text.encode("ascii"), media_type="application/json")


_HOLDER = re.compile(r"[A-Za-z0-9_.-]{1,64}")


async def acquire_packed(request: Request) -> Response:
    """``POST /v1/leases`` for hashes sent back to back, ``holder`` and ``ttl`` in the
    query: one byte per hash answers, in order (0 granted, 1 stored, 2 held)."""
    denied = await refusal(request, Scope.write)
    if denied is not None:
        raise denied
    holder = request.query_params.get("holder", "")
    if _HOLDER.fullmatch(holder) is None:
        raise InvalidRequest(f"holder {holder[:80]!r}: need 1-64 of [A-Za-z0-9_.-]")
    try:
        ttl = float(request.query_params.get("ttl", "60"))
    except ValueError:
        ttl = math.nan
    if not MIN_LEASE_SECONDS <= ttl <= MAX_LEASE_SECONDS:  # also NaN
        raise InvalidRequest(f"ttl must be {MIN_LEASE_SECONDS:g}..{MAX_LEASE_SECONDS:g} s")
    packed = packed_hashes(await request.body())
    cache: ResultCache = request.app.state.cache
    answer = await cache.leases.acquire_packed(packed, holder, ttl, client_of(request))
    return Response(answer, media_type=PACKED)


router.add_api_route(
    "/v1/leases/packed",
    acquire_packed,
    methods=["POST"],
    route_class_override=PlainRoute,
    response_class=Response,
    openapi_extra={
        "parameters": [
            {"name": "holder", "in": "query", "required": True, "schema": {"type": "string"}},
            {"name": "ttl", "in": "query", "schema": {"type": "number", "default": 60}},
        ],
        "requestBody": {"required": True, "content": {PACKED: {"schema": {
            "type": "string", "format": "binary",
            "description": "task hashes, 32 lowercase hex characters each, back to back"}}}},
    },
    responses={**errors(403, 429), 200: {"content": {PACKED: {"schema": {
        "type": "string", "format": "binary",
        "description": "one byte per hash, in order: 0 granted, 1 stored, 2 held"}}}}},
)


@router.post("/v1/leases/renew", dependencies=[WriteAccess], responses=errors(403))
async def renew(body: LeaseUpdate, cache: CacheDep, request: Request) -> LeaseRenewal:
    """Extend the holder's leases by ``ttl`` seconds (re-taking expired ones nobody took)."""
    renewed, lost = await cache.leases.renew(_well_formed(body.hashes), body.holder,
                                             body.ttl, body.estimates, client_of(request))
    return LeaseRenewal(renewed=renewed, lost=lost)


@router.post("/v1/leases/release", dependencies=[WriteAccess], responses=errors(403))
async def release(body: LeaseRelease, cache: CacheDep, request: Request) -> LeaseReturn:
    """Drop the holder's leases of these hashes; others' leases are untouched."""
    return LeaseReturn(released=await cache.leases.release(
        _well_formed(body.hashes), body.holder, client_of(request)))


@router.get("/v1/leases/{task_hash}")
async def status(task_hash: TaskHash, cache: CacheDep) -> LeaseState:
    """Whether a run computes this hash now, and whether it is stored (for waiters);
    counts nothing."""
    state = await cache.leases.state(task_hash)
    return LeaseState(hash=task_hash, leased=state.leased, stored=state.stored,
                      ttl=state.ttl, estimate=state.estimate)
