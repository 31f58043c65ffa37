"""Objects staged by writers outside the server, committed by it (docs/design/data-plane.md,
"Direct writes").

A worker that sees a data directory writes an object's files into
``<backend root>/.staging/<id>/`` (:meth:`DirectoryStore.staging` names the place and the
layout) and asks the server to commit them. The server does not trust those files: the
commit first renames the staging directory under ``.tmp`` (out of the writer's path), then
accepts only the layout's files, each a regular file with one link (no symlink to a file of
the server's, no hard link to another object's chunk), reads every byte and verifies digest,
dtype and shape exactly as an upload's body, computes the chunk digests itself, writes its
own metadata (``zarr.json``, ``chunk_digests.json``, the sidecar) and publishes the
directory like any other write. Whatever fails, the staged files go; nothing is ever
visible before it is verified and durable. Staging directories of writers that died are
temporaries like ``.tmp``'s (``sweep_temporary``, ``gc``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from storage._atomic import new_temp_dir, remove_dir
from storage._body import FILE_PIECE_BYTES, BodyCheck, CheckedWriter
from storage.base import Buffer, PutResult, TaskReference
from storage.errors import InvalidBody, PayloadTooLarge, StagingNotFound
from storage.header import ObjectHeader, is_digest

__all__ = ["STAGING_DIR_NAME", "StagedFile", "StagedWriter", "check_files", "piece_buffer",
           "read_prefix", "read_staged"]

STAGING_DIR_NAME = ".staging"


class StagedFile:
    """One staged file opened for verification: a regular file with a single link, opened
    without following a symlink. ``size`` is its length; closed by :meth:`close`."""

    def __init__(self, path: Path) -> None:
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:
            raise InvalidBody(f"staged file {path.name} cannot be opened: {exc}") from None
        info = os.fstat(self.fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            os.close(self.fd)
            raise InvalidBody(f"staged file {path.name} is not a plain file of its own")
        self.path = path
        self.size = info.st_size

    def close(self) -> None:
        os.close(self.fd)


def check_files(directory: Path, expected: Iterable[str]) -> None:
    """Raise :class:`InvalidBody` unless ``directory`` holds exactly the files ``expected``
    (paths relative to it, ``/``-separated) in real directories: no symlink anywhere."""
    wanted = set(expected)
    found: set[str] = set()
    stack = [(directory, "")]
    while stack:
        path, prefix = stack.pop()
        with os.scandir(path) as entries:
            for entry in entries:
                name = prefix + entry.name
                if entry.is_symlink():
                    raise InvalidBody(f"staged {name} is a symbolic link")
                if entry.is_dir(follow_symlinks=False):
                    stack.append((Path(entry.path), name + "/"))
                elif entry.is_file(follow_symlinks=False) and name in wanted:
                    found.add(name)
                else:
                    raise InvalidBody(f"staged {name} is not part of the object's layout")
    if missing := sorted(wanted - found):
        raise InvalidBody(f"the staged object lacks {missing[0]}"
                          + (f" and {len(missing) - 1} more files" if len(missing) > 1 else ""))


def read_staged(file: StagedFile, start: int, size: int, buffer: memoryview,
                *consumers: Callable[[memoryview], Any]) -> None:
    """Feed bytes ``start`` to ``start + size`` of ``file`` to every consumer, in pieces
    read into ``buffer`` (reused: the consumers must not keep the pieces)."""
    if file.size < start + size:
        raise InvalidBody(f"staged file {file.path.name} has {file.size} bytes, the object "
                          f"needs {start + size}")
    position, end = start, start + size
    while position < end:
        n = os.preadv(file.fd, [buffer[:min(buffer.nbytes, end - position)]], position)
        if not n:
            raise InvalidBody(f"staged file {file.path.name} ended at {position}")
        for consume in consumers:
            consume(buffer[:n])
        position += n


def read_prefix(file: StagedFile, prefix: bytes) -> None:
    """Raise unless ``file`` starts with ``prefix`` (a blob's header)."""
    if prefix and os.pread(file.fd, len(prefix), 0) != prefix:
        raise InvalidBody(f"staged file {file.path.name} does not start with its header")


def piece_buffer() -> memoryview:
    """The reusable buffer one commit reads its staged files through."""
    return memoryview(bytearray(FILE_PIECE_BYTES))


class StagedWriter(CheckedWriter):
    """The writer :meth:`DirectoryStore.open_staged` returns; see the module docstring.

    ``store`` is the :class:`~storage._directory.DirectoryStore` the object goes to: its
    ``_adopt_staged`` checks and completes the payload, its ``_publish`` renames it into
    place."""

    def __init__(self, store: Any, staging_id: str, header: ObjectHeader, digest: str,
                 task: TaskReference, type_name: str | None, max_nbytes: int | None) -> None:
        super().__init__(store, header, digest, task, type_name)
        if not is_digest(staging_id):
            raise StagingNotFound(staging_id)
        self._staging_id = staging_id
        self._staged: Path | None = store.staging_root / staging_id
        self._temp: Path | None = None
        self._max_nbytes = max_nbytes

    def write(self, data: Buffer) -> None:
        raise InvalidBody("a staged object's body is its staged files")

    def commit(self) -> PutResult:
        store = self._store
        try:
            directory = self._take()
            if self._max_nbytes is not None:
                self._body = _Bounded(self._body, self._max_nbytes)
            store._adopt_staged(directory, self._header, self._body,
                                strong=self._task.signature is not None)
            self._body.verify()
            if store.object_path(self._digest).is_dir():  # stored already: add the task
                return PutResult(store.add_task(self._digest, self._task), created=False)
            return store._publish(directory, self._sidecar(), self._task)
        finally:
            self.abort()

    def _take(self) -> Path:
        """Move the staged directory under ``.tmp`` (out of the writer's path), once."""
        staged, self._staged = self._staged, None
        if staged is None:
            raise StagingNotFound(self._staging_id)
        self._temp = new_temp_dir(self._store.root, "commit")
        directory = self._temp / "object"
        try:
            os.rename(staged, directory)
        except FileNotFoundError:
            raise StagingNotFound(self._staging_id) from None
        if directory.is_symlink() or not directory.is_dir():
            raise InvalidBody("the staging place is not a directory")
        return directory

    def abort(self) -> None:
        if self._staged is not None:
            remove_dir(self._staged)
            self._staged = None
        if self._temp is not None:
            remove_dir(self._temp)
            self._temp = None


class _Bounded:
    """A :class:`BodyCheck` that refuses more than ``limit`` bytes in all."""

    def __init__(self, body: BodyCheck, limit: int) -> None:
        self._body = body
        self._limit = limit

    def feed(self, data: Buffer) -> memoryview:
        view = self._body.feed(data)
        if self._body.nbytes > self._limit:
            raise PayloadTooLarge(f"the staged object is larger than {self._limit} bytes")
        return view

    def verify(self) -> None:
        self._body.verify()

    @property
    def nbytes(self) -> int:
        return self._body.nbytes

