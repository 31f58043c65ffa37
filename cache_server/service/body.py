"""Upload bodies: read on the event loop in ~1 MiB pieces, bounded in size and in time.

A 256 MiB body sent as one ``bytes`` object moves at ~0.1 GB/s, streamed in ~1 MiB pieces at
0.4-1.6 GB/s (BENCHMARKS.md, "Storage and transport facts"). Pieces are read on the
event loop and only then handed to a worker thread for the disk, so no thread ever waits on
a client (docs/design/server-and-index.md, "Bounds"); the next piece is read while the
previous one is written, so the network and the disk work at once.

A body comes either as the chunks the connection delivered (ASGI messages) or from a
:class:`Receiver` that receives into buffers given to it (a large body on a plain socket:
cache_server/api/raw_body.py): then two buffers of ``PIECE_BYTES`` per upload take turns
(one filled while the other is written; a storage writer keeps no reference to what it
was given once ``write`` returns), and a batch is received straight into its one buffer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Protocol

from anyio import CancelScope, fail_after, to_thread

from cache_server.service.errors import BodyTimeout

__all__ = ["PIECE_BYTES", "Receiver", "UploadBody"]

PIECE_BYTES = 2**20


class Receiver(Protocol):
    """A body received into buffers given to it."""

    async def recv_into(self, view: memoryview) -> int:
        """Receive at most ``len(view)`` bytes into ``view``: how many (0: the body ended)."""


class UploadBody:
    """The chunks of one upload (as the connection delivers them, or received into our own
    buffers), read in pieces of about ``PIECE_BYTES``, at most ``limit`` bytes in all, each
    read within ``timeout`` seconds.

    Exceeding ``limit`` raises ``too_large()`` from the read that crossed it; a client that
    sends nothing for ``timeout`` seconds gets :class:`BodyTimeout`. Either way the consumer
    (a storage write) fails and cleans up.
    """

    def __init__(self, chunks: AsyncIterable[bytes] | Receiver, limit: int,
                 too_large: Callable[[], Exception], timeout: float) -> None:
        if isinstance(chunks, AsyncIterable):
            self._stream: AsyncIterator[bytes] | None = chunks.__aiter__()
            self._receiver: Receiver | None = None
        else:
            self._stream, self._receiver = None, chunks
        self._limit = limit
        self._too_large = too_large
        self._timeout = timeout
        self._done = False
        self.nbytes = 0

    def _count(self, n: int) -> None:
        self.nbytes += n
        if self.nbytes > self._limit:
            self._done = True
            raise self._too_large()

    async def _next_chunk(self) -> bytes | None:
        assert self._stream is not None
        try:
            with fail_after(self._timeout):
                return await self._stream.__anext__()
        except StopAsyncIteration:
            return None
        except TimeoutError:
            raise BodyTimeout(self._timeout) from None

    async def _recv_into(self, view: memoryview) -> int:
        """Fill ``view`` from the receiver as far as the body goes: the bytes received."""
        assert self._receiver is not None
        filled = 0
        while filled < len(view) and not self._done:
            try:
                with fail_after(self._timeout):
                    n = await self._receiver.recv_into(view[filled:])
            except TimeoutError:
                raise BodyTimeout(self._timeout) from None
            if not n:
                self._done = True
                break
            self._count(n)
            filled += n
        return filled

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
            self._count(len(chunk))
            if chunk:
                chunks.append(chunk)
                size += len(chunk)
        return chunks

    async def _pieces(self) -> AsyncIterator[list[memoryview | bytes]]:
        """The body in pieces; a received piece's buffer is filled again two pieces later
        (the consumer is done with it by then: :meth:`write_to`)."""
        if self._receiver is None:
            while chunks := await self._read_chunks():
                yield chunks
            return
        buffers = [memoryview(bytearray(PIECE_BYTES)) for _ in range(2)]
        turn = 0
        while filled := await self._recv_into(buffers[turn]):
            yield [buffers[turn][:filled]]
            turn ^= 1

    async def read_into(self, data: bytearray) -> int:
        """Read the whole body into ``data`` from its start, each byte copied once (a
        receiver's straight into ``data``); ``data`` grows if the body is longer (within
        the limit). Returns the body's length."""
        filled = 0
        if self._receiver is not None:
            filled = await self._recv_into(memoryview(data))
            while not self._done:  # longer than ``data``: the rest goes at its end
                more = bytearray(PIECE_BYTES)
                n = await self._recv_into(memoryview(more))
                data[filled:] = memoryview(more)[:n]
                filled += n
            return filled
        while chunks := await self._read_chunks():
            for chunk in chunks:
                end = filled + len(chunk)
                if end > len(data):
                    data[filled:] = chunk
                else:
                    data[filled:end] = chunk
                filled = end
        return filled

    async def write_to(self, write: Callable[[memoryview | bytes], object]) -> None:
        """Hand every chunk to ``write`` in a worker thread, a piece's chunks in one
        thread call, one call at a time, reading the next piece meanwhile (at most two
        pieces held). Returns once the last call returned; the first error (of a read or
        a write) propagates, and no call is still running when this returns or raises."""
        def write_all(chunks: list[memoryview | bytes]) -> None:
            for chunk in chunks:
                write(chunk)

        pending: asyncio.Future | None = None
        try:
            async for chunks in self._pieces():
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
        scratch = memoryview(bytearray(PIECE_BYTES)) if self._receiver is not None else None
        while not self._done:
            if scratch is not None:
                await self._recv_into(scratch)
            else:
                await self._read_chunks()
