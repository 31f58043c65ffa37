"""Checking an incoming body as it is pushed: count, hash, enforce the array size, verify."""

from __future__ import annotations

import numpy as np
import xxhash

from storage.base import Buffer
from storage.errors import BodySizeMismatch, DigestMismatch, InvalidBody
from storage.header import ObjectHeader

__all__ = ["BodyCheck"]


class BodyCheck:
    """Counts and hashes every byte of a body, piece by piece, as it goes to the writer.

    An array body longer than its dtype and shape allow raises :class:`BodySizeMismatch` from
    the piece that overflows, so a runaway upload is not written to the end. A bool body
    holding bytes other than 0 and 1 raises :class:`InvalidBody`: numpy never makes such
    arrays, and Zarr would normalise them, silently changing the bytes. :meth:`verify` checks
    length and digest once the body is complete. Not thread-safe; one per write.
    """

    def __init__(self, header: ObjectHeader, digest: str) -> None:
        self._expected_digest = digest
        self._expected_nbytes = header.expected_nbytes
        self._is_bool = header.is_array and header.dtype == "|b1"
        self._hasher = xxhash.xxh3_128(header.digest_prefix())
        self.nbytes = 0

    def feed(self, data: Buffer) -> memoryview:
        """Check and hash one piece; returns it as a flat byte view."""
        view = memoryview(data).cast("B")
        self.nbytes += view.nbytes
        if self._expected_nbytes is not None and self.nbytes > self._expected_nbytes:
            raise BodySizeMismatch(self._expected_nbytes, self._expected_nbytes, truncated=True)
        if self._is_bool and view.nbytes and np.frombuffer(view, dtype=np.uint8).max() > 1:
            raise InvalidBody("a bool array body may hold only the bytes 0 and 1")
        self._hasher.update(view)
        return view

    def verify(self) -> None:
        """Raise unless the whole body had the right length and digest."""
        if self._expected_nbytes is not None and self.nbytes != self._expected_nbytes:
            raise BodySizeMismatch(self._expected_nbytes, self.nbytes)
        actual = self._hasher.hexdigest()
        if actual != self._expected_digest:
            raise DigestMismatch(self._expected_digest, actual)
