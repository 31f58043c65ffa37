"""``/v1/leases``: in-flight deduplication (docs/protocol.md, "Leases").

Taking, renewing and releasing leases needs a write token (only writers compute and
store); reading a lease's state needs a read token. Batches are bounded by
``max_lease_hashes``, TTLs by ``[1, 3600]`` seconds; holders are short plain names
(:mod:`cache_server.models`).
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from cache_server.api.auth import WriteAccess
from cache_server.api.dependencies import CacheDep, TaskHash
from cache_server.api.errors import InvalidRequest
from cache_server.api.responses import errors
from cache_server.api.routers.lookup import first_malformed
from cache_server.models import (
    LeaseGrant,
    LeaseRelease,
    LeaseRenewal,
    LeaseRequest,
    LeaseReturn,
    LeaseState,
    LeaseUpdate,
)

__all__ = ["router"]

router = APIRouter(tags=["leases"])


def _json_list(hashes: list[str]) -> str:
    return '["' + '","'.join(hashes) + '"]' if hashes else "[]"


def _well_formed(hashes: list[str]) -> list[str]:
    malformed = first_malformed(hashes)
    if malformed is not None:
        raise InvalidRequest(f"malformed task hash {malformed[:64]!r}: need 32 lowercase hex")
    return hashes


@router.post("/v1/leases", dependencies=[WriteAccess], responses=errors(403),
             response_model=LeaseGrant)
async def acquire(body: LeaseRequest, cache: CacheDep) -> Response:
    """Lease each hash to ``holder`` for ``ttl`` seconds unless it is stored or another
    holder leases it. A holder's own leases are renewed (idempotent)."""
    granted, stored, held = await cache.leases.acquire(_well_formed(body.hashes),
                                                       body.holder, body.ttl)
    # Written directly, as the lookup's answer: the items are validated hex (100k hashes
    # through the response model cost more than the rest of the route but Redis).
    text = (f'{{"granted":{_json_list(granted)},"stored":{_json_list(stored)},'
            f'"held":{_json_list(held)}}}')
    return Response(text.encode("ascii"), media_type="application/json")


@router.post("/v1/leases/renew", dependencies=[WriteAccess], responses=errors(403))
async def renew(body: LeaseUpdate, cache: CacheDep) -> LeaseRenewal:
    """Extend the holder's leases by ``ttl`` seconds (re-taking expired ones nobody took)."""
    renewed, lost = await cache.leases.renew(_well_formed(body.hashes), body.holder,
                                             body.ttl, body.estimates)
    return LeaseRenewal(renewed=renewed, lost=lost)


@router.post("/v1/leases/release", dependencies=[WriteAccess], responses=errors(403))
async def release(body: LeaseRelease, cache: CacheDep) -> LeaseReturn:
    """Drop the holder's leases of these hashes; others' leases are untouched."""
    return LeaseReturn(released=await cache.leases.release(_well_formed(body.hashes),
                                                           body.holder))


@router.get("/v1/leases/{task_hash}")
async def status(task_hash: TaskHash, cache: CacheDep) -> LeaseState:
    """Whether a run computes this hash now, and whether it is stored (for waiters);
    counts nothing."""
    state = await cache.leases.state(task_hash)
    return LeaseState(hash=task_hash, leased=state.leased, stored=state.stored,
                      ttl=state.ttl, estimate=state.estimate)
