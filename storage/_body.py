"""Checking a body on its way in (:class:`BodyCheck`: count, hash, enforce the array size,
verify) and on its way out (:class:`CheckedReader`), for every backend."""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np
import xxhash

from storage.base import Buffer, ObjectReader, ObjectWriter, Sidecar, TaskReference
from storage.errors import (
    BodySizeMismatch,
    CorruptObject,
    DigestMismatch,
    InvalidBody,
    ObjectNotFound,
)
from storage.header import ObjectHeader

__all__ = ["FILE_PIECE_BYTES", "BodyCheck", "CheckedReader", "CheckedWriter", "Pieces",
           "file_pieces"]

#: Pieces in which payload files are read: large enough for the disk, small enough to hold.
FILE_PIECE_BYTES = 4 * 2**20


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


@dataclass
class Pieces:
    """A payload read back: ``pieces`` of at most ``piece_bytes``; ``verified`` when the
    backend checks each piece against a per-chunk digest itself."""

    pieces: Generator[memoryview, None, None]
    piece_bytes: int
    verified: bool = False


def file_pieces(file: BinaryIO, skip: bytes = b"") -> Pieces:
    """An open payload file in pieces of ``FILE_PIECE_BYTES`` (closed at the end), after
    checking that it starts with ``skip`` (which is not returned)."""

    def pieces() -> Generator[memoryview, None, None]:
        with file:
            if skip and file.read(len(skip)) != skip:
                raise CorruptObject(f"{getattr(file, 'name', None) or getattr(file, 'path', '')} "
                                    "does not start with its header")
            while piece := file.read(FILE_PIECE_BYTES):
                yield memoryview(piece)

    return Pieces(pieces(), FILE_PIECE_BYTES)


class CheckedReader(ObjectReader):
    """Counts (and, unless the backend verifies each piece, hashes) what it hands out."""

    def __init__(self, sidecar: Sidecar, payload: Pieces) -> None:
        self.sidecar = sidecar
        self.piece_bytes = min(payload.piece_bytes, sidecar.nbytes)
        self._pieces = payload.pieces
        self._hasher = None if payload.verified else xxhash.xxh3_128(
            sidecar.header.digest_prefix())
        self._nbytes = 0
        self._done = False

    def read(self) -> memoryview | None:
        if self._done:
            return None
        try:
            piece = next(self._pieces, None)
        except FileNotFoundError as exc:
            raise ObjectNotFound(self.sidecar.digest) from exc
        if piece is None:
            self._finish()
            return None
        self._nbytes += piece.nbytes
        if self._nbytes > self.sidecar.nbytes:
            raise CorruptObject(f"object {self.sidecar.digest} is longer than its sidecar says")
        if self._hasher is not None:
            self._hasher.update(piece)
        if self._nbytes == self.sidecar.nbytes:
            self._finish()  # before the last piece leaves
        return piece

    def _finish(self) -> None:
        self._done = True
        self.close()
        digest = self.sidecar.digest
        if self._nbytes != self.sidecar.nbytes:
            raise CorruptObject(f"object {digest} ended after {self._nbytes} of "
                                f"{self.sidecar.nbytes} bytes")
        if self._hasher is not None and (actual := self._hasher.hexdigest()) != digest:
            raise DigestMismatch(digest, actual)

    def close(self) -> None:
        self._pieces.close()


class CheckedWriter(ObjectWriter):
    """What every backend's writer shares: the object it writes, the running
    :class:`BodyCheck` of its body, and the sidecar a verified body gets."""

    def __init__(self, store: Any, header: ObjectHeader, digest: str, task: TaskReference,
                 type_name: str | None) -> None:
        self._store = store
        self._header = header
        self._digest = digest
        self._task = task
        self._type_name = type_name
        self._body = BodyCheck(header, digest)

    def _sidecar(self) -> Sidecar:
        """The sidecar of the object just verified (call after ``self._body.verify()``)."""
        task = self._task
        return Sidecar(
            digest=self._digest,
            header=self._header,
            storage=self._store.name,
            nbytes=self._body.nbytes,
            type=self._type_name,
            created=task.created or time.time(),
            tasks={task.task_hash: task},
        )
