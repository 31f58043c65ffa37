"""Object bodies on the wire: streamed in and out in ~1 MiB pieces, never held twice.

A 256 MiB body sent as one ``bytes`` object moves at ~0.1 GB/s, streamed in ~1 MiB pieces at
0.4-1.6 GB/s (DESIGN.md section 10).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

from anyio import from_thread
from starlette.requests import Request

from cache_server.errors import BodyTooLarge

__all__ = ["PIECE_BYTES", "RequestBody", "iter_slices"]

PIECE_BYTES = 2**20


class RequestBody:
    """A request body read in pieces of about ``PIECE_BYTES``, at most ``limit`` bytes in all.

    Exceeding ``limit`` raises ``too_large()`` (default :class:`BodyTooLarge`) from the read
    that crossed it, so the consumer (a storage write) fails and cleans up. Use either from
    the event loop (:meth:`read_piece`, :meth:`drain`) or from one worker thread
    (:meth:`pieces`), not both at once.
    """

    def __init__(
        self, request: Request, limit: int, too_large: Callable[[], Exception] | None = None
    ) -> None:
        self._stream = request.stream().__aiter__()
        self._limit = limit
        self._too_large = too_large or (lambda: BodyTooLarge(limit))
        self._done = False
        self.nbytes = 0

    async def read_piece(self) -> bytes | bytearray | None:
        """The next piece, or None at the end of the body."""
        if self._done:
            return None
        buffer = bytearray()
        while len(buffer) < PIECE_BYTES:
            try:
                chunk = await self._stream.__anext__()
            except StopAsyncIteration:
                self._done = True
                break
            self.nbytes += len(chunk)
            if self.nbytes > self._limit:
                self._done = True
                raise self._too_large()
            if not buffer and len(chunk) >= PIECE_BYTES:
                return chunk  # already large: no copy
            buffer += chunk
        return buffer or None

    async def drain(self) -> None:
        """Read and discard the rest of the body (still enforcing the limit)."""
        while await self.read_piece() is not None:
            pass

    def pieces(self) -> Iterator[bytes | bytearray]:
        """Pieces for a worker thread started with ``anyio.to_thread``: each one is read on
        the event loop while the thread waits."""
        while (piece := from_thread.run(self.read_piece)) is not None:
            yield piece


async def iter_slices(body: memoryview, size: int = PIECE_BYTES) -> AsyncIterator[memoryview]:
    """Zero-copy slices of an in-memory body, for a ``StreamingResponse``."""
    for start in range(0, body.nbytes, size):
        yield body[start : start + size]
