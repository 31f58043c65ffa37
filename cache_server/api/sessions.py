"""Dashboard sign-ins and their CSRF tokens (docs/design/dashboard-and-runs.md, "Sessions").

A browser that signs in at ``/login`` gets an opaque random session id in an HttpOnly,
SameSite=Strict cookie, never the token itself: a page on another port of the same host
receives the cookie too (cookies ignore ports), and the id is worth nothing on the API
(``/v1/*`` takes bearer tokens only) and nothing after ``session_seconds``. The server keeps
the id's scope in Redis, under the SHA-256 of the id, with that expiry, so every replica
knows every session and a restart keeps them.

Every state-changing dashboard form carries a CSRF token: an HMAC of the session id under a
secret every replica derives alike: from the configured tokens' digests, or, without
tokens (no sessions then; the token is the HMAC of the empty id), from a random file in
the data directory, which the replicas of a tokenless (loopback) server share. A page of
another origin cannot read ours, so it cannot learn the token.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from cache_server.api.auth import Scope
from cache_server.index.client import IndexRedis

__all__ = ["Sessions"]


class Sessions:
    """The sessions of one cache (Redis keys ``<prefix>session:*``). Safe to share between
    tasks; holds no state but the CSRF secret once read."""

    def __init__(self, redis: IndexRedis, prefix: str, lifetime: float, secret: bytes) -> None:
        self.redis = redis
        self.prefix = prefix
        self.lifetime = lifetime
        self._secret = secret

    @staticmethod
    def secret_for(token_digests: list[bytes], data_dir: Path) -> bytes:
        """The CSRF secret: from the tokens when there are any, else from
        ``data_dir/csrf-secret`` (made once, readable by its owner only)."""
        if token_digests:
            return hashlib.sha256(b"csrf\0" + b"".join(sorted(token_digests))).digest()
        path = Path(data_dir) / "csrf-secret"
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return path.read_bytes()
        with os.fdopen(fd, "wb") as file:
            file.write(secrets.token_bytes(32))
        return path.read_bytes()

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
        return hmac.new(self._secret, (session_id or "").encode(), hashlib.sha256).hexdigest()

    async def csrf_ok(self, session_id: str | None, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(
            await self.csrf_token(session_id), str(token))
