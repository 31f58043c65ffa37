"""Error responses in the OpenAPI schema: every status a route can answer is declared, so
clients (and schemathesis) can rely on the schema. All carry ``{"detail": "<message>"}``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

__all__ = ["COMMON_ERRORS", "ErrorBody", "errors"]


class ErrorBody(BaseModel):
    detail: str


_DESCRIPTIONS = {
    400: "the body does not match its digest, dtype or shape",
    401: "missing or unknown bearer token (when the server has tokens)",
    403: "the token's scope does not allow this request",
    404: "unknown hash (or an object found missing or corrupt; or nothing staged there)",
    408: "the upload sent nothing for body_timeout seconds; aborted",
    409: "the storage takes no staged objects (of this kind): upload with PUT",
    413: "body larger than the server accepts",
    422: "malformed hash, header, query or body",
    429: "too many leases outstanding (max_leases, max_client_leases; see Retry-After)",
    503: "the index (Redis) is unreachable, or the server is at a limit that frees itself "
         "(max_uploads, max_body_memory; see Retry-After)",
    507: "no room: larger than max_bytes, the cache is full of pinned entries, or disk full",
}

#: What any route but /healthz may answer.
COMMON_ERRORS = (401, 413, 422, 503)


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries for these statuses (and nothing else)."""
    return {s: {"model": ErrorBody, "description": _DESCRIPTIONS[s]} for s in statuses}
