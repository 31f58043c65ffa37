"""Shared machinery of the local backends: one directory per object.

Layout under a backend's root::

    <root>/<digest[:2]>/<digest>/sidecar.json   the sidecar
    <root>/<digest[:2]>/<digest>/...            the backend's payload (a blob file, a Zarr array)
    <root>/.tmp/                                writes in progress, deletions being removed
    <root>/.staging/<id>/                       objects staged by outside writers
                                                (storage/_staging.py)

An object is written completely under ``.tmp``, fsynced, and renamed into place, so its
directory appears (and, on delete, disappears) atomically together with its sidecar.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import suppress
from pathlib import Path

from storage._atomic import (
    TEMP_DIR_NAME,
    durable_batch,
    fsync_dir,
    fsync_tree,
    new_temp_dir,
    publish_dir,
    remove_dir,
    replace_file,
)
from storage._body import (
    FILE_PIECE_BYTES,
    BodyCheck,
    CheckedReader,
    CheckedWriter,
    Pieces,
    file_pieces,
)
from storage._sidecars import SidecarEdits, parse_sidecar
from storage._staging import (
    STAGING_DIR_NAME,
    StagedFile,
    StagedWriter,
    check_files,
    piece_buffer,
    read_prefix,
    read_staged,
)
from storage.base import (
    BatchItem,
    Buffer,
    FileRange,
    ObjectReader,
    ObjectStore,
    ObjectWriter,
    PutResult,
    Sidecar,
    Staging,
    TaskReference,
)
from storage.errors import (
    CorruptObject,
    InvalidHeader,
    ObjectNotFound,
    StagingUnsupported,
    StorageError,
)
from storage.header import ObjectHeader, is_digest

__all__ = ["FILE_PIECE_BYTES", "DirectoryStore", "FilePayload", "Payload", "Pieces", "file_pieces"]

SIDECAR_NAME = "sidecar.json"


class Payload(ABC):
    """A backend's payload being written into an object's temporary directory."""

    @abstractmethod
    def write(self, view: memoryview) -> None:
        """Append checked bytes (``view`` is the caller's again once this returns)."""

    @abstractmethod
    def finish(self) -> None:
        """The body is complete: write what is still buffered and close the files."""

    @abstractmethod
    def close(self) -> None:
        """Release files and buffers after a failure (the directory is removed anyway)."""


class DirectoryStore(SidecarEdits, ObjectStore):
    """An :class:`ObjectStore` keeping each object in its own directory under ``root``.

    Subclasses write and read the payload (:meth:`_open_payload`, :meth:`_read_pieces`);
    this class does digests, sidecars, atomic publish and delete. Thread-safe: publishing,
    sidecar rewrites and deletes are serialised by one lock per store, while the expensive
    parts (writing, fsyncing, reading, hashing) run outside it. Several processes may read one
    root; writers in several processes are safe for objects, but concurrent sidecar updates of
    the same object from two processes can lose a task reference.
    """

    #: The payload's file in an object directory; ``""``: the directory itself is the payload.
    payload_name: str = ""
    supports_staging = True

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.root)!r})"

    # -- payload, per backend ---------------------------------------------------------------

    @abstractmethod
    def _open_payload(self, directory: Path, header: ObjectHeader, *,
                      strong: bool = True) -> Payload:
        """Start writing a payload into the empty ``directory``; ``strong``: the object is
        signed (keep what its readers check: BLAKE3 chunk digests)."""

    @abstractmethod
    def _read_pieces(self, directory: Path, sidecar: Sidecar) -> Pieces:
        """The body in bounded pieces (raising ``FileNotFoundError`` if it is gone)."""

    def _body_files(self, directory: Path, sidecar: Sidecar) -> list[FileRange] | None:
        """The body as ranges of files in ``directory`` (not verified), or None. This
        default: ``payload_name`` after the prefix."""
        if not self.payload_name:
            return None
        return [FileRange(str(directory / self.payload_name),
                          len(self._file_prefix(sidecar.header)), sidecar.nbytes)]

    def _file_prefix(self, header: ObjectHeader) -> bytes:
        """What a one-file payload holds before the body (a blob: the digest's header)."""
        return b""

    def _staged_layout(self, header: ObjectHeader) -> dict | None:
        """The metadata a writer needs to stage an object with this header (see
        :class:`~storage.base.Staging`); None for a one-file payload."""
        return None

    def _adopt_staged(self, directory: Path, header: ObjectHeader, body: BodyCheck, *,
                      strong: bool) -> None:
        """Check the staged payload in ``directory`` (out of the writer's reach now), feed
        every body byte to ``body`` and complete the payload's own files; raise
        :class:`~storage.errors.InvalidBody` for anything but the layout's files. This
        default: the one file ``payload_name``. ``strong``: the object is signed (its
        readers check BLAKE3 digests)."""
        check_files(directory, [self.payload_name])
        file = StagedFile(directory / self.payload_name)
        try:
            prefix = self._file_prefix(header)
            read_prefix(file, prefix)
            read_staged(file, len(prefix), max(file.size - len(prefix), 0), piece_buffer(),
                        body.feed)
        finally:
            file.close()

    # -- ObjectStore ------------------------------------------------------------------------

    def object_path(self, digest: str) -> Path:
        """The directory of the object ``digest`` (which may not exist)."""
        if not is_digest(digest):
            raise ObjectNotFound(digest)
        return self.root / digest[:2] / digest

    def open_writer(
        self,
        header: ObjectHeader,
        *,
        digest: str,
        task: TaskReference,
        type_name: str | None = None,
    ) -> ObjectWriter:
        if not self.accepts(header):
            raise InvalidHeader(f"{self.name} store cannot hold {header}")
        if not is_digest(digest):
            raise InvalidHeader(f"not a content digest: {digest!r}")
        return _DirectoryWriter(self, header, digest, task, type_name)

    @property
    def staging_root(self) -> Path:
        """Where outside writers stage objects (storage/_staging.py)."""
        return self.root / STAGING_DIR_NAME

    def staging(self, header: ObjectHeader) -> Staging:
        if not self.accepts(header):
            raise StagingUnsupported(f"{self.name} store cannot hold {header}")
        metadata = self._staged_layout(header)
        self.staging_root.mkdir(exist_ok=True)
        staging_id = uuid.uuid4().hex
        return Staging(staging_id, (self.staging_root.resolve() / staging_id).as_uri(),
                       self.name, metadata)

    def open_staged(self, staging_id: str, header: ObjectHeader, *, digest: str,
                    task: TaskReference, type_name: str | None = None,
                    max_nbytes: int | None = None) -> ObjectWriter:
        if not self.accepts(header):
            raise InvalidHeader(f"{self.name} store cannot hold {header}")
        if not is_digest(digest):
            raise InvalidHeader(f"not a content digest: {digest!r}")
        return StagedWriter(self, staging_id, header, digest, task, type_name, max_nbytes)

    def _publish(self, temp: Path, sidecar: Sidecar, task: TaskReference) -> PutResult:
        """Publish the complete payload in ``temp`` (verified) with its sidecar: written,
        fsynced, renamed into place; if another writer published the digest first, only
        the task is added to that object (and ``temp`` removed)."""
        (temp / SIDECAR_NAME).write_bytes(sidecar.dumps())
        fsync_tree(temp)
        with self._lock:
            if publish_dir(temp, self.object_path(sidecar.digest)):
                return PutResult(sidecar, created=True)
            return PutResult(self._add_task_locked(sidecar.digest, task), created=False)

    def put_batch(self, items: Sequence[BatchItem]) -> list[PutResult | Exception]:
        """Store many small objects with one group commit: every new object is written
        under ``.tmp`` and every sidecar that gains a task beside its object, nothing
        fsynced yet; the filesystem is made durable once (:func:`durable_batch`); the
        objects and sidecars are renamed into place and made durable once more. A crash
        leaves each object whole in place or only under ``.tmp`` (swept at start), and each
        sidecar old or new. Per item: its :class:`PutResult`, or the error that kept it out
        (a wrong digest or size), which stores nothing for that item only."""
        results: list[PutResult | Exception | None] = [None] * len(items)
        written: list[tuple[int, Path, Sidecar]] = []
        existing: list[int] = []
        digests: set[str] = set()  # of the objects this batch writes
        try:
            for i, item in enumerate(items):
                try:
                    if self._write_batch_item(item, written, i, digests):
                        existing.append(i)
                except StorageError as exc:
                    results[i] = exc
            if written:
                durable_batch(self.root / TEMP_DIR_NAME, [temp for _, temp, _ in written])
            parents: set[Path] = set()
            with self._lock:
                for i, temp, sidecar in written:
                    final = self.object_path(sidecar.digest)
                    parents.add(final.parent)
                    if _publish_unsynced(temp, final):
                        results[i] = PutResult(sidecar, created=True)
                    else:  # another writer won: this one only adds its task
                        existing.append(i)
                added = self._add_tasks_locked([items[i] for i in existing], parents)
                for j, sidecar in added:
                    results[existing[j]] = PutResult(sidecar, created=False)
            if parents:  # the renames
                durable_batch(self.root, parents)
        finally:
            for _, temp, _ in written:
                remove_dir(temp)
        return [r for r in results if r is not None]

    def _write_batch_item(self, item: BatchItem, written: list, i: int,
                          digests: set[str]) -> bool:
        """Write one item of :meth:`put_batch` under ``.tmp`` (not yet durable); True if
        its object exists already (its body is still verified)."""
        if not self.accepts(item.header) or not is_digest(item.digest):
            raise InvalidHeader(f"{self.name} store cannot hold {item.header} {item.digest!r}")
        body = BodyCheck(item.header, item.digest)
        view = body.feed(item.body)
        if item.digest in digests or self.object_path(item.digest).is_dir():
            body.verify()  # written by this batch already, or stored: it adds its task
            return True
        temp = new_temp_dir(self.root, "put")
        try:
            payload = self._open_payload(temp, item.header)
            try:
                if view.nbytes:
                    payload.write(view)
                payload.finish()
            except BaseException:
                payload.close()
                raise
            body.verify()
            sidecar = Sidecar(digest=item.digest, header=item.header, storage=self.name,
                              nbytes=body.nbytes, type=item.type_name,
                              created=item.task.created or time.time(),
                              tasks={item.task.task_hash: item.task})
            (temp / SIDECAR_NAME).write_bytes(sidecar.dumps())
        except BaseException:
            remove_dir(temp)
            raise
        written.append((i, temp, sidecar))
        digests.add(item.digest)
        return False

    def _add_tasks_locked(self, items: list[BatchItem],
                          renamed_in: set[Path]) -> list[tuple[int, Sidecar]]:
        """``add_task`` for many items with one group commit (caller holds the lock):
        each object that gains tasks gets one new sidecar, written beside the old one,
        made durable with the others at once, then renamed over it (its directory joins
        ``renamed_in``: the caller makes the renames durable). One sidecar per object, not
        per item: many tasks of a batch that share a value (``None``, ``0``) rewrote a
        growing sidecar once each, quadratic in the tasks. Per item its position in
        ``items`` and its sidecar now."""
        sidecars: dict[str, Sidecar] = {}  # digest -> its sidecar as stored
        new: dict[str, list[TaskReference]] = {}  # digest -> tasks it gains
        for item in items:
            if item.digest not in sidecars:
                sidecars[item.digest] = self.sidecar(item.digest)
            if item.task.task_hash not in sidecars[item.digest].tasks:
                new.setdefault(item.digest, []).append(item.task)
        temps: dict[str, Path] = {}
        try:
            for digest, tasks in new.items():
                sidecars[digest] = sidecars[digest].with_tasks(tasks)
                temp = self.object_path(digest) / f".{SIDECAR_NAME}.{uuid.uuid4().hex}"
                temps[digest] = temp
                temp.write_bytes(sidecars[digest].dumps())
            if temps:
                durable_batch(self.root, list(temps.values()))
                for digest, temp in temps.items():
                    os.replace(temp, self.object_path(digest) / SIDECAR_NAME)
                    renamed_in.add(self.object_path(digest))
        except BaseException:
            for temp in temps.values():
                temp.unlink(missing_ok=True)
            raise
        return [(i, sidecars[item.digest]) for i, item in enumerate(items)]

    def open_reader(self, digest: str) -> ObjectReader:
        sidecar = self.sidecar(digest)
        try:
            payload = self._read_pieces(self.object_path(digest), sidecar)
        except FileNotFoundError as exc:
            raise ObjectNotFound(digest) from exc
        return CheckedReader(sidecar, payload)

    def sidecar(self, digest: str) -> Sidecar:
        directory = self.object_path(digest)
        try:
            raw = (directory / SIDECAR_NAME).read_bytes()
        except FileNotFoundError as exc:
            if directory.is_dir():
                raise CorruptObject(f"object {digest} has no sidecar") from exc
            raise ObjectNotFound(digest) from exc
        return parse_sidecar(raw, digest)

    def exists(self, digest: str) -> bool:
        return is_digest(digest) and self.object_path(digest).is_dir()

    def body_ranges(self, digest: str) -> list[FileRange] | None:
        sidecar = self.sidecar(digest)
        directory = self.object_path(digest)
        try:
            ranges = self._body_files(directory, sidecar)
            for part in ranges or ():
                if os.stat(part.path).st_size < part.offset + part.size:
                    raise CorruptObject(f"object {digest}: {part.path} is too short")
        except FileNotFoundError as exc:
            if directory.is_dir():
                raise CorruptObject(f"object {digest} lacks {exc.filename}") from exc
            raise ObjectNotFound(digest) from exc
        return ranges

    def location(self, digest: str) -> str | None:
        directory = self.object_path(digest)
        if not directory.is_dir():
            raise ObjectNotFound(digest)
        payload = directory / self.payload_name if self.payload_name else directory
        return payload.resolve().as_uri()

    def delete(self, digest: str) -> bool:
        directory = self.object_path(digest)
        with self._lock:
            if not directory.is_dir():
                return False
            # Rename first so the object disappears atomically, then remove it at leisure.
            doomed = new_temp_dir(self.root, "delete")
            directory.rename(doomed / digest)
            fsync_dir(directory.parent)
        remove_dir(doomed)
        return True

    def digests(self) -> Iterator[str]:
        for fan_out in sorted(self.root.iterdir()):
            if len(fan_out.name) != 2 or not fan_out.is_dir():
                continue
            for entry in sorted(fan_out.iterdir()):
                if is_digest(entry.name) and entry.name.startswith(fan_out.name):
                    yield entry.name

    def _write_sidecar(self, sidecar: Sidecar) -> None:
        replace_file(self.object_path(sidecar.digest), SIDECAR_NAME, sidecar.dumps())

    def sweep_temporary(self, older_than: float = 0.0) -> int:
        with self._lock:
            doomed = list((self.root / TEMP_DIR_NAME).glob("*"))
            doomed += self.staging_root.glob("*")  # direct writes that never committed
            # replace_file's temporaries: ".sidecar.json.<uuid>" beside a sidecar.
            doomed += self.root.glob(f"??/*/.{SIDECAR_NAME}.*")
            if older_than > 0:
                cutoff = time.time() - older_than
                doomed = [p for p in doomed if _last_change(p) < cutoff]
            for path in doomed:
                if path.is_dir():
                    remove_dir(path)
                else:
                    path.unlink(missing_ok=True)
        return len(doomed)


