"""How the API answers errors: one table from error class to HTTP status (:data:`STATUS`).

Every error response is ``{"detail": "<message>"}`` (docs/protocol.md). The service's
errors, the storage's and Redis outages are translated here and nowhere else; the classes
defined here are the HTTP layer's own refusals (tokens, malformed requests).
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import (
    AskError,
    ClusterDownError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.requests import ClientDisconnect

from cache_server.index.durability import NotReplicated
from cache_server.index.runs import RunTooLarge
from cache_server.service.errors import (
    BodyTimeout,
    BodyTooLarge,
    Busy,
    EntryNotFound,
    IndexUnavailable,
    InvalidLease,
    InvalidUpload,
    NoRoom,
    RunNotFound,
    TooManyLeases,
)
from storage import (
    CorruptObject,
    InvalidBody,
    InvalidHeader,
    PayloadTooLarge,
    StagingNotFound,
    StagingUnsupported,
)

__all__ = [
    "STATUS",
    "ApiError",
    "Forbidden",
    "InvalidRequest",
    "TooManyAttempts",
    "Unauthorized",
    "UnsupportedMediaType",
    "answer_error",
    "answer_validation_error",
    "install_error_handlers",
    "status_of",
]


class ApiError(Exception):
    """A refusal by the HTTP layer itself; ``str()`` is the message, :data:`STATUS` the
    status."""

    #: Extra response headers (``WWW-Authenticate`` on 401).
    headers: dict[str, str] | None = None


class InvalidRequest(ApiError):
    """Malformed hash, header, query or body."""


class Unauthorized(ApiError):
    """No bearer token, or one the server does not know (RFC 6750: ``invalid_token``)."""

    headers = {"WWW-Authenticate": 'Bearer realm="dask-result-cache"'}


class Forbidden(ApiError):
    """A valid token whose scope does not allow this request (read token, write request),
    or a state-changing request a browser sent from another origin."""


class UnsupportedMediaType(ApiError):
    """A state-changing API request whose body has a type a web page could send without
    asking (a form or ``text/plain``), or not the route's own type."""


class TooManyAttempts(ApiError):
    """Too many wrong tokens from one client address; ``Retry-After`` says when to retry."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.headers = {"Retry-After": str(retry_after)}


#: Every error the API answers on purpose, by class; a subclass answers like its nearest
#: listed base (DigestMismatch like CorruptObject, BodySizeMismatch like InvalidBody).
STATUS: dict[type[Exception], int] = {
    InvalidRequest: 422,
    Unauthorized: 401,
    Forbidden: 403,
    UnsupportedMediaType: 415,
    TooManyAttempts: 429,
    InvalidUpload: 422,
    InvalidLease: 422,
    TooManyLeases: 429,
    EntryNotFound: 404,
    RunNotFound: 404,
    BodyTooLarge: 413,
    BodyTimeout: 408,
    Busy: 503,
    NoRoom: 507,
    # Redis at its maxmemory under noeviction refuses writes: answered as no room, and
    # nothing already indexed is dropped to make any (docs/design/server-and-index.md,
    # "Bounds").
    OutOfMemoryError: 507,
    RunTooLarge: 413,
    IndexUnavailable: 503,
    InvalidHeader: 422,
    InvalidBody: 400,
    PayloadTooLarge: 413,
    StagingNotFound: 404,
    StagingUnsupported: 409,
    # Reads handle corrupt objects themselves (drop the entry, 404): one that reaches the
    # API is an upload whose body does not hash to its announced digest.
    CorruptObject: 400,
    RedisConnectionError: 503,
    RedisTimeoutError: 503,
    # Failing over (Sentinel, Cluster): a primary gone, demoted, or its slots moving.
    ClusterDownError: 503,
    TryAgainError: 503,
    AskError: 503,
    ReadOnlyError: 503,
    NotReplicated: 503,
    ClientDisconnect: 400,
}

#: The index's outages: answered 503 with ``Retry-After`` (the server reconnects by itself).
_UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, ClusterDownError, TryAgainError,
                AskError, ReadOnlyError, NotReplicated, IndexUnavailable)
_RETRY_AFTER_OUTAGE = "1"


def _out_of_memory(exc: BaseException) -> bool:
    """Redis refused a write at its maxmemory: as a command (``OutOfMemoryError``) or
    inside a script (a ``ResponseError`` quoting the OOM)."""
    return isinstance(exc, OutOfMemoryError) or (
        isinstance(exc, ResponseError) and "OOM command not allowed" in str(exc))


def status_of(exc: BaseException) -> int:
    """The status :data:`STATUS` gives ``exc`` (500 for an error it does not list)."""
    if _out_of_memory(exc):
        return 507
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def _message(exc: Exception) -> str:
    if isinstance(exc, RedisConnectionError | RedisTimeoutError):
        return f"the index (Redis) is unreachable: {exc}"
    if isinstance(exc, _UNAVAILABLE) and not isinstance(exc, IndexUnavailable):
        return f"the index (Redis) is failing over or not replicating: {exc}"
    if isinstance(exc, ClientDisconnect):
        return "client disconnected"
    if _out_of_memory(exc):
        return ("the index (Redis) is full (its maxmemory): nothing was written; remove "
                "entries or raise redis_max_memory")
    return str(exc)


async def answer_error(request: Request, exc: Exception) -> JSONResponse:
    """The response to an error listed in :data:`STATUS`."""
    response = JSONResponse({"detail": _message(exc)}, status_code=status_of(exc))
    if isinstance(exc, ApiError):
        response.headers.update(exc.headers or {})
    if isinstance(exc, Busy | TooManyLeases):
        response.headers["Retry-After"] = str(exc.retry_after)
    elif isinstance(exc, _UNAVAILABLE):
        response.headers["Retry-After"] = _RETRY_AFTER_OUTAGE
    return response


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = " ".join(
            str(p) for p in error.get("loc", ()) if p != "body" or len(error["loc"]) == 1
        )
        parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else error.get("msg", ""))
    return "; ".join(parts) or "invalid request"


async def answer_validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 naming every parameter FastAPI refused, and why."""
    return JSONResponse({"detail": _validation_message(exc)}, status_code=422)


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error class of :data:`STATUS`, and FastAPI's validation errors."""
    for error_class in STATUS:
        app.add_exception_handler(error_class, answer_error)
    app.add_exception_handler(ResponseError, _answer_response_error)
    app.add_exception_handler(RequestValidationError, answer_validation_error)  # type: ignore[arg-type]


async def _answer_response_error(request: Request, exc: Exception) -> JSONResponse:
    """A script's OOM is a full index (507); any other Redis error stays a server error."""
    if _out_of_memory(exc):
        return await answer_error(request, exc)
    raise exc
