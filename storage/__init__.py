"""Content-addressed, persistent storage of encoded task results.

``storage`` knows about bytes, digests and files; it imports neither ``client_lib`` nor
``cache_server``. Start with :class:`LocalStorage` (one data directory, routing by kind and
size) or a single backend (:class:`BlobStore`, :class:`ZarrArrayStore`,
:class:`ParquetStore`); all implement :class:`ObjectStore`.
"""

from storage._blob import BlobStore
from storage._bucket import BucketStorage
from storage._local import ZARR_MIN_BYTES, LocalStorage
from storage._parquet import ParquetStore
from storage._url import open_storage, storage_url_problem
from storage._zarr import ZarrArrayStore
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
    StoredObject,
    TaskReference,
)
from storage.errors import (
    BodySizeMismatch,
    CorruptObject,
    DigestMismatch,
    InvalidBody,
    InvalidHeader,
    ObjectNotFound,
    PayloadTooLarge,
    StagingNotFound,
    StagingUnsupported,
    StorageError,
)
from storage.header import ObjectHeader, content_digest, is_digest

__all__ = [
    "ZARR_MIN_BYTES",
    "BatchItem",
    "BlobStore",
    "BucketStorage",
    "BodySizeMismatch",
    "Buffer",
    "CorruptObject",
    "DigestMismatch",
    "FileRange",
    "InvalidBody",
    "InvalidHeader",
    "LocalStorage",
    "ObjectHeader",
    "ObjectNotFound",
    "ObjectReader",
    "ObjectStore",
    "ObjectWriter",
    "ParquetStore",
    "PayloadTooLarge",
    "PutResult",
    "Sidecar",
    "Staging",
    "StagingNotFound",
    "StagingUnsupported",
    "StorageError",
    "StoredObject",
    "TaskReference",
    "ZarrArrayStore",
    "content_digest",
    "is_digest",
    "open_storage",
    "storage_url_problem",
]
