"""uvicorn's HTTP protocol (httptools) with a bound on the request line and headers.

httptools accepts request heads of any size and builds each header value by repeated
concatenation: a 64 MB header held the event loop for seconds (``/healthz`` stalled 12.7 s)
and the memory for the whole head. Here the bytes of each request head are counted as they
arrive, *before* the parser sees them; past ``max_header_bytes`` the request is answered
``431`` and the connection closed, so a stranger costs at most that much per connection.
Bodies are not counted (their limits are the routes' business).

The protocol also offers the ASGI zero-copy send extension on plain sockets
(:mod:`cache_server.api.zero_copy`: object bodies go from file to socket with ``sendfile``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from cache_server.api.zero_copy import ZERO_COPY, ZeroCopySender

__all__ = ["DEFAULT_MAX_HEADER_BYTES", "bounded_http_protocol"]

DEFAULT_MAX_HEADER_BYTES = 64 * 1024
_END_OF_HEAD = b"\r\n\r\n"
logger = logging.getLogger("cache_server")


class _BoundedHttpToolsProtocol(HttpToolsProtocol):
    """One connection. ``max_header_bytes`` is set on the subclass that
    :func:`bounded_http_protocol` makes."""

    max_header_bytes = DEFAULT_MAX_HEADER_BYTES

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        # Bytes of the current request's head seen so far; None while its body arrives.
        self._head_bytes: int | None = 0
        self._tail = b""  # the last bytes seen, for an end of head split across reads
        self._zero_copy: ZeroCopySender | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if ZeroCopySender.possible(transport):
            self._zero_copy = ZeroCopySender(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._zero_copy is not None:
            self._zero_copy.close()
        super().connection_lost(exc)

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        if self._zero_copy is not None:
            cycle.scope.setdefault("extensions", {})[ZERO_COPY] = {}
            app = self._zero_copy.wrap(app, cycle)
        super()._start_asgi_task(cycle, app)

    def data_received(self, data: bytes) -> None:
        if self._head_bytes is not None:
            window = self._tail + data
            end = window.find(_END_OF_HEAD)
            head = len(data) if end < 0 else max(0, end + len(_END_OF_HEAD) - len(self._tail))
            self._head_bytes += head
            if self._head_bytes > self.max_header_bytes:
                self._refuse()
                return
            self._tail = window[-(len(_END_OF_HEAD) - 1):]
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._head_bytes = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head_bytes, self._tail = 0, b""  # a pipelined request may follow

    def _refuse(self) -> None:
        self._head_bytes = None
        logger.warning("refused a request from %s: its request line and headers exceed "
                       "max_header_bytes (%d bytes)", self.client, self.max_header_bytes)
        if self.cycle is None or self.cycle.response_complete:
            detail = json.dumps({"detail": "request line and headers exceed max_header_bytes "
                                           f"({self.max_header_bytes} bytes)"}).encode()
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                b"content-type: application/json\r\n"
                b"content-length: " + str(len(detail)).encode() + b"\r\n"
                b"connection: close\r\n\r\n" + detail
            )
        # (mid-response to an earlier pipelined request, a 431 would corrupt it: just close)
        self.transport.close()


def bounded_http_protocol(max_header_bytes: int) -> type[asyncio.Protocol]:
    """The protocol class to give ``uvicorn.Config(http=...)``."""
    return type("BoundedHttpToolsProtocol", (_BoundedHttpToolsProtocol,),
                {"max_header_bytes": max_header_bytes})
