"""Bearer tokens with a read and a write scope (docs/protocol.md, "Authentication").

Tokens come from ``RESULT_CACHE_TOKENS`` (``read:tok1,write:tok2``) and from the file named
by ``RESULT_CACHE_TOKENS_FILE`` (one ``scope:token`` per line, ``#`` comments, blank lines
ignored); both may be used, their tokens are combined. ``write`` implies ``read``. With no
token configured at all, authentication is off and the server says so loudly at start.

Tokens are compared through their SHA-256 digests in a dict, so the time a check takes does
not depend on how much of a guess matches a real token. A malformed configuration refuses
to start the server (fail closed): a typo must never turn authentication off, and neither
may a guessable token: one shorter than :data:`MIN_TOKEN_CHARS` (128 bits as hex) is refused.

Wrong tokens are throttled per client address (:class:`Throttle`): past a few failures,
every attempt from that address, right or wrong, is answered 429 with ``Retry-After`` for
a time that doubles with each further failure; other addresses are not affected.

A browser signed in at ``/login`` holds a session id (:mod:`cache_server.api.sessions`),
which counts on the dashboard's own routes only, never on ``/v1/*``.
"""

from __future__ import annotations

import hashlib
import ipaddress
import time
from collections import OrderedDict
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

from cache_server.api.errors import (
    ApiError,
    Forbidden,
    TooManyAttempts,
    Unauthorized,
    answer_error,
)

__all__ = [
    "MIN_TOKEN_CHARS",
    "SESSION_COOKIE",
    "AuthenticateFirst",
    "ReadAccess",
    "Scope",
    "Throttle",
    "TokenError",
    "TokenTable",
    "WriteAccess",
    "check_exposure",
    "client_address",
    "failed_attempt",
    "is_loopback",
    "refusal",
    "require",
    "throttled",
]


class Scope(IntEnum):
    """What a token may do; a higher scope includes the lower ones."""

    read = 1
    write = 2


class TokenError(ValueError):
    """The token configuration is malformed (the server does not start)."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


#: The shortest token accepted: 128 bits written as hex (``dask-cache keygen`` makes 256).
MIN_TOKEN_CHARS = 32


def _check_token(token: str, where: str) -> None:
    if not token:
        raise TokenError(f"{where}: empty token")
    if not all(0x21 <= ord(c) <= 0x7E for c in token) or "," in token:
        raise TokenError(f"{where}: a token must be visible ASCII without commas or spaces")
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenError(
            f"{where}: a token of {len(token)} characters is too easy to guess; use at least "
            f"{MIN_TOKEN_CHARS} (128 bits as hex), e.g. the key `dask-cache keygen` prints")


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


class Throttle:
    """Failed token attempts by client address, in this process (bounded: the addresses
    with the oldest failures are forgotten first). After ``free`` failures, the address is
    refused for ``first_wait`` seconds, doubled with each further failure up to
    ``longest_wait``; failures are forgotten ``forget_after`` seconds after the last one.
    A success forgets nothing (a holder of a read token must not reset his count while he
    guesses the write token). Not thread-safe: the event loop's only."""

    def __init__(self, free: int = 10, first_wait: float = 1.0, longest_wait: float = 300.0,
                 forget_after: float = 900.0, max_clients: int = 10_000) -> None:
        self.free, self.first_wait, self.longest_wait = free, first_wait, longest_wait
        self.forget_after, self.max_clients = forget_after, max_clients
        # address -> (failures, time of the last one, refused until)
        self._failures: OrderedDict[str, tuple[int, float, float]] = OrderedDict()

    def wait(self, client: str) -> float:
        """Seconds ``client`` is still refused (0: it may try)."""
        entry = self._failures.get(client)
        if entry is None:
            return 0.0
        now = time.monotonic()
        if now - entry[1] > self.forget_after:
            del self._failures[client]
            return 0.0
        return max(0.0, entry[2] - now)

    def failed(self, client: str) -> None:
        now = time.monotonic()
        count, last, _ = self._failures.pop(client, (0, now, now))
        if now - last > self.forget_after:
            count = 0
        count += 1
        until = now
        if count >= self.free:
            until += min(self.longest_wait, self.first_wait * 2 ** (count - self.free))
        self._failures[client] = (count, now, until)
        while len(self._failures) > self.max_clients:
            self._failures.popitem(last=False)


def client_address(request: Request) -> str:
    return request.client.host if request.client is not None else "unknown"


def throttled(request: Request) -> TooManyAttempts | None:
    """429 if ``request``'s address failed too often lately, else None."""
    wait = request.app.state.throttle.wait(client_address(request))
    if wait <= 0:
        return None
    return TooManyAttempts("too many wrong tokens from this address; retry later",
                           max(1, round(wait)))


def failed_attempt(request: Request) -> None:
    request.app.state.throttle.failed(client_address(request))


_bearer = HTTPBearer(auto_error=False, description="a read or write token of this server")
#: The dashboard's cookie: an opaque session id, never the token (sessions.py).
SESSION_COOKIE = "result_cache_session"


async def _cookie_scope(request: Request) -> Scope | None:
    session_id = request.cookies.get(SESSION_COOKIE)
    sessions = getattr(request.app.state, "sessions", None)
    if not session_id or sessions is None or request.url.path.startswith("/v1/"):
        return None  # the API takes bearer tokens only
    return await sessions.scope_of(session_id)


async def refusal(request: Request, scope: Scope) -> ApiError | None:
    """Why ``request`` may not do what needs ``scope`` (401, 403 or 429), or None if it
    may. A wrong bearer token counts as a failed attempt of the request's address."""
    table: TokenTable = request.app.state.tokens
    if not table.enabled:
        return None
    credentials = await _bearer(request)
    if credentials is not None:
        too_many = throttled(request)
        if too_many is not None:
            return too_many
        granted = table.scope_of(credentials.credentials)
        if granted is None:
            failed_attempt(request)
            return Unauthorized("the bearer token is not valid on this cache server")
    else:
        granted = await _cookie_scope(request)
        if granted is None:
            return Unauthorized(
                "this cache server requires a bearer token (Authorization: Bearer <token>)")
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
            if isinstance(denied, Unauthorized) and _wants_page(request):
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
