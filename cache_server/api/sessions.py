"""Dashboard sign-ins and their CSRF tokens (docs/design/dashboard-and-runs.md, "Sessions").

A browser that signs in at ``/login`` gets an opaque random session id in an HttpOnly,
SameSite=Strict cookie, never the token itself: a page on another port of the same host
receives the cookie too (cookies ignore ports), and the id is worth nothing on the API
(``/v1/*`` takes bearer tokens only) and nothing after ``session_seconds``. The server keeps
the id's scope in Redis, under the SHA-256 of the id, with that expiry, so every replica
knows every session and a restart keeps them.

Every state-changing dashboard form carries a CSRF token: an HMAC of the session id under a
random secret kept in Redis (the same for every replica). A page of another origin cannot
read ours, so it cannot learn the token; without tokens configured (no session), the token
is the HMAC of the empty id, as unguessable.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from cache_server.api.auth import Scope
from cache_server.index.client import IndexRedis

__all__ = ["Sessions"]


class Sessions:
    """The sessions of one cache (Redis keys ``<prefix>session:*``). Safe to share between
    tasks; holds no state but the CSRF secret once read."""

    def __init__(self, redis: IndexRedis, prefix: str, lifetime: float) -> None:
        self.redis = redis
        self.prefix = prefix
        self.lifetime = lifetime
        self._secret: bytes | None = None

    def _key(self, session_id: str) -> str:
        return f"{self.prefix}session:{hashlib.sha256(session_id.encode()).hexdigest()}"

    async def open(self, scope: Scope) -> str:
        """A new session of ``scope``; returns its id (for the cookie)."""
        session_id = secrets.token_urlsafe(32)
        await self.redis.set(self._key(session_id), scope.name, px=int(self.lifetime * 1000))
        return session_id

    async def scope_of(self, session_id: str) -> Scope | None:
        """The scope of a live session, or None (unknown, expired or signed out)."""
        if not session_id or len(session_id) > 128:
            return None
        name = await self.redis.get(self._key(session_id))
        return Scope[name] if name in Scope.__members__ else None

    async def close(self, session_id: str) -> None:
        await self.redis.delete(self._key(session_id))

    async def csrf_token(self, session_id: str | None) -> str:
        """The CSRF token of the forms shown to ``session_id`` (None: no session)."""
        if self._secret is None:
            key = f"{self.prefix}session-secret"
            await self.redis.set(key, secrets.token_hex(32), nx=True)
            self._secret = str(await self.redis.get(key)).encode()
        return hmac.new(self._secret, (session_id or "").encode(), hashlib.sha256).hexdigest()

    async def csrf_ok(self, session_id: str | None, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(
            await self.csrf_token(session_id), str(token))
