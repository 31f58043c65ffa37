"""The interface every storage backend implements, and the records it returns.

A store maps a content digest (see :mod:`storage.header`) to one immutable object: an encoded
body plus a JSON sidecar. The sidecar names the object's kind, dtype, shape, size and type, and
the task hashes that were stored with it, so the Redis index can be rebuilt from storage alone.
Which task hashes reference an object at run time is the index's business; the sidecar's copy
exists for rebuilding.

Bodies are pushed into a store piece by piece through an :class:`ObjectWriter`, so a caller
that receives them from the network never lends a thread to the wait for the next piece
(docs/design/storage.md, "Storage"). Convenience methods (:meth:`ObjectStore.put`,
:meth:`ObjectStore.size`, :meth:`ObjectStore.sidecars`) are built here once from the abstract
primitives.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from storage.errors import DigestMismatch, ObjectNotFound, StagingUnsupported, StorageError
from storage.header import OPAQUE_KINDS, ObjectHeader, content_digest

__all__ = [
    "BatchItem",
    "Buffer",
    "FileRange",
    "ObjectReader",
    "ObjectStore",
    "ObjectWriter",
    "PutResult",
    "Sidecar",
    "Staging",
    "StoredObject",
    "TaskReference",
]

#: Anything :func:`memoryview` accepts: a piece of an object's body.
Buffer = bytes | bytearray | memoryview

SIDECAR_FORMAT = 1


@dataclass(frozen=True, slots=True)
class TaskReference:
    """One task result that is stored as this object.

    ``pinned`` mirrors the index's pin, so that a rebuilt index keeps it. ``signature`` is
    the client's opaque signature binding this task to the object (docs/protocol.md,
    "Signed results"), kept so that a rebuilt index serves it again. ``expires`` is the
    entry's expiry (Unix time; ``None``: none), kept so that a rebuilt index still
    expires it.
    """

    task_hash: str
    label: str = ""
    compute_seconds: float = 0.0
    created: float = 0.0
    pinned: bool = False
    signature: str | None = None
    expires: float | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "label": self.label,
            "compute_seconds": self.compute_seconds,
            "created": self.created,
        }
        if self.pinned:
            data["pinned"] = True
        if self.signature is not None:
            data["signature"] = self.signature
        if self.expires is not None:
            data["expires"] = self.expires
        return data


@dataclass(frozen=True, slots=True)
class Sidecar:
    """The small JSON record kept beside every object.

    ``storage`` is the backend's name (``blob`` or ``zarr``); ``nbytes`` is the length of the
    encoded body (not of the files on disk); ``tasks`` maps each referencing task hash to its
    :class:`TaskReference`, first store first.
    """

    digest: str
    header: ObjectHeader
    storage: str
    nbytes: int
    type: str | None
    created: float
    tasks: Mapping[str, TaskReference] = field(default_factory=dict)

    def with_task(self, task: TaskReference) -> Sidecar:
        return self.with_tasks([task])

    def with_tasks(self, tasks: Iterable[TaskReference]) -> Sidecar:
        """This sidecar with ``tasks`` added (those it lists already are kept as they are)."""
        listed = dict(self.tasks)
        for task in tasks:
            listed.setdefault(task.task_hash, task)
        return _replace_tasks(self, listed)

    def without_task(self, task_hash: str) -> Sidecar:
        tasks = {h: t for h, t in self.tasks.items() if h != task_hash}
        return _replace_tasks(self, tasks)

    def with_pinned(self, task_hash: str, pinned: bool) -> Sidecar:
        tasks = dict(self.tasks)
        tasks[task_hash] = replace(tasks[task_hash], pinned=pinned)
        return _replace_tasks(self, tasks)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": SIDECAR_FORMAT,
            "digest": self.digest,
            "kind": self.header.kind,
            "storage": self.storage,
            "nbytes": self.nbytes,
            "dtype": self.header.dtype if self.header.is_array else None,
            "shape": list(self.header.shape) if self.header.shape is not None else None,
            "type": self.type,
            "created": self.created,
            "tasks": {h: t.to_json() for h, t in self.tasks.items()},
        }

    def dumps(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":")).encode()

    @classmethod
    def loads(cls, raw: bytes) -> Sidecar:
        """Parse a sidecar; raises ``ValueError`` (or ``KeyError``/``TypeError``) if malformed."""
        data = json.loads(raw)
        if data.get("format") != SIDECAR_FORMAT:
            raise ValueError(f"unknown sidecar format {data.get('format')!r}")
        if data["kind"] == "ndarray":
            header = ObjectHeader.array(data["dtype"], data["shape"])
        elif data["kind"] in OPAQUE_KINDS:
            header = ObjectHeader(data["kind"])
        else:
            raise ValueError(f"unknown object kind {data['kind']!r}")
        tasks = {
            h: TaskReference(
                h,
                t["label"],
                float(t["compute_seconds"]),
                float(t["created"]),
                bool(t.get("pinned", False)),
                t.get("signature"),
                None if t.get("expires") is None else float(t["expires"]),
            )
            for h, t in data["tasks"].items()
        }
        return cls(
            digest=data["digest"],
            header=header,
            storage=data["storage"],
            nbytes=int(data["nbytes"]),
            type=data["type"],
            created=float(data["created"]),
            tasks=MappingProxyType(tasks),
        )


def _replace_tasks(sidecar: Sidecar, tasks: dict[str, TaskReference]) -> Sidecar:
    return Sidecar(
        sidecar.digest,
        sidecar.header,
        sidecar.storage,
        sidecar.nbytes,
        sidecar.type,
        sidecar.created,
        MappingProxyType(tasks),
    )


@dataclass(frozen=True, slots=True)
class StoredObject:
    """An object read back and verified against its digest.

    ``body`` is exactly the encoded body (raw C-order bytes for arrays, the pickle for
    pickles); it may be a view into a larger buffer, so slice it rather than copy it.
    """

    sidecar: Sidecar
    body: memoryview

    def array(self) -> np.ndarray:
        """The body as a read-only numpy array of the header's dtype and shape."""
        header = self.sidecar.header
        flat = np.frombuffer(self.body, dtype=header.numpy_dtype)
        return flat.reshape(header.shape)


