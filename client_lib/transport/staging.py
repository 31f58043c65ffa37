"""Direct writes: a worker that sees the server's storage with write access (the same host,
or the cache volume mounted read-write) writes a large object's files into the storage's
staging area and asks the server to commit them, instead of uploading the body
(docs/design/data-plane.md, "Direct writes"; docs/protocol.md, "Direct writes").

``POST /v1/staging`` names the place (a ``file://`` directory this process must create)
and the layout; the files are written from the value's own buffer (for a Zarr array one
file per chunk, the raw bytes of its slab, by a few threads), each file's writeback
started in the background as soon as it is written (``sync_file_range``, no journal
commit), and the commit is sent without waiting for it: the disk writes the files back
while the server reads and verifies every byte (from the page cache), fsyncs (finding them
clean or in flight) and publishes. Nothing here is trusted by
the server, and nothing the server says is trusted here beyond where to write.

Any problem (a server without the route, a place this process cannot see or write, a commit
refused for the files) is :class:`DirectWriteFailed`: the caller uploads over HTTP. A place
that cannot be written marks the client (:attr:`Stores._staging_unseen`): later stores go
straight to HTTP.
"""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from ..core.config import setting
from ..wire import codec, headers
from ..wire.bounds import MAX_BATCH_OBJECT_BYTES
from .direct import local_path, slab_plan

__all__ = ["DIRECT_WRITE_MIN_BYTES", "DirectWriteFailed", "Staged", "allowed",
           "commit_headers", "direct_write_mode", "stage_files"]

#: Values this large are written directly; smaller ones go in a batch or one PUT (one
#: request, where a direct write costs two calls and its staging files).
DIRECT_WRITE_MIN_BYTES = MAX_BATCH_OBJECT_BYTES + 1
_WRITE_THREADS = 4


class DirectWriteFailed(Exception):
    """The object could not be staged and committed; upload it over HTTP.
    ``unreachable``: this process cannot write the server's storage at all."""

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


def direct_write_mode() -> str:
    """Config ``result-cache.direct-write``: ``"auto"`` (write large objects into the
    server's storage when this process can) or ``"never"``."""
    mode = setting("direct-write")
    if mode not in ("auto", "never"):
        raise ValueError(f"result-cache.direct-write must be 'auto' or 'never', not {mode!r}")
    return mode


def allowed(nbytes: int) -> bool:
    """Whether a value of ``nbytes`` may be written directly (a bad setting: no, reported
    by ``cached_compute`` in the user's process, never by a worker's store)."""
    try:
        return nbytes >= DIRECT_WRITE_MIN_BYTES and direct_write_mode() == "auto"
    except ValueError:
        return False


class Staged:
    """The files of one staged object: their ``directory`` and the background writebacks
    started for them (:meth:`settle` waits for those, then removes what is left)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.syncs: list[Future[None]] = []

    def settle(self) -> None:
        """Wait for the writebacks (their errors do not matter: the server fsyncs what it
        commits) and remove the directory if it is still there (not committed)."""
        wait(self.syncs)
        shutil.rmtree(self.directory, ignore_errors=True)


def stage_files(place: dict[str, Any], enc: codec.Encoded) -> Staged:
    """Write ``enc``'s files where ``place`` (the answer of ``POST /v1/staging``) says.
    Raises :class:`DirectWriteFailed` (``unreachable`` when the storage cannot be seen or
    written here); a partial directory is removed. Call :meth:`Staged.settle` once the
    commit was answered."""
    location = place.get("location")
    parent = local_path(str(location).rsplit("/", 1)[0]) if location else None
    if not isinstance(parent, Path):
        raise DirectWriteFailed(f"the server's storage ({location}) is not visible here",
                                unreachable=True)
    directory = parent / str(location).rsplit("/", 1)[1]
    try:
        directory.mkdir()
    except OSError as exc:
        raise DirectWriteFailed(f"cannot write {directory}: {exc}", unreachable=True) from None
    staged = Staged(directory)
    try:
        _write_layout(staged, place, enc)
    except BaseException as exc:
        staged.settle()
        if isinstance(exc, OSError):
            raise DirectWriteFailed(f"writing {directory} failed: {exc}") from None
        raise
    return staged


def _write_layout(staged: Staged, place: dict[str, Any], enc: codec.Encoded) -> None:
    layout = place.get("layout")
    body, directory = enc.body, staged.directory
    if layout == "blob":
        staged.syncs.append(_write_file(
            directory / "blob", codec.object_header(enc.kind, enc.dtype, enc.shape), body))
    elif layout == "parquet":
        staged.syncs.append(_write_file(directory / "data.parquet", b"", body))
    elif layout == "zarr" and enc.kind == "ndarray":
        import numpy as np

        metadata = place.get("metadata") or {}
        plan = slab_plan(metadata, np.dtype(enc.dtype), tuple(json.loads(enc.shape)))
        if plan is None:
            raise DirectWriteFailed("the server's Zarr layout is not raw slabs")
        for key, _, _ in plan:
            (directory / key).parent.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max_workers=min(_WRITE_THREADS, len(plan))) as pool:
            writes = pool.map(lambda item: _write_file(directory / item[0], b"",
                                                       body[item[1]:item[1] + item[2]]), plan)
            staged.syncs.extend(writes)
    else:
        raise DirectWriteFailed(f"unknown staging layout {layout!r}")


def _write_file(path: Path, prefix: bytes, body: memoryview) -> Future[None]:
    """Write one file; its writeback, started in the background (which closes it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        if prefix:
            os.write(fd, prefix)
        view = body
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        raise
    return _SYNCS.submit(_sync_and_close, fd)


def _sync_and_close(fd: int) -> None:
    """Start the file's writeback and close it: ``sync_file_range(SYNC_FILE_RANGE_WRITE)``
    where Linux has it (the disk starts at once, and nothing waits for a journal commit,
    as an fsync of each file would); elsewhere fsync. The server fsyncs what it commits."""
    try:
        if _sync_file_range is None or _sync_file_range(fd, 0, 0, 2) != 0:
            os.fsync(fd)
    finally:
        os.close(fd)


def _load_sync_file_range() -> Any:
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        function = libc.sync_file_range
        function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
        return function
    except (OSError, AttributeError):
        return None


_sync_file_range = _load_sync_file_range()


#: Background writebacks of staged files: the disk writes them back while the rest is
#: written and while the server verifies them.
_SYNCS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="staged-writeback")


def commit_headers(sent: dict[str, str], staging_id: str) -> dict[str, str]:
    """The ``PUT`` headers of a value, for its commit: no body, the staging named."""
    return {**{k: v for k, v in sent.items() if k != "Content-Length"},
            headers.STAGING: staging_id}
