"""Raw upload bodies: read from the socket in large pieces, not one ASGI message per read.

uvicorn hands a body to the app as one ``http.request`` message per socket read of 256 KiB:
a parser callback, an event, a task wake-up, a message and a timeout scope each, ~0.9 s of
the event loop per GiB uploaded, on the core the storage writer and the client need too.
An upload route asks for a large body here instead (the ``result-cache.raw-body``
extension, offered on plain sockets): the bytes the parser has already buffered, then
the socket's, received by ``recv_into`` from a duplicate of it straight into the buffers
the upload reads into (cache_server/service/body.py), still on the event loop (a reader
is added while the socket has nothing to read, as the zero-copy sender waits to write): no
thread waits on a client, nothing is allocated by what a header declares, and the upload's
size and time bounds apply as before. The parser never sees those bytes, so the
connection closes after the response (``connection: close``, added by uvicorn).
docs/design/data-plane.md, "Raw upload bodies".
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterable, Callable
from typing import Any

from starlette.requests import ClientDisconnect, Request

__all__ = ["RAW_BODY", "RAW_MIN_BYTES", "RawBody", "RawBodyReader", "upload_chunks"]

#: The ASGI extension's name (ours): ``{"open": () -> RawBody | None}``.
RAW_BODY = "result-cache.raw-body"
#: Bodies with fewer bytes left to arrive go through the ASGI messages (and keep-alive).
RAW_MIN_BYTES = 2**20


def upload_chunks(request: Request) -> AsyncIterable[bytes] | RawBody:
    """An upload route's body: raw where the connection offers it and the body is large,
    else Starlette's stream of the ASGI messages."""
    raw = request.scope.get("extensions", {}).get(RAW_BODY)
    body = raw["open"]() if raw is not None else None
    return request.stream() if body is None else body


class RawBody:
    """The rest of one request's body (a :class:`cache_server.service.body.Receiver`):
    taken from the connection at the first read (a route that answers before reading
    leaves the connection as it was), then the bytes the parser buffered, then the
    socket's."""

    def __init__(self, reader: RawBodyReader, cycle: Any, parsed: Callable[[], int],
                 length: int) -> None:
        self._reader = reader
        self._cycle = cycle
        self._parsed = parsed  # body bytes the parser has seen (it goes on until we start)
        self._length = length
        self._sock: socket.socket | None = None
        self._buffered = memoryview(b"")
        self.left = 0  # bytes still to come from the socket

    def _start(self) -> socket.socket:
        cycle = self._cycle
        if cycle.disconnected:
            raise ClientDisconnect()
        self._reader.flow.pause_reading()  # the parser gets no more of this connection
        buffered, cycle.body = cycle.body, bytearray()
        cycle.keep_alive = False
        self._buffered = memoryview(bytes(buffered))
        self.left = self._length - self._parsed()
        self._sock = self._reader.socket(self)
        return self._sock

    async def recv_into(self, view: memoryview) -> int:
        sock = self._sock or self._start()
        if self._buffered:
            n = min(len(view), len(self._buffered))
            view[:n] = self._buffered[:n]
            self._buffered = self._buffered[n:]
            return n
        if not self.left:
            return 0
        view = view[:self.left]
        while True:
            try:
                n = sock.recv_into(view)
            except BlockingIOError:
                await _readable(sock)
                continue
            except OSError as exc:  # reset by the peer, or closed under us
                raise ClientDisconnect() from exc
            if not n:
                raise ClientDisconnect()
            self.left -= n
            return n


class RawBodyReader:
    """The raw bodies of one connection (``transport`` and uvicorn's ``flow`` control).
    Close it when the connection is lost."""

    def __init__(self, transport: asyncio.Transport, flow: Any) -> None:
        self.transport = transport
        self.flow = flow
        self._sock: socket.socket | None = None
        self._body: RawBody | None = None  # the body being read, if any

    def open(self, cycle: Any, parsed: Callable[[], int]) -> RawBody | None:
        """The rest of ``cycle``'s request body (``parsed()``: its bytes the parser has
        seen, those still buffered in ``cycle.body`` included), or None when it should
        come through the ASGI messages: not a ``Content-Length`` body, little of it left,
        part of it already handed to the app, or the connection going away."""
        length = _content_length(cycle.scope["headers"])
        seen = parsed()
        if (length is None or not cycle.more_body or cycle.disconnected
                or cycle.waiting_for_100_continue or self.transport.is_closing()
                or seen != len(cycle.body) or length - seen < RAW_MIN_BYTES):
            return None
        return RawBody(self, cycle, parsed, length)

    def socket(self, body: RawBody) -> socket.socket:
        """The duplicate of the connection's socket that ``body`` reads."""
        self._body = body
        if self._sock is None:
            self._sock = socket.socket(fileno=os.dup(self.transport.get_extra_info(
                "socket").fileno()))
            self._sock.setblocking(False)
        return self._sock

    def close(self) -> None:
        """Once uvicorn closed its side: a body answered before it was read whole (a
        refusal mid-way) is read on and dropped for a bounded time before the socket
        closes, so that the client reads the answer instead of a reset."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        if self._body is None or not self._body.left or len(_lingering) >= MAX_LINGERING:
            sock.close()
            return
        try:
            sock.shutdown(socket.SHUT_WR)  # after the answer uvicorn wrote
        except OSError:
            sock.close()
            return
        task = asyncio.ensure_future(_linger(sock, self._body.left))
        _lingering.add(task)  # held here until done: the loop keeps only weak references
        task.add_done_callback(_lingering.discard)


#: Sockets read on and dropped after their answer (lingering closes) at once, per process,
#: and how long each may take: beyond either, a socket is closed at once.
MAX_LINGERING = 64
LINGER_SECONDS = 2.0
_lingering: set[asyncio.Future] = set()


async def _linger(sock: socket.socket, left: int) -> None:
    """Read and drop what the client still sends of its body, up to ``left`` bytes, its
    end, an error or ``LINGER_SECONDS``; then close."""
    scratch = memoryview(bytearray(2**16))
    try:
        async with asyncio.timeout(LINGER_SECONDS):
            while left > 0:
                try:
                    n = sock.recv_into(scratch)
                except BlockingIOError:
                    await _readable(sock)
                    continue
                if not n:
                    break
                left -= n
    except (TimeoutError, OSError):
        pass
    finally:
        sock.close()


async def _readable(sock: socket.socket) -> None:
    """Wait until ``sock`` has bytes (or its end) to read; cancellable (the upload's body
    timeout)."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_reader(sock, lambda: ready.done() or ready.set_result(None))
    try:
        await ready
    finally:
        loop.remove_reader(sock)


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The request's ``Content-Length`` when it is its only framing, else None."""
    length = None
    for name, value in headers:
        name = name.lower()
        if name == b"transfer-encoding":
            return None
        if name == b"content-length":
            if length is not None or not value.isdigit():
                return None
            length = int(value)
    return length
