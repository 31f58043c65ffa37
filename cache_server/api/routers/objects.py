"""``PUT``/``GET``/``HEAD /v1/objects/{hash}``: object bodies, streamed both ways."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Annotated, Any
from urllib.parse import quote, unquote

from anyio import fail_after
from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.types import Receive, Scope, Send

from cache_server.api.auth import WriteAccess
from cache_server.api.dependencies import CacheDep, SettingsDep, TaskHash
from cache_server.api.errors import InvalidRequest, status_of
from cache_server.api.raw_body import upload_chunks
from cache_server.api.responses import errors
from cache_server.api.routers.runs import RunHeader
from cache_server.api.zero_copy import ZERO_COPY
from cache_server.models import Manifest
from cache_server.service.body import PIECE_BYTES
from cache_server.service.errors import BodyTooLarge
from cache_server.service.reads import FileBody
from cache_server.service.upload import Upload, header_safe
from client_lib.wire import batch, bounds
from client_lib.wire import headers as result_headers
from storage import ObjectHeader, is_digest

__all__ = ["UploadHeaders", "router", "stored_answer"]

router = APIRouter(tags=["objects"])

_OCTETS = "application/octet-stream"


def _decode_label(raw: str) -> str:
    try:
        return unquote(raw, errors="strict")
    except UnicodeDecodeError as exc:
        raise InvalidRequest("X-Result-Label is not percent-encoded UTF-8") from exc


def _parse_content_length(raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        length = int(raw)
    except ValueError:
        raise InvalidRequest(f"malformed Content-Length {raw!r}") from None
    if length < 0:
        raise InvalidRequest(f"malformed Content-Length {raw!r}")
    return length


async def upload_headers(
    request: Request,
    task_hash: TaskHash,
    kind: Annotated[str, Header(alias=result_headers.KIND)],
    digest: Annotated[str, Header(alias=result_headers.DIGEST)],
    compute_seconds: Annotated[float, Header(alias=result_headers.COMPUTE_SECONDS)],
    label: Annotated[str, Header(alias=result_headers.LABEL)],
    dtype: Annotated[str | None, Header(alias=result_headers.DTYPE)] = None,
    shape: Annotated[str | None, Header(alias=result_headers.SHAPE)] = None,
    type_name: Annotated[str | None, Header(alias=result_headers.TYPE)] = None,
    signature: Annotated[str | None, Header(alias=result_headers.SIGNATURE)] = None,
    ttl: Annotated[float | None, Header(alias=result_headers.TTL)] = None,
    run: RunHeader = None,
    overwrite: Annotated[bool, Query(description="replace an indexed entry")] = False,
) -> Upload:
    """The validated metadata of a ``PUT`` (or a staged object's commit) from its headers."""
    return Upload(
        task_hash=task_hash,
        header=ObjectHeader.from_wire(kind, dtype, shape),
        digest=digest,
        compute_seconds=compute_seconds,
        label=_decode_label(label),
        type_name=type_name or None,
        content_length=_parse_content_length(request.headers.get("content-length")),
        signature=signature,
        ttl=ttl,
        overwrite=overwrite,
        run=run,
    )


#: An upload's metadata, from the ``X-Result-*`` headers of its request.
UploadHeaders = Annotated[Upload, Depends(upload_headers)]


@router.put(
    "/v1/objects/{task_hash}",
    status_code=201,
    dependencies=[WriteAccess],
    responses={
        200: {"model": Manifest, "description": "already indexed; body discarded"},
        **errors(400, 403, 408, 413, 507),
    },
)
async def put_object(request: Request, upload: UploadHeaders, cache: CacheDep) -> Response:
    """Store a result. Durable before indexed; idempotent (``overwrite=true`` replaces an
    existing entry instead); nothing kept on any error."""
    manifest, created = await cache.store(upload, upload_chunks(request))
    return stored_answer(manifest, created)


def stored_answer(manifest: Manifest, created: bool) -> JSONResponse:
    """201 with the manifest of a new entry, 200 with that of the indexed one."""
    return JSONResponse(manifest.model_dump(mode="json"), status_code=201 if created else 200)


class _BodyResponse(StreamingResponse):
    """Streams the service's pieces in slices of at most ``PIECE_BYTES``, each handed to
    the connection within ``send_timeout`` seconds (uvicorn waits while the client does not
    read: a reader that stalls for longer is cut off, releasing what its stream holds), and
    always closes the pieces' generator (storage reader, memory reservation, read mark)."""

    def __init__(self, pieces: AsyncGenerator[memoryview], send_timeout: float,
                 headers: dict[str, str]) -> None:
        super().__init__(pieces, media_type=_OCTETS, headers=headers)
        self.pieces = pieces
        self.send_timeout = send_timeout

    async def stream_response(self, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
            async for piece in self.pieces:
                for start in range(0, piece.nbytes, PIECE_BYTES):
                    with fail_after(self.send_timeout):
                        await send({"type": "http.response.body", "more_body": True,
                                    "body": piece[start:start + PIECE_BYTES]})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await self.pieces.aclose()


class _FileBodyResponse(Response):
    """Sends a :class:`FileBody` with one zero-copy message per file range (a reader whose
    socket takes nothing for ``send_timeout`` seconds is cut off), and always releases what
    the body holds (read mark, memory reservation). A file that vanished or shrank
    meanwhile cuts the response off: the client never sees a complete body then."""

    def __init__(self, body: FileBody, send_timeout: float, headers: dict[str, str]) -> None:
        super().__init__(media_type=_OCTETS, headers=headers)
        self.body_files = body
        self.send_timeout = send_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
            for part in self.body_files.ranges:
                with open(part.path, "rb", buffering=0) as file:
                    await send({"type": ZERO_COPY, "file": file, "offset": part.offset,
                                "count": part.size, "more_body": True,
                                "timeout": self.send_timeout})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await self.body_files.close()


def _object_headers(manifest: Manifest) -> dict[str, str]:
    headers = {
        result_headers.KIND: manifest.kind,
        result_headers.DIGEST: manifest.digest,
        result_headers.COMPUTE_SECONDS: repr(manifest.compute_seconds),
        result_headers.LABEL: quote(manifest.label, safe=""),
        "Content-Length": str(manifest.nbytes),
    }
    if manifest.kind == "ndarray":
        header = ObjectHeader.array(manifest.dtype or "", manifest.shape or [])
        headers[result_headers.DTYPE] = header.dtype
        headers[result_headers.SHAPE] = header.shape_text
    # Stored fields never go into a header raw: a CR/LF there would break every GET.
    if header_safe(manifest.type):
        headers[result_headers.TYPE] = manifest.type  # type: ignore[assignment]
    if header_safe(manifest.signature):
        headers[result_headers.SIGNATURE] = manifest.signature  # type: ignore[assignment]
    if manifest.expires is not None:
        headers[result_headers.EXPIRES] = repr(manifest.expires)
    return headers


@router.get(
    "/v1/objects/{task_hash}",
    response_class=StreamingResponse,
    responses={200: {"content": {_OCTETS: {}}}, **errors(404)},
)
async def get_object(request: Request, task_hash: TaskHash, cache: CacheDep,
                     settings: SettingsDep, run: RunHeader = None) -> Response:
    """The body, streamed from storage (verified by the server below
    ``zero_copy_min_bytes``; larger bodies go from their files to the socket as they lie,
    and the client verifies them); counts a hit and the entry's compute seconds as saved."""
    zero_copy = ZERO_COPY in request.scope.get("extensions", {})
    manifest, body = await cache.serve(task_hash, run, zero_copy=zero_copy)
    if isinstance(body, FileBody):
        return _FileBodyResponse(body, settings.body_timeout, _object_headers(manifest))
    return _BodyResponse(body, settings.body_timeout, _object_headers(manifest))


@router.head("/v1/objects/{task_hash}", responses=errors(404))
async def head_object(task_hash: TaskHash, cache: CacheDep) -> Response:
    """The headers of ``GET`` without the body; checks the object exists, does not count a hit."""
    manifest = await cache.head(task_hash)
    return Response(media_type=_OCTETS, headers=_object_headers(manifest))


# -- batches of small objects (docs/protocol.md, "Batched stores") ---------------------------

_BATCH = batch.MEDIA_TYPE


def _batch_upload(meta: Any, nbytes: int) -> Upload:
    """One item's header (a JSON object) as a validated :class:`Upload`."""
    if not isinstance(meta, dict):
        raise InvalidRequest("a batch item's header must be a JSON object")
    try:
        task_hash, kind, digest = str(meta["hash"]), str(meta["kind"]), str(meta["digest"])
        seconds, label = float(meta["compute_seconds"]), str(meta["label"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidRequest(f"batch item header: missing or bad field {exc}") from None
    if not is_digest(task_hash):
        raise InvalidRequest(f"malformed task hash {task_hash[:64]!r}: need 32 lowercase hex")
    optional = {k: meta.get(k) for k in ("dtype", "shape", "type", "signature", "ttl", "run")}
    if any(v is not None and not isinstance(v, str | int | float) for v in optional.values()):
        raise InvalidRequest("batch item header: optional fields must be strings or numbers")
    ttl = optional["ttl"]
    return Upload(
        task_hash=task_hash,
        header=ObjectHeader.from_wire(kind, optional["dtype"], optional["shape"]),
        digest=digest,
        compute_seconds=seconds,
        label=label,
        type_name=str(optional["type"]) if optional["type"] else None,
        content_length=nbytes,
        signature=str(optional["signature"]) if optional["signature"] is not None else None,
        ttl=float(ttl) if ttl is not None else None,
        run=str(optional["run"]) if optional["run"] is not None else None,
    )


def parse_batch(body: bytes | bytearray) -> list[tuple[Upload, memoryview]]:
    """Cut a batch body into uploads (docs/protocol.md, "Batched stores"; the framing is
    ``client_lib.wire.batch``'s). Raises :class:`InvalidRequest`."""
    try:
        items = batch.unpack(body)
    except batch.BatchFormatError as exc:
        raise InvalidRequest(str(exc)) from None
    return [(_batch_upload(meta, len(data)), data) for meta, data in items]


@router.post(
    "/v1/objects/batch",
    dependencies=[WriteAccess],
    openapi_extra={"requestBody": {"required": True, "content": {_BATCH: {"schema": {
        "type": "string", "format": "binary",
        "description": "items back to back: 4-byte big-endian header length, JSON header, "
                       "body (docs/protocol.md, Batched stores)"}}}}},
    responses=errors(400, 403, 413, 422, 503),
)
async def store_batch(request: Request, cache: CacheDep) -> JSONResponse:
    """Store many small objects with one group commit; answered once every stored object
    is durable and indexed. One result per item, in order: ``status`` 201 (stored), 200
    (indexed already) or the status a ``PUT`` of that item alone would have got."""
    length = _parse_content_length(request.headers.get("content-length"))
    if length is not None and length > bounds.MAX_BATCH_BYTES:
        raise BodyTooLarge(bounds.MAX_BATCH_BYTES)
    uploads, outcomes = await cache.store_batch(upload_chunks(request), bounds.MAX_BATCH_BYTES,
                                                parse_batch, length)
    results = []
    for (upload, _), outcome in zip(uploads, outcomes, strict=True):
        if isinstance(outcome, Exception):
            results.append({"hash": upload.task_hash, "status": status_of(outcome),
                            "detail": str(outcome)[:500]})
        else:
            results.append({"hash": upload.task_hash, "status": 201 if outcome[1] else 200})
    return JSONResponse({"results": results})
