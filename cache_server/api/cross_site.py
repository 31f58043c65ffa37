"""Refuse the state-changing requests a web page could make a browser send
(docs/design/deployment.md, "Browsers and other origins").

Any page the user opens, another port of 127.0.0.1 included, can make the browser send
``POST`` requests without asking the server first (a form, ``fetch`` with
``mode: "no-cors"``), with a body typed as a form or ``text/plain``; it cannot read the
answers, but a tokenless server (the loopback default) or a dashboard cookie would let the
request act. So, whether or not tokens are configured, every request of a method other than
``GET``, ``HEAD`` and ``OPTIONS`` is refused:

- 403 when its ``Origin`` is not this server's own (scheme, host and port of the request's
  ``Host``; ``null`` included), or its ``Sec-Fetch-Site`` is neither ``same-origin`` nor
  ``none`` (browsers send both on every such request; programs send neither);
- a ``POST`` to the API (``/v1/*``, whose clients are programs): 415 when its body has
  one of the types a page may send freely, or no type at all, and for a route of its own
  media type (``POST /v1/objects/batch``) anything but that type.

``PUT`` and ``DELETE`` never leave a browser for another origin without a CORS preflight,
which this server does not answer; the dashboard's forms carry a CSRF token on top
(:mod:`cache_server.api.sessions`).
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from client_lib.wire import batch

__all__ = ["OWN_MEDIA_TYPES", "SIMPLE_MEDIA_TYPES", "CrossSiteGuard"]

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: The body types of a request a browser sends across origins without a preflight.
SIMPLE_MEDIA_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data",
                                "text/plain"})
#: Routes that take one media type only.
OWN_MEDIA_TYPES = {"/v1/objects/batch": batch.MEDIA_TYPE}
_SAME_SITE = frozenset({"same-origin", "none"})


class CrossSiteGuard:
    """Pure ASGI middleware applying the rules above before any route runs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in _SAFE_METHODS:
            refused = _refusal(scope)
            if refused is not None:
                status, detail = refused
                response = JSONResponse({"detail": detail}, status_code=status,
                                        headers={"Connection": "close"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _refusal(scope: Scope) -> tuple[int, str] | None:
    headers = Headers(scope=scope)
    origin = headers.get("origin")
    if origin is not None and origin.lower() != _own_origin(scope, headers):
        return 403, (f"refused a {scope['method']} from the page of another origin "
                     f"({origin[:100]}): cross-origin writes are not accepted")
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in _SAME_SITE:
        return 403, (f"refused a {scope['method']} sent by a browser for another site "
                     f"(Sec-Fetch-Site: {fetch_site[:30]})")
    path: str = scope["path"]
    if scope["method"] != "POST" or not path.startswith("/v1/"):
        return None  # (a PUT or DELETE needs a preflight: no page sends one here)
    media_type = headers.get("content-type", "").split(";")[0].strip().lower()
    wanted = OWN_MEDIA_TYPES.get(path)
    if wanted is not None and media_type != wanted:
        return 415, f"{path} takes Content-Type {wanted}, not {media_type or 'none'!r}"
    has_body = "transfer-encoding" in headers or headers.get("content-length", "0") != "0"
    if media_type in SIMPLE_MEDIA_TYPES or (has_body and not media_type):
        return 415, (f"Content-Type {media_type or 'none'!r} is not accepted on the API: a "
                     "web page could send it (use the route's own type, e.g. application/json)")
    return None


def _own_origin(scope: Scope, headers: Headers) -> str:
    scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
    host = headers.get("host", "").lower()
    default = ":443" if scheme == "https" else ":80"
    if host.endswith(default):
        host = host[: -len(default)]
    return f"{scheme}://{host}"
