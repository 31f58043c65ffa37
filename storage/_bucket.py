"""Objects in an object store (``s3://bucket/prefix``) through fsspec (s3fs: the library
zarr and dask use), so replicas on any machine share one storage.

Layout under the prefix, like a blob store's (docs/design/storage.md, "Object storage")::

    <prefix>/<digest[:2]>/<digest>/blob           the digest's preimage (header, then body)
    <prefix>/<digest[:2]>/<digest>/sidecar.json   written last: the object exists once it does

An object store has no rename, but an upload becomes visible only when it is completed: a
single PUT, or a multipart upload's final request. A body is uploaded to its place in
large multipart pieces, hashed as it goes, and the upload is completed only once the whole
body matches its digest (otherwise it is aborted, and nothing was ever visible there); then
the sidecar is written. Readers, who look for the sidecar first, see the whole object or
none; two writers of one digest complete the same bytes. Deleting removes the sidecar
first. A crash leaves at most a blob without a sidecar (``sweep_temporary`` removes it) or
an incomplete multipart upload, which the bucket never lists (an S3 lifecycle rule for
incomplete uploads reclaims their space). Credentials and endpoint come from the standard
AWS variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``,
``AWS_DEFAULT_REGION``), as botocore reads them. A missing bucket is created.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from storage._body import FILE_PIECE_BYTES, CheckedReader, CheckedWriter, file_pieces
from storage._sidecars import SidecarEdits, parse_sidecar
from storage.base import (
    Buffer,
    ObjectReader,
    ObjectStore,
    ObjectWriter,
    PutResult,
    Sidecar,
    TaskReference,
)
from storage.errors import InvalidHeader, ObjectNotFound
from storage.header import ObjectHeader, is_digest

__all__ = ["BucketStorage"]

SIDECAR_NAME = "sidecar.json"
BLOB_NAME = "blob"
#: Multipart piece size: large pieces keep an upload near the link's speed.
_PART_BYTES = 64 * 2**20


class BucketStorage(SidecarEdits, ObjectStore):
    """Every object as one blob plus its sidecar under ``url`` (``s3://bucket/prefix``).

    Thread-safe within a process (sidecar rewrites are serialised here); across processes
    the server's digest locks serialise them. ``storage_options`` go to fsspec (the
    listings cache is always off: other replicas change the bucket).
    """

    name = "blob"

    def __init__(self, url: str, **storage_options: Any) -> None:
        import fsspec

        self.url = url.rstrip("/")
        options = {"use_listings_cache": False, "skip_instance_cache": True,
                   **storage_options}
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **options)
        self.root = self.root.rstrip("/")
        self.protocol = self.url.split("://", 1)[0]
        self._lock = threading.Lock()
        self._ensure_bucket()

    def _ensure_bucket(self) -> None:
        """Create the bucket if it does not exist yet (a fresh MinIO has none); another
        replica creating it at the same moment is fine."""
        bucket = self.root.split("/", 1)[0]
        if self.fs.exists(bucket):
            return
        try:
            self.fs.mkdir(bucket)
        except OSError:
            if not self.fs.exists(bucket):
                raise

    def __repr__(self) -> str:
        return f"BucketStorage({self.url!r})"

    def key(self, digest: str, name: str) -> str:
        if not is_digest(digest):
            raise ObjectNotFound(digest)
        return f"{self.root}/{digest[:2]}/{digest}/{name}"

    def accepts(self, header: ObjectHeader) -> bool:
        return True

    def open_writer(self, header: ObjectHeader, *, digest: str, task: TaskReference,
                    type_name: str | None = None) -> ObjectWriter:
        if not is_digest(digest):
            raise InvalidHeader(f"not a content digest: {digest!r}")
        return _BucketWriter(self, header, digest, task, type_name)

    def open_reader(self, digest: str) -> ObjectReader:
        sidecar = self.sidecar(digest)
        try:
            file = self.fs.open(self.key(digest, BLOB_NAME), "rb", block_size=FILE_PIECE_BYTES)
        except FileNotFoundError as exc:
            raise ObjectNotFound(digest) from exc
        return CheckedReader(sidecar, file_pieces(file, sidecar.header.digest_prefix()))

    def sidecar(self, digest: str) -> Sidecar:
        try:
            raw = self.fs.cat_file(self.key(digest, SIDECAR_NAME))
        except FileNotFoundError as exc:
            raise ObjectNotFound(digest) from exc
        return parse_sidecar(raw, digest)

    def exists(self, digest: str) -> bool:
        return is_digest(digest) and self.fs.exists(self.key(digest, SIDECAR_NAME))

    def location(self, digest: str) -> str | None:
        if not self.exists(digest):
            raise ObjectNotFound(digest)
        return f"{self.protocol}://{self.key(digest, BLOB_NAME)}"

    def delete(self, digest: str) -> bool:
        with self._lock:
            if not self.exists(digest):
                return False
            self.fs.rm_file(self.key(digest, SIDECAR_NAME))  # gone for readers from here
        try:
            self.fs.rm_file(self.key(digest, BLOB_NAME))
        except FileNotFoundError:
            pass
        return True

    def digests(self) -> Iterator[str]:
        for path in sorted(self.fs.glob(f"{self.root}/??/*/{SIDECAR_NAME}")):
            digest = path.rsplit("/", 2)[-2]
            if is_digest(digest):
                yield digest

    def sweep_temporary(self, older_than: float = 0.0) -> int:
        """Blobs whose sidecar never came (a crash between completing the upload and
        writing the sidecar, or between a delete's two steps)."""
        cutoff = time.time() - older_than
        found = self.fs.find(self.root, detail=True)
        sidecars = {p for p in found if p.endswith("/" + SIDECAR_NAME)}
        doomed = [
            path for path, info in found.items()
            if path.endswith("/" + BLOB_NAME)
            and path[: -len(BLOB_NAME)] + SIDECAR_NAME not in sidecars
            and _modified(info) <= cutoff
        ]  # fmt: skip
        for path in doomed:
            try:
                self.fs.rm_file(path)
            except FileNotFoundError:
                pass
        return len(doomed)

    def _write_sidecar(self, sidecar: Sidecar) -> None:
        self.fs.pipe_file(self.key(sidecar.digest, SIDECAR_NAME), sidecar.dumps())


def _modified(info: dict[str, Any]) -> float:
    stamp = info.get("LastModified") or info.get("mtime") or info.get("created")
    if stamp is None:
        return 0.0
    return stamp.timestamp() if hasattr(stamp, "timestamp") else float(stamp)


class _BucketWriter(CheckedWriter):
    """Uploads to the object's place while hashing; on commit verifies, completes the
    upload and writes the sidecar (on failure aborts it). For a digest already stored the
    body is only hashed."""

    def __init__(self, store: BucketStorage, header: ObjectHeader, digest: str,
                 task: TaskReference, type_name: str | None) -> None:
        super().__init__(store, header, digest, task, type_name)
        self._file: Any = None
        if not store.exists(digest):
            self._file = store.fs.open(store.key(digest, BLOB_NAME), "wb",
                                       block_size=_PART_BYTES)
            self._file.write(header.digest_prefix())

    def write(self, data: Buffer) -> None:
        view = self._body.feed(data)
        if self._file is not None and view.nbytes:
            self._file.write(view)

    def commit(self) -> PutResult:
        store, digest, task = self._store, self._digest, self._task
        try:
            self._body.verify()
            if self._file is None:  # already stored (or removed meanwhile: ObjectNotFound)
                return PutResult(store.add_task(digest, task), created=False)
            sidecar = self._sidecar()
            with store._lock:
                if store.exists(digest):  # stored meanwhile by another writer
                    return PutResult(store._add_task_locked(digest, task), created=False)
                self._file.close()  # completes the upload: the verified bytes appear
                self._file = None
                store._write_sidecar(sidecar)
            return PutResult(sidecar, created=True)
        finally:
            self.abort()

    def abort(self) -> None:
        if self._file is not None:
            self._file.discard()  # aborts a multipart upload, drops the buffer
            self._file.closed = True  # nothing left to flush
            self._file = None
