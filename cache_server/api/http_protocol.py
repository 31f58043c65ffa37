"""uvicorn's HTTP protocol (httptools) with a bound on the request line and headers.

httptools accepts request heads of any size and builds each header value by repeated
concatenation: a 64 MB header held the event loop for seconds (``/healthz`` stalled 12.7 s)
and the memory for the whole head. Here the bytes of each request head are counted as they
arrive, *before* the parser sees them; past ``max_header_bytes`` the request is answered
``431`` and the connection closed, so a stranger costs at most that much per connection.
Bodies are not counted (their limits are the routes' business).

A connection must finish each request head within ``head_timeout`` seconds of opening (or of
its previous response) or it is closed, and the process keeps at most ``max_connections``
open (by default its soft open-files limit less a reserve for Redis, storage and sendfile):
a new connection beyond it closes the oldest one still sending its head. Connections that
open and stall (1,100 of them reset every fresh ``/healthz`` before, issue 29 row 10) so
cost a bounded number of descriptors for a bounded time, and health checks and clients
that send whole requests keep getting in. Behind a proxy exposed to the internet, let the
proxy bound slow clients as well (docs/design/deployment.md).

On plain sockets the protocol also offers the ASGI zero-copy send extension
(:mod:`cache_server.api.zero_copy`: object bodies go from file to socket with ``sendfile``)
and raw upload bodies (:mod:`cache_server.api.raw_body`: large bodies read from the socket
in pieces of 1 MiB, not as one ASGI message per 256 KiB read).
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from cache_server.api.raw_body import RAW_BODY, RawBodyReader
from cache_server.api.zero_copy import ZERO_COPY, ZeroCopySender

__all__ = ["DEFAULT_HEAD_TIMEOUT", "DEFAULT_MAX_HEADER_BYTES", "bounded_http_protocol"]

DEFAULT_MAX_HEADER_BYTES = 64 * 1024
DEFAULT_HEAD_TIMEOUT = 10.0
#: Descriptors kept free of connections: Redis, storage files, sendfile, logs.
FD_RESERVE = 128
_END_OF_HEAD = b"\r\n\r\n"
logger = logging.getLogger("cache_server")


class _Connections:
    """The open connections of one server process, and those still sending a head in the
    order they started it (the oldest is closed first when a new one needs room)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit  # 0: the soft open-files limit less FD_RESERVE
        self.open = 0
        self.in_head: dict[_BoundedHttpToolsProtocol, None] = {}

    def room(self) -> int:
        if self.limit:
            return self.limit
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        return max(16, soft - FD_RESERVE)


class _BoundedHttpToolsProtocol(HttpToolsProtocol):
    """One connection. ``max_header_bytes``, ``head_timeout`` and ``_registry`` are set
    on the subclass that :func:`bounded_http_protocol` makes."""

    max_header_bytes = DEFAULT_MAX_HEADER_BYTES
    head_timeout = DEFAULT_HEAD_TIMEOUT
    _registry = _Connections(0)

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        # Bytes of the current request's head seen so far; None while its body arrives.
        self._head_bytes: int | None = 0
        self._tail = b""  # the last bytes seen, for an end of head split across reads
        self._zero_copy: ZeroCopySender | None = None
        self._raw: RawBodyReader | None = None
        self._parsed = 0  # body bytes of the current request the parser has seen
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if ZeroCopySender.possible(transport):
            self._zero_copy = ZeroCopySender(transport)
            self._raw = RawBodyReader(transport, self.flow)
        connections = self._registry
        connections.open += 1
        if connections.open > connections.room():
            oldest = next(iter(connections.in_head), None)
            if oldest is not None:
                logger.warning("%d connections open: closed the oldest one still sending "
                               "its request head (%s)", connections.open, oldest.client)
                oldest.transport.close()
            else:  # every connection is busy with a request: this one waits its turn
                transport.close()
                return
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        connections = self._registry
        connections.open -= 1
        self._head_arrived()
        if self._zero_copy is not None:
            self._zero_copy.close()
        if self._raw is not None:
            self._raw.close()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        """A request head is due within ``head_timeout``."""
        if self.transport.is_closing():
            return
        self._head_arrived()  # one timer at a time
        self._registry.in_head[self] = None
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_too_slow)

    def _head_arrived(self) -> None:
        self._registry.in_head.pop(self, None)
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self in self._registry.in_head:
            del self._registry.in_head[self]
            self.transport.close()

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        if self._zero_copy is not None:
            extensions = cycle.scope.setdefault("extensions", {})
            extensions[ZERO_COPY] = {}
            extensions[RAW_BODY] = {"open": lambda: self._open_raw(cycle)}
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

    def _open_raw(self, cycle: Any) -> Any:
        if self._raw is None or cycle is not self.cycle:  # a pipelined request's turn
            return None
        return self._raw.open(cycle, lambda: self._parsed)

    def on_headers_complete(self) -> None:
        self._head_bytes, self._parsed = None, 0
        self._head_arrived()
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        # uvicorn appends every chunk to a bytearray and hands the app bytes() of it: two
        # copies of an upload on the event loop. A chunk that arrives with nothing else
        # waiting is kept as it is (bytes() of a bytes object is that object).
        self._parsed += len(body)
        cycle = self.cycle
        if (cycle is None or cycle.body or cycle.response_complete
                or self.parser.should_upgrade()):
            super().on_body(body)
            return
        cycle.body = body
        if len(body) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        cycle.message_event.set()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head_bytes, self._tail = 0, b""  # a pipelined request may follow
        self._await_head_when_idle()  # (a request answered before its body ended)

    def on_response_complete(self) -> None:
        super().on_response_complete()  # starts a pipelined request, if one is waiting
        self._await_head_when_idle()

    def _await_head_when_idle(self) -> None:
        """The next head is due once no request is in flight: ``self.cycle`` is the latest
        request's, so while it has not been answered, the connection is busy. Timed from
        the end of a request, a slow handler, a download read slowly, or a request sent
        before the previous response was marked complete was cut off mid-body."""
        if self.cycle is None or self.cycle.response_complete:
            self._await_head()

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


def bounded_http_protocol(max_header_bytes: int, head_timeout: float = DEFAULT_HEAD_TIMEOUT,
                          max_connections: int = 0) -> type[asyncio.Protocol]:
    """The protocol class to give ``uvicorn.Config(http=...)`` (one per server process:
    it counts that process's connections)."""
    return type("BoundedHttpToolsProtocol", (_BoundedHttpToolsProtocol,),
                {"max_header_bytes": max_header_bytes, "head_timeout": head_timeout,
                 "_registry": _Connections(max_connections)})