class _DirectoryWriter(CheckedWriter):
    """Writes under ``.tmp``, then verifies, fsyncs and renames into place. For a digest
    already stored the body is only hashed (it must still prove what it claims)."""

    def __init__(self, store: DirectoryStore, header: ObjectHeader, digest: str,
                 task: TaskReference, type_name: str | None) -> None:
        super().__init__(store, header, digest, task, type_name)
        self._temp: Path | None = None
        self._payload: Payload | None = None
        if not store.object_path(digest).is_dir():
            self._temp = new_temp_dir(store.root, "put")
            try:
                self._payload = store._open_payload(self._temp, header,
                                                    strong=task.signature is not None)
            except BaseException:
                self.abort()
                raise

    def write(self, data: Buffer) -> None:
        view = self._body.feed(data)
        if self._payload is not None and view.nbytes:
            self._payload.write(view)

    def commit(self) -> PutResult:
        store, digest, task = self._store, self._digest, self._task
        try:
            if self._payload is not None:
                self._payload.finish()
            self._body.verify()
            if self._temp is None:  # already stored (or removed meanwhile: ObjectNotFound)
                return PutResult(store.add_task(digest, task), created=False)
            temp, self._temp = self._temp, None  # published, or removed by _publish
            try:
                return store._publish(temp, self._sidecar(), task)
            finally:
                remove_dir(temp)
        finally:
            self.abort()

    def abort(self) -> None:
        if self._payload is not None:
            self._payload.close()
            self._payload = None
        if self._temp is not None:
            remove_dir(self._temp)
            self._temp = None