@dataclass(frozen=True, slots=True)
class PutResult:
    """What :meth:`ObjectStore.put` did: ``created`` is False when the object already existed."""

    sidecar: Sidecar
    created: bool


class ObjectWriter(ABC):
    """One object being written: its body pushed in pieces with :meth:`write`, then
    published with :meth:`commit` or dropped with :meth:`abort`.

    Each call may block on the disk, none on anything else; calls come one at a time (from
    any thread). Used as a context manager, leaving the block without a commit aborts.
    """

    @abstractmethod
    def write(self, data: Buffer) -> None:
        """Append ``data`` to the body (it may be reused by the caller once this returns).
        Raises as soon as the body is known to be invalid (too long for its dtype and
        shape, a bool body with other bytes than 0 and 1)."""

    @abstractmethod
    def commit(self) -> PutResult:
        """Verify the whole body against digest, dtype and shape and publish the object
        (or add the task to the stored one); on failure nothing is left and the error
        propagates."""

    @abstractmethod
    def abort(self) -> None:
        """Drop everything written so far; idempotent, a no-op after :meth:`commit`."""

    def __enter__(self) -> ObjectWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.abort()


class ObjectReader(ABC):
    """One object being read: its ``sidecar``, then its body in pieces of at most
    ``piece_bytes`` (:meth:`read`), so a reader never holds the whole object.

    Nothing unverified is handed out where the backend can help it: a backend with
    per-chunk digests verifies each piece before returning it; otherwise the whole digest
    is checked as the last byte arrives, before the last piece is returned (so a one-piece
    object is verified before any of it is returned). A mismatch raises
    :class:`~storage.errors.CorruptObject` from :meth:`read`, a vanished object
    :class:`~storage.errors.ObjectNotFound`. Each piece is the caller's to keep (never
    reused by the reader). Calls come one at a time, from any thread.
    """

    sidecar: Sidecar
    piece_bytes: int

    @abstractmethod
    def read(self) -> memoryview | None:
        """The next piece, or None once the whole body was returned and verified."""

    @abstractmethod
    def close(self) -> None:
        """Release open files; idempotent."""

    def __enter__(self) -> ObjectReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class FileRange:
    """``size`` bytes of the local file ``path`` from ``offset``: a part of a body kept as
    it is (:meth:`ObjectStore.body_ranges`)."""

    path: str
    offset: int
    size: int


@dataclass(frozen=True)
class Staging:
    """Where a writer outside the server (a worker that sees the storage) puts the files of
    one object before the server commits it (docs/design/data-plane.md, "Direct writes").

    ``location`` is the URL of the directory the files go in (the writer creates it);
    ``layout`` says which files: ``blob``, one file ``blob`` holding the digest's preimage
    (``kind\\ndtype\\nshape\\n``, then the body); ``parquet``, one file ``data.parquet``
    holding the body; ``zarr``, one file per chunk holding the chunk's raw bytes (C order,
    the true dtype), named by the chunk grid and key encoding of ``metadata`` (the
    ``zarr.json`` the object will have; an edge chunk's file may be padded to the whole
    chunk). Nothing else may be in the directory.
    """

    id: str
    location: str
    layout: str
    metadata: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "location": self.location, "layout": self.layout,
                "metadata": None if self.metadata is None else dict(self.metadata)}


