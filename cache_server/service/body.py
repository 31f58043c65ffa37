"""Upload bodies: streamed in ~1 MiB pieces, bounded, never held whole.

A 256 MiB body sent as one ``bytes`` object moves at ~0.1 GB/s, streamed in ~1 MiB pieces at
0.4-1.6 GB/s (docs/architecture.md, "Storage and transport facts").
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Iterator

from anyio import from_thread

__all__ = ["PIECE_BYTES", "UploadBody"]

PIECE_BYTES = 2**20


class UploadBody:
    """The chunks of one upload (as the connection delivers them), read in pieces of about
    ``PIECE_BYTES``, at most ``limit`` bytes in all.

    Exceeding ``limit`` raises ``too_large()`` from the read that crossed it, so the
    consumer (a storage write) fails and cleans up. Use either from the event loop
    (:meth:`read_piece`, :meth:`drain`) or from one worker thread (:meth:`pieces`), not both
    at once.
    """

    def __init__(
        self, chunks: AsyncIterable[bytes], limit: int, too_large: Callable[[], Exception]
    ) -> None:
        self._stream = chunks.__aiter__()
        self._limit = limit
        self._too_large = too_large
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