class FilePayload(Payload):
    """A payload that is one file: ``prefix``, then each piece appended as it comes
    (unbuffered: nothing held in memory)."""

    def __init__(self, path: Path, prefix: bytes) -> None:
        self._file = open(path, "wb", buffering=0)  # noqa: SIM115 - closed by finish/close
        self.write(memoryview(prefix))

    def write(self, view: memoryview) -> None:
        while view:
            written = self._file.write(view)
            view = view[written:]

    def finish(self) -> None:
        self._file.close()

    def close(self) -> None:
        self._file.close()


def _last_change(path: Path) -> float:
    """The newest modification time in ``path`` (a file, or a tree being written)."""
    try:
        newest = path.stat().st_mtime
        if path.is_dir():
            for dirpath, _dirs, files in os.walk(path):
                for name in files:
                    with suppress(FileNotFoundError):
                        newest = max(newest, os.stat(os.path.join(dirpath, name)).st_mtime)
        return newest
    except FileNotFoundError:
        return 0.0


def _publish_unsynced(temp: Path, final: Path) -> bool:
    """Rename ``temp`` (made durable already) to ``final``; the caller makes the renames
    durable, all at once. False if ``final`` exists (another writer won)."""
    if not final.parent.is_dir():
        final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(temp, final)
    except OSError:
        if not final.exists():
            raise
        return False
    return True
