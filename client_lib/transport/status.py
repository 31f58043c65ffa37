"""What a cache server's answer means: the one mapping of statuses every request shares.

A server error (5xx, but 507: no room, which is an answer) is the server failing, not the
request: the caller tries the next replica, then :class:`CacheUnavailable`. A refused
token (401/403) is :class:`CacheAccessDenied` with a hint. A 503 with ``Retry-After`` is a
server that is busy, not lost (:func:`busy_wait`). Other statuses are the caller's.
"""

from __future__ import annotations

import httpx

from ..core.errors import CacheAccessDenied, CacheProtocolError, CacheUnavailable, access_hint

__all__ = ["MAX_BUSY_WAIT", "busy_wait", "check_status", "detail", "expect", "server_error"]

#: The longest a busy server's ``Retry-After`` makes us wait before asking again.
MAX_BUSY_WAIT = 5.0


def server_error(status: int) -> bool:
    """A status that says the server failed, not the request (507: no room, is an answer)."""
    return status >= 500 and status != 507


def busy_wait(response: httpx.Response) -> float | None:
    """Seconds to wait before asking again when the server answered 503 with Retry-After
    (a limit that frees itself: uploads or downloads in flight), else None."""
    if response.status_code != 503:
        return None
    try:
        return min(max(float(response.headers["retry-after"]), 0.1), MAX_BUSY_WAIT)
    except (KeyError, ValueError):
        return None


def check_status(response: httpx.Response, token_given: bool) -> None:
    """Raise :class:`CacheUnavailable` for a server error, :class:`CacheAccessDenied` (with
    what to do) for a refused token; return for any other status."""
    status = response.status_code
    what = f"{response.request.method} {response.request.url.copy_with(query=None)}"
    if server_error(status):
        raise CacheUnavailable(f"{what}: {status} {detail(response)}")
    if status not in (401, 403):
        return
    hint = access_hint(status, token_given, "set result-cache.token (DASK_RESULT_CACHE__TOKEN)")
    raise CacheAccessDenied(status, f"{what}: {status} {detail(response)}; {hint}", hint)


def expect(response: httpx.Response, status: int) -> None:
    """:class:`CacheProtocolError` unless the response has ``status``."""
    if response.status_code != status:
        raise CacheProtocolError(f"{response.request.method} {response.request.url.path}: "
                                 f"expected {status}, got {response.status_code} "
                                 f"{detail(response)}")


def detail(response: httpx.Response) -> str:
    """The server's reason, for a message: the ``detail`` of a JSON error, else a short
    note of what answered (never a page of HTML from whatever listens at that address)."""
    kind = response.headers.get("content-type", "").split(";")[0].strip()
    if kind == "application/json":
        try:
            response.read()
            return str(response.json().get("detail", ""))[:500]
        except Exception:  # noqa: S110 - falls through to the note below
            pass
    return (f"(a {kind or 'body without a content type'} answer, not the cache's JSON: is "
            "this a result cache server?)")
