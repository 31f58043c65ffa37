"""The signed body digest: BLAKE3 over an object's exact bytes (docs/protocol.md, "Signed
results").

The content digest (xxh3_128) names an object and catches accidents, but it is not a
cryptographic hash: anyone can build a second body with the same xxh3 digest. A signature
therefore binds the body through this digest instead, which nobody can match with other
bytes.

The body is cut into *pieces*, and the digest is BLAKE3 over the BLAKE3 of each piece, so a
reader of one piece (``open_cached`` reading one Zarr chunk) can verify it alone against a
list of piece digests whose root the signature binds. An array's pieces are the chunks the
server's Zarr layout cuts it into (:func:`chunk_shape`, the same rule as
``storage/_zarr.py``, cross-checked by tests/test_protocol.py); any other body is one piece.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence

import blake3
import numpy as np

__all__ = ["CHUNK_TARGET_BYTES", "BodyRootHasher", "body_root", "chunk_shape", "piece_digest",
           "piece_sizes", "root_of"]

#: The server's Zarr chunk size target (storage/_zarr.py ``CHUNK_TARGET_BYTES``).
CHUNK_TARGET_BYTES = 16 * 2**20
_ROOT_PREFIX = b"dask-result-cache body v2\n"


def chunk_shape(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The largest C-order contiguous chunk of at most ``CHUNK_TARGET_BYTES`` (at least one
    item): the trailing axes whole, one axis split, the leading axes 1."""
    chunks = [max(n, 1) for n in shape]
    inner = itemsize
    for axis in range(len(shape) - 1, -1, -1):
        if inner * chunks[axis] <= CHUNK_TARGET_BYTES:
            inner *= chunks[axis]
            continue
        chunks[axis] = max(1, CHUNK_TARGET_BYTES // inner)
        for leading in range(axis):
            chunks[leading] = 1
        break
    return tuple(chunks)


def piece_sizes(kind: str, dtype: str, shape: str, nbytes: int) -> Iterator[int]:
    """The byte sizes of a body's pieces, in order (they add up to ``nbytes``)."""
    if kind != "ndarray" or nbytes == 0:
        yield nbytes
        return
    dims = tuple(int(n) for n in json.loads(shape))
    itemsize = np.dtype(dtype).itemsize
    chunks = chunk_shape(dims, itemsize)
    # The split axis is the last one cut; those before it are cut into single rows.
    split = next((a for a in range(len(dims) - 1, -1, -1) if chunks[a] < dims[a]), None)
    if split is None:
        yield nbytes
        return
    inner = itemsize * math.prod(dims[split + 1:])
    full, rest = divmod(dims[split], chunks[split])
    for _ in range(math.prod(dims[:split])):  # each row of the leading axes, in C order
        for _ in range(full):
            yield chunks[split] * inner
        if rest:
            yield rest * inner


def piece_digest(piece: memoryview | bytes) -> bytes:
    """BLAKE3 (32 bytes) of one piece."""
    return blake3.blake3(piece).digest()


def root_of(piece_digests: Sequence[bytes]) -> str:
    """The body digest (64 hex) over its pieces' digests, in order."""
    return blake3.blake3(_ROOT_PREFIX + b"".join(piece_digests)).hexdigest()


def body_root(kind: str, dtype: str, shape: str, body: memoryview | bytes) -> str:
    """The body digest of a whole body (its metadata as on the wire)."""
    view = memoryview(body)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    digests, start = [], 0
    for size in piece_sizes(kind, dtype, shape, view.nbytes):
        digests.append(piece_digest(view[start:start + size]))
        start += size
    if start != view.nbytes:
        raise ValueError(f"a body of {view.nbytes} bytes is not a {dtype} array of {shape}")
    return root_of(digests)


class BodyRootHasher:
    """:func:`body_root` fed piece by piece as the bytes arrive (a download hashing while
    it reads): ``update`` with consecutive parts of the body, then :meth:`hexdigest`."""

    def __init__(self, kind: str, dtype: str, shape: str, nbytes: int) -> None:
        self._sizes = piece_sizes(kind, dtype, shape, nbytes)
        self._hasher = blake3.blake3()
        self._digests: list[bytes] = []
        self._left = next(self._sizes)
        if not self._left:  # an empty body is one empty piece
            self._digests.append(self._hasher.digest())

    def update(self, data: memoryview | bytes) -> None:
        view = memoryview(data).cast("B")
        while view.nbytes:
            if not self._left:
                raise ValueError("more bytes than the body's pieces hold")
            take = min(self._left, view.nbytes)
            self._hasher.update(view[:take])
            self._left -= take
            view = view[take:]
            if not self._left:
                self._digests.append(self._hasher.digest())
                self._hasher = blake3.blake3()
                self._left = next(self._sizes, 0)

    def hexdigest(self) -> str:
        """The body digest; ``ValueError`` if the body is not complete."""
        if self._left or next(self._sizes, None) is not None:
            raise ValueError("the body is not complete")
        return root_of(self._digests)
