"""Bearer tokens with a read and a write scope (docs/protocol.md, "Authentication").

Tokens come from ``RESULT_CACHE_TOKENS`` (``read:tok1,write:tok2``) and from the file named
by ``RESULT_CACHE_TOKENS_FILE`` (one ``scope:token`` per line, ``#`` comments, blank lines
ignored); both may be used, their tokens are combined. ``write`` implies ``read``. With no
token configured at all, authentication is off and the server says so loudly at start.

Tokens are compared through their SHA-256 digests in a dict, so the time a check takes does
not depend on how much of a guess matches a real token. A malformed configuration refuses
to start the server (fail closed): a typo must never turn authentication off.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Request
from fastapi.responses import RedirectResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as ASGIScope

from cache_server.api.errors import ApiError, Forbidden, Unauthorized, answer_error

__all__ = [
    "AuthenticateFirst",
    "ReadAccess",
    "Scope",
    "TOKEN_COOKIE",
    "TokenError",
    "TokenTable",
    "WriteAccess",
    "check_exposure",
    "is_loopback",
    "refusal",
    "require",
]


class Scope(IntEnum):
    """What a token may do; a higher scope includes the lower ones."""

    read = 1
    write = 2


class TokenError(ValueError):
    """The token configuration is malformed (the server does not start)."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _check_token(token: str, where: str) -> None:
    if not token:
        raise TokenError(f"{where}: empty token")
    if not all(0x21 <= ord(c) <= 0x7E for c in token) or "," in token:
        raise TokenError(f"{where}: a token must be visible ASCII without commas or spaces")


@dataclass(frozen=True)
class TokenTable:
    """The configured tokens, by SHA-256 digest. Immutable, so safe to share."""

    scopes: dict[bytes, Scope]

    @property
    def enabled(self) -> bool:
        return bool(self.scopes)

    @classmethod
    def parse(cls, pairs: Iterable[tuple[str, str]]) -> TokenTable:
        """Build from ``(where, "scope:token")`` pairs; raises :class:`TokenError`."""
        scopes: dict[bytes, Scope] = {}
        for where, pair in pairs:
            name, sep, token = pair.strip().partition(":")
            if not sep or name.strip() not in Scope.__members__:
                raise TokenError(f"{where}: expected 'read:TOKEN' or 'write:TOKEN'")
            _check_token(token, where)
            scope = Scope[name.strip()]
            digest = _digest(token)
            if scopes.get(digest, scope) != scope:
                raise TokenError(f"{where}: the same token is given two scopes")
            scopes[digest] = scope
        return cls(scopes)

    @classmethod
    def from_settings(cls, tokens: str | None, tokens_file: Path | None) -> TokenTable:
        """The tokens of ``RESULT_CACHE_TOKENS`` and ``RESULT_CACHE_TOKENS_FILE``."""
        pairs: list[tuple[str, str]] = []
        for n, pair in enumerate((tokens or "").split(","), 1):
            if pair.strip():
                pairs.append((f"RESULT_CACHE_TOKENS item {n}", pair))
        if tokens_file is not None:
            try:
                lines = Path(tokens_file).read_text().splitlines()
            except OSError as exc:
                raise TokenError(f"cannot read RESULT_CACHE_TOKENS_FILE: {exc}") from exc
            for n, line in enumerate(lines, 1):
                line = line.strip()
                if line and not line.startswith("#"):
                    pairs.append((f"{tokens_file} line {n}", line))
            if not pairs:
                raise TokenError(f"{tokens_file} holds no token")
        return cls.parse(pairs)

    def scope_of(self, token: str) -> Scope | None:
        return self.scopes.get(_digest(token))


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is reachable from this machine only."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def check_exposure(tokens: TokenTable, address: str, allow_open: bool) -> None:
    """Refuse to serve without tokens on ``address`` beyond loopback (``TokenError``), unless
    ``allow_open`` (``RESULT_CACHE_ALLOW_OPEN=1``) says that an open cache is intended:
    whoever reaches it could read, replace and delete every result."""
    if tokens.enabled or allow_open or is_loopback(address):
        return
    raise TokenError(
        f"refusing to serve without tokens on {address}: anyone who can reach it could read, "
        "overwrite and delete cached results. Set RESULT_CACHE_TOKENS='read:<token>,"
        "write:<token>' (or RESULT_CACHE_TOKENS_FILE), bind 127.0.0.1, or set "
        "RESULT_CACHE_ALLOW_OPEN=1 if an open cache is what you want"
    )


_bearer = HTTPBearer(auto_error=False, description="a read or write token of this server")
#: The cookie the dashboard's login form sets: the same token, for a browser.
TOKEN_COOKIE = "result_cache_token"


async def refusal(request: Request, scope: Scope) -> ApiError | None:
    """Why ``request`` may not do what needs ``scope`` (401 or 403), or None if it may."""
    table: TokenTable = request.app.state.tokens
    if not table.enabled:
        return None
    credentials = await _bearer(request)
    token = credentials.credentials if credentials is not None else (
        request.cookies.get(TOKEN_COOKIE))
    if not token:
        return Unauthorized(
            "this cache server requires a bearer token (Authorization: Bearer <token>)"
        )
    granted = table.scope_of(token)
    if granted is None:
        return Unauthorized("the bearer token is not valid on this cache server")
    if granted < scope:
        return Forbidden(
            f"the token has scope '{granted.name}'; "
            f"{request.method} {request.url.path} needs '{scope.name}'"
        )
    return None


def require(scope: Scope):  # noqa: ANN201 - a FastAPI dependency
    """A dependency refusing requests without a token of at least ``scope``.

    401 when the token is missing or unknown, 403 when its scope is too low; nothing is
    checked when the server has no tokens.
    """

    async def check(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        # ``credentials`` is declared so that /docs shows the scheme; refusal reads it again.
        denied = await refusal(request, scope)
        if denied is not None:
            raise denied

    return check


#: Route dependencies: ``dependencies=[ReadAccess]``.
ReadAccess = Depends(require(Scope.read))
WriteAccess = Depends(require(Scope.write))


class AuthenticateFirst:
    """Pure ASGI middleware: a request without a valid token is answered 401 before the app
    reads a byte of its body (FastAPI parses a JSON body before any route dependency runs),
    and its connection is closed, so the body is never read at all. Scopes are checked by
    the routes (:data:`WriteAccess`); ``public`` paths, and those under a ``public_prefix``
    (the package's own static files: code, never data), need no token."""

    def __init__(self, app: ASGIApp,
                 public: frozenset[str] = frozenset({"/healthz", "/login"}),
                 public_prefix: str = "/static/") -> None:
        self.app = app
        self.public = public
        self.public_prefix = public_prefix

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (scope["type"] == "http" and path not in self.public
                and not path.startswith(self.public_prefix)):
            request = Request(scope)
            denied = await refusal(request, Scope.read)
            if denied is not None and _wants_page(request):
                # A browser without a token: the login form rather than a JSON 401.
                await RedirectResponse("/login", status_code=303)(scope, receive, send)
                return
            if denied is not None:
                response = await answer_error(request, denied)
                response.headers["Connection"] = "close"
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _wants_page(request: Request) -> bool:
    return (request.method == "GET" and not request.url.path.startswith("/v1/")
            and "text/html" in request.headers.get("accept", ""))
