"""Reading an incoming body: hash while consuming, enforce the array size, verify at the end."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import xxhash

from storage.base import Buffer
from storage.errors import BodySizeMismatch, DigestMismatch, InvalidBody
from storage.header import ObjectHeader

__all__ = ["BodyReader"]


class BodyReader:
    """Wraps the body's chunks: counts and hashes every byte handed to the writer.

    Iterating yields the chunks unchanged (as memoryviews). An array body longer than its
    dtype and shape allow raises :class:`BodySizeMismatch` as soon as it overflows, so a
    runaway upload is not written to the end. A bool body holding bytes other than 0 and 1
    raises :class:`InvalidBody`: numpy never makes such arrays, and Zarr would normalise them,
    silently changing the bytes. :meth:`verify` checks length and digest once the
    chunks are exhausted. Not thread-safe; one reader per put.
    """

    def __init__(self, header: ObjectHeader, chunks: Iterable[Buffer], digest: str) -> None:
        self._chunks = iter(chunks)
        self._expected_digest = digest
        self._expected_nbytes = header.expected_nbytes
        self._is_bool = header.is_array and header.dtype == "|b1"
        self._hasher = xxhash.xxh3_128(header.digest_prefix())
        self.nbytes = 0

    def __iter__(self) -> Iterator[memoryview]:
        for chunk in self._chunks:
            view = memoryview(chunk).cast("B")
            if not view.nbytes:
                continue
            self.nbytes += view.nbytes
            if self._expected_nbytes is not None and self.nbytes > self._expected_nbytes:
                raise BodySizeMismatch(self._expected_nbytes, self._expected_nbytes, truncated=True)
            if self._is_bool and np.frombuffer(view, dtype=np.uint8).max() > 1:
                raise InvalidBody("a bool array body may hold only the bytes 0 and 1")
            self._hasher.update(view)
            yield view

    def drain(self) -> None:
        """Consume (hash and count) the rest of the chunks without keeping them."""
        for _ in self:
            pass

    def verify(self) -> None:
        """Raise unless the whole body had the right length and digest."""
        if self._expected_nbytes is not None and self.nbytes != self._expected_nbytes:
            raise BodySizeMismatch(self._expected_nbytes, self.nbytes)
        actual = self._hasher.hexdigest()
        if actual != self._expected_digest:
            raise DigestMismatch(self._expected_digest, actual)