@dataclass(frozen=True)
class BatchItem:
    """One small object of :meth:`ObjectStore.put_batch`: its whole body in memory."""

    header: ObjectHeader
    body: Buffer
    digest: str
    task: TaskReference
    type_name: str | None = None


class ObjectStore(ABC):
    """Content-addressed objects with sidecars: the one interface every backend implements.

    Contract (checked by ``tests/storage/contract.py`` for every backend):

    - ``open_writer`` takes the body piece by piece, hashes it while writing, and publishes
      the object only if the body matches ``digest`` (and, for arrays, dtype and shape).
      On any failure, and on :meth:`ObjectWriter.abort`, nothing is left, visible or not.
      Writing an existing digest verifies the body, adds the task reference and keeps the
      stored object. Memory held per writer is bounded (a few MiB to one storage chunk),
      whatever the declared dtype and shape. ``put`` is the same for a whole iterable.
    - ``open_reader`` hands the body out in bounded pieces and verifies everything it
      returns (per chunk where the backend keeps chunk digests, else the whole digest before
      the last piece); a corrupt object raises :class:`~storage.errors.CorruptObject`, a
      missing one :class:`~storage.errors.ObjectNotFound`. ``get`` is the same into one
      buffer.
    - Objects appear and disappear atomically: readers see the whole object or none.
    - Every method is safe to call from several threads of one process at once.
    """

    #: The name recorded in sidecars and manifests (``blob``, ``zarr``).
    name: ClassVar[str]
    #: Whether writers outside the server can stage objects here (:meth:`staging`).
    supports_staging: ClassVar[bool] = False

    @abstractmethod
    def accepts(self, header: ObjectHeader) -> bool:
        """Whether this backend can hold objects with this header."""

    @abstractmethod
    def open_writer(
        self,
        header: ObjectHeader,
        *,
        digest: str,
        task: TaskReference,
        type_name: str | None = None,
    ) -> ObjectWriter:
        """A writer of the object ``digest``; see the class contract. Raises
        :class:`~storage.errors.InvalidHeader` (``accepts`` is false, or a malformed digest)
        before anything is written."""

    def put(
        self,
        header: ObjectHeader,
        chunks: Iterable[Buffer],
        *,
        digest: str,
        task: TaskReference,
        type_name: str | None = None,
    ) -> PutResult:
        """Store the body ``chunks`` under ``digest``; see the class contract.

        Raises :class:`~storage.errors.DigestMismatch`, :class:`~storage.errors.BodySizeMismatch`
        or :class:`~storage.errors.InvalidHeader` (``accepts`` is false) and publishes nothing;
        an exception raised by ``chunks`` itself propagates the same way.
        """
        with self.open_writer(header, digest=digest, task=task, type_name=type_name) as writer:
            for chunk in chunks:
                writer.write(chunk)
            return writer.commit()

    def put_batch(self, items: Sequence[BatchItem]) -> list[PutResult | Exception]:
        """Store many small objects; per item its :class:`PutResult` or the error
        (:class:`~storage.errors.StorageError`) that kept it out, which stores nothing for
        that item only. Each item obeys ``put``'s contract. This default puts them one by
        one, except that the later items of a digest the batch stored already only have
        their bodies checked and their tasks added in one sidecar rewrite (one per item
        was quadratic in the tasks of a value many share); backends that can make a whole
        batch durable at once (one group commit) override it."""
        results: list[PutResult | Exception | None] = [None] * len(items)
        stored: set[str] = set()
        later: dict[str, list[int]] = {}  # digest -> positions of its later items
        for i, item in enumerate(items):
            if item.digest in stored:  # the same bytes, or refused like put refuses them
                actual = content_digest(item.header, item.body)
                if actual == item.digest:
                    later.setdefault(item.digest, []).append(i)
                else:
                    results[i] = DigestMismatch(item.digest, actual)
                continue
            try:
                results[i] = self.put(item.header, [item.body], digest=item.digest,
                                      task=item.task, type_name=item.type_name)
                stored.add(item.digest)
            except StorageError as exc:
                results[i] = exc
        for digest, positions in later.items():
            try:
                sidecar = self.add_tasks(digest, [items[i].task for i in positions])
                outcome: PutResult | Exception = PutResult(sidecar, created=False)
            except StorageError as exc:
                outcome = exc
            for i in positions:
                results[i] = outcome
        return [r for r in results if r is not None]

    def staging(self, header: ObjectHeader) -> Staging:
        """A new place where a writer that sees this storage stages an object with this
        header (nothing is created: the writer makes the directory, so a writer without
        write access fails there and uploads instead). Raises
        :class:`~storage.errors.StagingUnsupported` where objects cannot be staged."""
        raise StagingUnsupported(f"{self.name} storage takes no staged objects")

    def open_staged(
        self,
        staging_id: str,
        header: ObjectHeader,
        *,
        digest: str,
        task: TaskReference,
        type_name: str | None = None,
        max_nbytes: int | None = None,
    ) -> ObjectWriter:
        """A writer whose body is the files staged under ``staging_id`` (its ``write``
        takes no bytes). ``commit`` moves them out of the writer's reach, reads and
        verifies them as ``open_writer``'s commit verifies a body (digest, dtype, shape;
        only the layout's files, regular and not linked; at most ``max_nbytes``), and
        publishes the object atomically (or adds the task to the stored one). On any
        failure, and on ``abort``, the staged files are removed and nothing is published.
        :class:`~storage.errors.StagingNotFound` from ``commit`` when nothing is staged
        there."""
        raise StagingUnsupported(f"{self.name} storage takes no staged objects")

    @abstractmethod
    def open_reader(self, digest: str) -> ObjectReader:
        """A reader of the object ``digest``; see :class:`ObjectReader`. Raises
        :class:`~storage.errors.ObjectNotFound` if there is none."""

    def get(self, digest: str) -> StoredObject:
        """Read and verify a whole object into one buffer."""
        with self.open_reader(digest) as reader:
            sidecar = reader.sidecar
            body = memoryview(bytearray(sidecar.nbytes))
            filled = 0
            while (piece := reader.read()) is not None:
                body[filled:filled + piece.nbytes] = piece  # the reader checks the length
                filled += piece.nbytes
        return StoredObject(sidecar, body)

    @abstractmethod
    def sidecar(self, digest: str) -> Sidecar:
        """The object's sidecar, without reading or verifying the body."""

    @abstractmethod
    def exists(self, digest: str) -> bool:
        """Whether a complete object is stored under ``digest`` (not verified)."""

    @abstractmethod
    def delete(self, digest: str) -> bool:
        """Remove the object; False if there was none. Atomic for readers."""

    @abstractmethod
    def digests(self) -> Iterator[str]:
        """Every stored digest, in no particular order (for reindex and gc)."""

    @abstractmethod
    def add_task(self, digest: str, task: TaskReference) -> Sidecar:
        """Record one more task hash in the object's sidecar (durably)."""

    def add_tasks(self, digest: str, tasks: Sequence[TaskReference]) -> Sidecar:
        """:meth:`add_task` for several tasks (durably); backends that rewrite a sidecar
        whole do it once."""
        sidecar = self.sidecar(digest)
        for task in tasks:
            sidecar = self.add_task(digest, task)
        return sidecar

    @abstractmethod
    def remove_task(self, digest: str, task_hash: str) -> Sidecar:
        """Drop a task hash from the object's sidecar (durably); the object stays."""

    @abstractmethod
    def set_pinned(self, digest: str, task_hash: str, pinned: bool) -> Sidecar:
        """Record (durably) whether a task reference is pinned; ``KeyError`` if the sidecar
        does not list ``task_hash``."""

    @abstractmethod
    def sweep_temporary(self, older_than: float = 0.0) -> int:
        """Remove what interrupted writes and deletes left behind, untouched for more than
        ``older_than`` seconds; returns how many paths.

        With ``older_than=0`` only call it while nothing writes to this store (the data
        directory's lock): it would remove a write in progress.
        """

    def body_ranges(self, digest: str) -> list[FileRange] | None:
        """The body as byte ranges of local files, in order, when the backend keeps it as
        raw bytes in files (a blob after its header, a Parquet file, the chunk files of an
        uncompressed Zarr array); None otherwise. **Not verified**: for a reader that
        checks the digest itself (zero-copy serving: docs/design/data-plane.md, "Zero-copy
        bodies"). The files' sizes are checked (:class:`~storage.errors.CorruptObject` for one too
        short); :class:`~storage.errors.ObjectNotFound` if there is no such object."""
        return None

    def location(self, digest: str) -> str | None:
        """Where a reader that sees this storage finds the object's payload (a URL such as
        ``file:///data/objects/zarr/ab/ab.../``), or ``None`` when it cannot be read in
        place. For direct reads (docs/design/data-plane.md, "Direct reads"): the reader verifies
        the digest itself. Backends whose payload lies in files override this."""
        return None

    def size(self, digest: str) -> int:
        """Length of the encoded body in bytes."""
        return self.sidecar(digest).nbytes

    def sidecars(self) -> Iterator[Sidecar]:
        """The sidecar of every stored object; objects deleted meanwhile are skipped."""
        for digest in self.digests():
            try:
                yield self.sidecar(digest)
            except ObjectNotFound:
                continue
