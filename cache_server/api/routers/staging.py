"""Direct writes (docs/protocol.md, "Direct writes"): ``POST /v1/staging`` names where a
worker that sees the storage puts an object's files, ``POST /v1/objects/{hash}/commit``
has the server verify them where they lie and publish the object."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse

from cache_server.api.auth import WriteAccess
from cache_server.api.dependencies import CacheDep
from cache_server.api.errors import InvalidRequest
from cache_server.api.responses import errors
from cache_server.api.routers.objects import UploadHeaders, stored_answer
from cache_server.models import Manifest, StagingPlace, StagingRequest
from storage import ObjectHeader
from storage.header import DIGEST_PATTERN

__all__ = ["router"]

router = APIRouter(tags=["objects"])


@router.post("/v1/staging", dependencies=[WriteAccess], response_model=StagingPlace,
             responses=errors(403, 409, 507))
async def new_staging(request: StagingRequest, cache: CacheDep) -> StagingPlace:
    """A fresh place to stage one object's files, and their layout. Nothing is created:
    the writer makes the directory (a writer without access to the storage fails there
    and uploads with ``PUT`` instead). 409 when the storage takes no staged objects."""
    header = ObjectHeader.from_wire(request.kind, request.dtype, request.shape)
    return StagingPlace(**(await cache.staging(header)).to_json())


@router.post(
    "/v1/objects/{task_hash}/commit",
    status_code=201,
    dependencies=[WriteAccess],
    responses={
        200: {"model": Manifest, "description": "already indexed; the staged files removed"},
        **errors(400, 403, 404, 413, 507),
    },
)
async def commit_object(
    upload: UploadHeaders,
    cache: CacheDep,
    staging: Annotated[str, Header(alias="X-Result-Staging", pattern=DIGEST_PATTERN)],
) -> JSONResponse:
    """Store the object staged under ``X-Result-Staging`` with the headers of a ``PUT``
    (no body): the server reads and verifies the staged files, then publishes the entry
    as a ``PUT`` would. The staged files are gone afterwards, stored or refused (400:
    they do not match; 404: nothing staged there)."""
    if upload.content_length:
        raise InvalidRequest("a commit has no body: the object is its staged files")
    manifest, created = await cache.commit_staged(replace(upload, content_length=None),
                                                  staging)
    return stored_answer(manifest, created)
