"""The storage of one data directory: routes each object to the blob or the Zarr backend.

The routing rule lives here only: Parquet objects (pandas frames) go to the Parquet backend;
arrays of at least ``ZARR_MIN_BYTES`` go to Zarr (lazily readable, chunked, maybe
compressed); smaller arrays and everything else go to blobs, because a
1 KiB Zarr array costs ~4 ms to write and ~2 ms to read against ~0.1 ms and ~0.04 ms for a
file (BENCHMARKS.md, "Storage and transport facts").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from storage._blob import BlobStore
from storage._directory import DirectoryStore
from storage._parquet import ParquetStore
from storage._zarr import ZarrArrayStore
from storage.base import (
    BatchItem,
    FileRange,
    ObjectReader,
    ObjectStore,
    ObjectWriter,
    PutResult,
    Sidecar,
    Staging,
    TaskReference,
)
from storage.errors import ObjectNotFound
from storage.header import ObjectHeader

__all__ = ["ZARR_MIN_BYTES", "LocalStorage"]

ZARR_MIN_BYTES = 2**20


class LocalStorage(ObjectStore):
    """All objects under ``<data_dir>/objects``: ``blob/``, ``zarr/`` and ``parquet/`` backends.

    A digest lives in exactly one backend (routing depends only on the header, which the
    digest covers). Thread-safe like its backends.
    """

    name = "local"

    def __init__(self, data_dir: str | Path) -> None:
        self._open(Path(data_dir) / "objects")

    @classmethod
    def at(cls, root: str | Path) -> LocalStorage:
        """The storage whose objects live directly under ``root`` (``file://`` URLs)."""
        storage = cls.__new__(cls)
        storage._open(Path(root))
        return storage

    def _open(self, root: Path) -> None:
        self.root = root
        self.blobs = BlobStore(self.root / "blob")
        self.arrays = ZarrArrayStore(self.root / "zarr")
        self.frames = ParquetStore(self.root / "parquet")
        self._backends: tuple[DirectoryStore, ...] = (self.arrays, self.frames, self.blobs)

    def __repr__(self) -> str:
        return f"LocalStorage.at({str(self.root)!r})"

    def backend_for(self, header: ObjectHeader) -> DirectoryStore:
        """The backend that stores new objects with this header."""
        if self.frames.accepts(header):
            return self.frames
        nbytes = header.expected_nbytes
        if nbytes is not None and nbytes >= ZARR_MIN_BYTES and self.arrays.accepts(header):
            return self.arrays
        return self.blobs

    def accepts(self, header: ObjectHeader) -> bool:
        return True

    def open_writer(
        self,
        header: ObjectHeader,
        *,
        digest: str,
        task: TaskReference,
        type_name: str | None = None,
    ) -> ObjectWriter:
        backend = self.backend_for(header)
        return backend.open_writer(header, digest=digest, task=task, type_name=type_name)

    def put_batch(self, items: Sequence[BatchItem]) -> list[PutResult | Exception]:
        """Each backend's batch in one group commit (small objects all go to blobs)."""
        by_backend: dict[int, list[int]] = {}
        backends: dict[int, DirectoryStore] = {}
        for i, item in enumerate(items):
            backend = self.backend_for(item.header)
            backends[id(backend)] = backend
            by_backend.setdefault(id(backend), []).append(i)
        results: list[PutResult | Exception | None] = [None] * len(items)
        for key, positions in by_backend.items():
            done = backends[key].put_batch([items[i] for i in positions])
            for i, result in zip(positions, done, strict=True):
                results[i] = result
        return [r for r in results if r is not None]

    supports_staging = True

    def staging(self, header: ObjectHeader) -> Staging:
        return self.backend_for(header).staging(header)

    def open_staged(self, staging_id: str, header: ObjectHeader, *, digest: str,
                    task: TaskReference, type_name: str | None = None,
                    max_nbytes: int | None = None) -> ObjectWriter:
        return self.backend_for(header).open_staged(
            staging_id, header, digest=digest, task=task, type_name=type_name,
            max_nbytes=max_nbytes)

    def open_reader(self, digest: str) -> ObjectReader:
        return self._holder(digest).open_reader(digest)

    def sidecar(self, digest: str) -> Sidecar:
        return self._holder(digest).sidecar(digest)

    def exists(self, digest: str) -> bool:
        return any(backend.exists(digest) for backend in self._backends)

    def delete(self, digest: str) -> bool:
        return any(backend.delete(digest) for backend in self._backends)

    def digests(self) -> Iterator[str]:
        for backend in self._backends:
            yield from backend.digests()

    def add_task(self, digest: str, task: TaskReference) -> Sidecar:
        return self._holder(digest).add_task(digest, task)

    def add_tasks(self, digest: str, tasks: Sequence[TaskReference]) -> Sidecar:
        return self._holder(digest).add_tasks(digest, tasks)

    def remove_task(self, digest: str, task_hash: str) -> Sidecar:
        return self._holder(digest).remove_task(digest, task_hash)

    def set_pinned(self, digest: str, task_hash: str, pinned: bool) -> Sidecar:
        return self._holder(digest).set_pinned(digest, task_hash, pinned)

    def sweep_temporary(self, older_than: float = 0.0) -> int:
        return sum(backend.sweep_temporary(older_than) for backend in self._backends)

    def location(self, digest: str) -> str | None:
        return self._holder(digest).location(digest)

    def body_ranges(self, digest: str) -> list[FileRange] | None:
        return self._holder(digest).body_ranges(digest)

    def object_path(self, digest: str) -> Path:
        """The directory holding ``digest``; raises :class:`ObjectNotFound` if there is none."""
        return self._holder(digest).object_path(digest)

    def _holder(self, digest: str) -> DirectoryStore:
        for backend in self._backends:
            if backend.exists(digest):
                return backend
        raise ObjectNotFound(digest)
