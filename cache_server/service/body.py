"""Upload bodies: read on the event loop in ~1 MiB pieces, bounded in size and in time.

A 256 MiB body sent as one ``bytes`` object moves at ~0.1 GB/s, streamed in ~1 MiB pieces at
0.4-1.6 GB/s (BENCHMARKS.md, "Storage and transport facts"). Pieces are read on the
event loop and only then handed to a worker thread for the disk, so no thread ever waits on
a client (docs/design/server-and-index.md, "Bounds"); the next piece is read while the
previous one is written, so the network and the disk work at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Callable

from anyio import CancelScope, fail_after, to_thread

from cache_server.service.errors import BodyTimeout

__all__ = ["PIECE_BYTES", "UploadBody"]

PIECE_BYTES = 2**20


class UploadBody:
    """The chunks of one upload (as the connection delivers them), read in pieces of about
    ``PIECE_BYTES``, at most ``limit`` bytes in all, each read within ``timeout`` seconds.

    Exceeding ``limit`` raises ``too_large()`` from the read that crossed it; a client that
    sends nothing for ``timeout`` seconds gets :class:`BodyTimeout`. Either way the consumer
    (a storage write) fails and cleans up.
    """

    def __init__(self, chunks: AsyncIterable[bytes], limit: int,
                 too_large: Callable[[], Exception], timeout: float) -> None:
        self._stream = chunks.__aiter__()
        self._limit = limit
        self._too_large = too_large
        self._timeout = timeout
        self._done = False
        self.nbytes = 0

    async def _next_chunk(self) -> bytes | None:
        try:
            with fail_after(self._timeout):
                return await self._stream.__anext__()
        except StopAsyncIteration:
            return None
        except TimeoutError:
            raise BodyTimeout(self._timeout) from None

    async def _read_chunks(self) -> list[bytes]:
        """The chunks of the next piece, as the connection delivered them (not copied into
        one buffer: a copy of every byte costs the event loop ~0.1 s per GiB); empty at
        the end of the body."""
        chunks: list[bytes] = []
        size = 0
        while size < PIECE_BYTES and not self._done:
            chunk = await self._next_chunk()
            if chunk is None:
                self._done = True
                break
            self.nbytes += len(chunk)
            if self.nbytes > self._limit:
                self._done = True
                raise self._too_large()
            if chunk:
                chunks.append(chunk)
                size += len(chunk)
        return chunks

    async def read_into(self, data: bytearray) -> int:
        """Read the whole body into ``data`` from its start, each chunk copied once as the
        connection delivered it (never joined into a piece first); ``data`` grows if the
        body is longer (within the limit). Returns the body's length."""
        filled = 0
        while chunks := await self._read_chunks():
            for chunk in chunks:
                end = filled + len(chunk)
                if end > len(data):
                    data[filled:] = chunk
                else:
                    data[filled:end] = chunk
                filled = end
        return filled

    async def write_to(self, write: Callable[[bytes], object]) -> None:
        """Hand every chunk to ``write`` in a worker thread, a piece's chunks in one
        thread call, one call at a time, reading the next piece meanwhile (at most two
        pieces held). Returns once the last call returned; the first error (of a read or
        a write) propagates, and no call is still running when this returns or raises."""
        def write_all(chunks: list[bytes]) -> None:
            for chunk in chunks:
                write(chunk)

        pending: asyncio.Future | None = None
        try:
            while chunks := await self._read_chunks():
                if pending is not None:
                    await pending
                pending = asyncio.ensure_future(to_thread.run_sync(write_all, chunks))
            if pending is not None:
                await pending
        finally:
            if pending is not None:
                if not pending.done():  # the caller cleans up after this: wait for the call
                    with CancelScope(shield=True):
                        await asyncio.wait([pending])
                if not pending.cancelled():
                    pending.exception()  # seen: the error that ended the loop propagates

    async def drain(self) -> None:
        """Read and discard the rest of the body (still enforcing the limits)."""
        while await self._read_chunks():
            pass
