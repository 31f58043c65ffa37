"""Downloads: a ``GET`` whose body is read into the value's own buffer while it is hashed.

Plain ``http://`` servers without a proxy are read through ``http.client`` on a kept-alive
connection per thread and server: its ``readinto`` takes the body from the socket straight
into the value's buffer, where httpx reads 64 KiB at a time through h11 (four copies and
~16k Python steps per GiB: a 1 GiB load cost 2.7-3.4 CPU-seconds in the client,
BENCHMARKS.md, measure 5). Others go through the pool's httpx client.
"""

from __future__ import annotations

import http.client
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import numpy as np

from ..core.errors import CacheProtocolError
from ..wire import body_hash, codec
from . import light
from .pool import Pool

__all__ = ["READ_BYTES", "Downloads", "read_body"]

#: Bytes asked of the socket per ``readinto`` of a download (then hashed while in cache).
READ_BYTES = 1 << 20

ReadInto = Callable[[memoryview], int]


class Downloads:
    """Each thread's kept-alive download connection per server. Thread safe (each thread
    has its own connections)."""

    def __init__(self) -> None:
        self._local = threading.local()

    @contextmanager
    def open(self, pool: Pool, base: str, path: str, headers: dict[str, str] | None = None
             ) -> Iterator[tuple[httpx.Response, ReadInto]]:
        """``GET base + path``: the response (status and headers; a body other than a
        200's already read) and a ``readinto`` that fills the caller's buffer from the
        body. ``headers``: extra request headers (the pool adds the token)."""
        if not light.plain_http(base):
            with pool.http.stream("GET", base + path, headers=headers) as response:
                yield response, _readinto_from(response.iter_raw())
            return
        conns: dict[str, http.client.HTTPConnection] = self._local.__dict__.setdefault(
            "conns", {})
        conn = conns.pop(base, None)
        sent = {**pool.headers(), **(headers or {})}
        try:
            raw = _send_get(conn, base, path, sent) if conn else None
        except (http.client.HTTPException, OSError):
            conn.close()  # the server closed the kept-alive connection meanwhile
            raw = None
        if raw is None:
            conn = light.connect(base)
            raw = _send_get(conn, base, path, sent)
        assert conn is not None
        status = raw.status
        response = httpx.Response(status, headers=raw.getheaders(),
                                  request=httpx.Request("GET", base + path),
                                  content=None if status == 200 else raw.read())
        try:
            yield response, raw.readinto
        finally:
            if raw.isclosed() and not raw.will_close:  # the body was read to its end
                conns[base] = conn
            else:
                conn.close()

    def close(self) -> None:
        """Close this thread's connections (and forget every thread's)."""
        for conn in getattr(self._local, "conns", {}).values():
            conn.close()
        self._local = threading.local()


def read_body(readinto: ReadInto, length: str | None, kind: str, dtype: str, shape: str,
              *, strong: bool = False) -> tuple[Any, str, str | None]:
    """Read a streamed body into one preallocated buffer while hashing it (once);
    (buffer, digest, BLAKE3 body digest or None). An array is then a view of that buffer:
    no further copy. ``length``: the ``Content-Length`` (the body's framing: no byte past
    it is read). ``strong``: compute the body digest a signature binds in the same pass
    (each piece hashed right after it arrived, while it is in the cache)."""
    hasher = codec.content_hasher(kind, dtype, shape)
    if length is None:
        parts = bytearray()
        piece = memoryview(bytearray(READ_BYTES))
        while n := readinto(piece):
            parts += piece[:n]
            hasher.update(piece[:n])
        return parts, hasher.hexdigest(), None
    size = int(length)
    if kind == "ndarray" and size != codec.array_nbytes(dtype, shape):
        # Checked before allocating: the headers alone never make us reserve memory.
        raise CacheProtocolError(f"Content-Length {size} does not match dtype {dtype} "
                                 f"and shape {shape}")
    # One preallocated array (not zero-filled) that the value will be a view of.
    view = memoryview(np.empty(size, dtype=np.uint8))
    strong_hasher = body_hash.BodyRootHasher(kind, dtype, shape, size) if strong else None
    pos = 0
    while pos < size:
        n = readinto(view[pos:pos + READ_BYTES])
        if not n:
            raise CacheProtocolError(f"body ended after {pos} of {size} bytes")
        hasher.update(view[pos:pos + n])
        if strong_hasher is not None:
            strong_hasher.update(view[pos:pos + n])
        pos += n
    root = strong_hasher.hexdigest() if strong_hasher is not None else None
    return view, hasher.hexdigest(), root


def _readinto_from(chunks: Iterator[bytes]) -> ReadInto:
    """A ``readinto`` over an httpx body's chunks, taken as the connection delivers them
    (``iter_raw()`` without a size: with one, httpx gathers them in a ``BytesIO`` first)."""
    rest = memoryview(b"")

    def readinto(view: memoryview) -> int:
        nonlocal rest
        if not rest:
            rest = memoryview(next(chunks, b""))
        n = min(rest.nbytes, view.nbytes)
        view[:n] = rest[:n]
        rest = rest[n:]
        return n

    return readinto


def _send_get(conn: http.client.HTTPConnection, base: str, path: str,
              headers: dict[str, str]) -> http.client.HTTPResponse:
    prefix = urllib.parse.urlsplit(base).path.rstrip("/")
    conn.request("GET", prefix + path, headers=headers)
    return conn.getresponse()
