"""Errors of the HTTP API: each carries its status, so no route has to guess one.

Every error response is ``{"detail": "<message>"}`` (docs/protocol.md). Storage errors and
request-validation errors are translated here, in one place.
"""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from storage import CorruptObject, InvalidBody, InvalidHeader

__all__ = [
    "ApiError",
    "BadUpload",
    "BodyTooLarge",
    "EntryNotFound",
    "Forbidden",
    "InsufficientStorage",
    "InvalidRequest",
    "ServiceUnavailable",
    "Unauthorized",
    "install_error_handlers",
    "storage_full",
]


class ApiError(Exception):
    """An error answered with ``status_code`` and ``{"detail": message}``."""

    status_code = 500
    #: Extra response headers (``WWW-Authenticate`` on 401).
    headers: dict[str, str] | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(ApiError):
    """Malformed hash, header, query or JSON body."""

    status_code = 422


class BadUpload(ApiError):
    """An upload whose body does not match its digest, dtype or shape."""

    status_code = 400


class EntryNotFound(ApiError):
    status_code = 404

    def __init__(self, task_hash: str) -> None:
        super().__init__(f"no entry for task hash {task_hash}")


class BodyTooLarge(ApiError):
    status_code = 413

    def __init__(self, limit: int) -> None:
        super().__init__(f"body exceeds max_body_bytes ({limit} bytes)")


class ServiceUnavailable(ApiError):
    status_code = 503


class Unauthorized(ApiError):
    """No bearer token, or one the server does not know (RFC 6750: ``invalid_token``)."""

    status_code = 401
    headers = {"WWW-Authenticate": 'Bearer realm="dask-result-cache"'}


class Forbidden(ApiError):
    """A valid token whose scope does not allow this request (read token, write request)."""

    status_code = 403


class InsufficientStorage(ApiError):
    """No room for an object: larger than ``max_bytes``, the cache is full of pinned
    entries, or the disk itself is full."""

    status_code = 507


#: ``OSError`` numbers that mean "the disk is full" (or a per-file or per-user limit hit).
_NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def storage_full(exc: BaseException) -> bool:
    """Whether ``exc`` is the file system saying there is no room."""
    return isinstance(exc, OSError) and exc.errno in _NO_SPACE_ERRNOS


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"detail": message}, status_code=status)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = " ".join(
            str(p) for p in error.get("loc", ()) if p != "body" or len(error["loc"]) == 1
        )
        parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else error.get("msg", ""))
    return "; ".join(parts) or "invalid request"


#: Errors raised below the HTTP layer, by status. A CorruptObject reaching a handler comes
#: from an upload whose body does not hash to its announced digest (reads handle corrupt
#: objects themselves: drop the entry, answer 404).
_FOREIGN_ERRORS: dict[type[Exception], int] = {
    InvalidHeader: 422,
    InvalidBody: 400,
    CorruptObject: 400,
    RedisConnectionError: 503,
    RedisTimeoutError: 503,
}


def _answer_with(status: int) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    async def handler(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, RedisConnectionError | RedisTimeoutError):
            return _error(status, f"the index (Redis) is unreachable: {exc}")
        return _error(status, str(exc))

    return handler


def install_error_handlers(app: FastAPI) -> None:
    """Register the translations of every error class above (and of Redis outages)."""

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        response = _error(exc.status_code, exc.message)
        response.headers.update(exc.headers or {})
        return response

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(422, _validation_message(exc))

    for error_class, status in _FOREIGN_ERRORS.items():
        app.add_exception_handler(error_class, _answer_with(status))
