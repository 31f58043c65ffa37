"""The app's ASGI middleware, pure ASGI so that streamed bodies pass through untouched.

- :class:`JsonBodyLimit`: a size limit on every request body but object uploads (which
  stream, with their own limits). FastAPI reads a JSON body (``POST /v1/lookup``) whole
  before validating it, so without this a client could make the server hold gigabytes of
  garbage.
- :class:`MetricsMiddleware`: counts and times every request by route template.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cache_server.metrics import Metrics

__all__ = ["JsonBodyLimit", "MetricsMiddleware"]


class JsonBodyLimit:
    """413 for a non-``PUT`` request whose body exceeds ``limit`` bytes: up front from
    ``Content-Length``, or from the read that crosses it when the body is chunked."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    def _message(self) -> str:
        return f"request body exceeds max_json_bytes ({self.limit} bytes)"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "PUT":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                response = JSONResponse({"detail": self._message()}, status_code=413)
                await response(scope, receive, send)
                return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    # FastAPI passes an HTTPException raised while reading the body through.
                    raise HTTPException(413, self._message())
            return message

        await self.app(scope, limited_receive, send)


class MetricsMiddleware:
    """Counts and times every HTTP request by route template (pure ASGI: streaming-safe)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_with_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        finally:
            route: Any = scope.get("route")
            template = getattr(route, "path", "unmatched")
            method = scope["method"]
            self.metrics.requests.labels(method, template, str(status)).inc()
            self.metrics.request_seconds.labels(method, template).observe(
                time.perf_counter() - started
            )
