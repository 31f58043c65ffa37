"""Zero-copy bodies: file to socket with ``sendfile(2)``, for uvicorn's httptools protocol.

The ASGI "zero copy send" extension (``http.response.zerocopysend``: a file, an offset, a
count) is offered in the scope of every request on a plain socket; the app sends such
messages after ``http.response.start``, and their bytes go from the page cache to the
socket in the kernel: the server neither reads nor copies them (docs/design/data-plane.md,
"Zero-copy bodies"). uvloop has no ``loop.sendfile``, so the socket is written here directly, on the
event loop: ``os.sendfile`` on the non-blocking socket moves what fits in its buffer and
returns; when the buffer is full, the send waits for the socket to become writable (on a
duplicate of its descriptor: uvloop keeps the original for its own transport). No thread
waits on the network. A message may carry ``"timeout"`` (seconds, our addition to the
extension): a socket that takes no byte for that long raises ``TimeoutError`` (the
response is cut off and the connection closed by the caller's error).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["ZERO_COPY", "ZeroCopySender"]

#: The ASGI extension's name (asgiref: "Zero Copy Send").
ZERO_COPY = "http.response.zerocopysend"


class ZeroCopySender:
    """Sends zero-copy messages for one connection (``transport``) of a protocol, on the
    response cycle (``cycle``, uvicorn's) that the message belongs to. Close it when the
    connection is lost."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self._watched: int | None = None  # a duplicate of the socket, to wait on

    @staticmethod
    def possible(transport: asyncio.Transport) -> bool:
        """Whether ``transport`` is a plain socket (not TLS) whose descriptor we can use."""
        sock = transport.get_extra_info("socket")
        return (sock is not None and transport.get_extra_info("sslcontext") is None
                and hasattr(os, "sendfile"))

    def wrap(self, app: Callable[..., Awaitable[None]], cycle: Any
             ) -> Callable[..., Awaitable[None]]:
        """``app`` with zero-copy messages sent here and the rest through the cycle."""

        async def zero_copy_app(scope: Any, receive: Any, send: Any) -> None:
            async def send_or_copy(message: Any) -> None:
                if message["type"] == ZERO_COPY:
                    await self.send(cycle, message)
                else:
                    await send(message)

            await app(scope, receive, send_or_copy)

        return zero_copy_app

    async def send(self, cycle: Any, message: Any) -> None:
        """Send ``count`` bytes of ``file`` from ``offset`` as body bytes of the cycle's
        response (which must have a ``Content-Length``); ``more_body`` as for body
        messages. A file shorter than that raises ``EOFError``, a socket that takes nothing
        for ``timeout`` seconds ``TimeoutError`` (the response is cut off either way)."""
        if cycle.disconnected:
            return
        if not cycle.response_started or cycle.response_complete or cycle.chunked_encoding:
            raise RuntimeError("a zero-copy body needs a started response with Content-Length")
        file = message["file"]
        offset = int(message.get("offset", 0))
        count = message.get("count")
        count = os.fstat(file.fileno()).st_size - offset if count is None else int(count)
        timeout = message.get("timeout")
        if count > cycle.expected_content_length:
            raise RuntimeError("Response content longer than Content-Length")
        if count:
            if not await self._flushed():
                return  # the connection went away
            sock = self.transport.get_extra_info("socket").fileno()
            sent = 0
            while sent < count:
                try:
                    n = os.sendfile(sock, file.fileno(), offset + sent, count - sent)
                except BlockingIOError:
                    await self._writable(sock, timeout)
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    self.transport.close()
                    return
                if n == 0:
                    raise EOFError(f"{getattr(file, 'name', 'the file')} ended "
                                   f"{count - sent} bytes early")
                sent += n
            cycle.expected_content_length -= count
        if not message.get("more_body", False):
            await cycle.send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _flushed(self) -> bool:
        """Wait until the transport wrote what it buffered (the response head): the file's
        bytes must follow it. False if the connection is closing."""
        while self.transport.get_write_buffer_size():
            if self.transport.is_closing():
                return False
            await asyncio.sleep(0.001)
        return not self.transport.is_closing()

    async def _writable(self, sock: int, timeout: float | None) -> None:
        loop = asyncio.get_running_loop()
        if self._watched is None:
            self._watched = os.dup(sock)
        ready = loop.create_future()
        loop.add_writer(self._watched, lambda: ready.done() or ready.set_result(None))
        try:
            await asyncio.wait_for(ready, timeout)
        finally:
            loop.remove_writer(self._watched)

    def close(self) -> None:
        if self._watched is not None:
            os.close(self._watched)
            self._watched = None
