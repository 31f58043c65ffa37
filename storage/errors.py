"""The one exception hierarchy of :mod:`storage`.

Every failure a caller may want to tell apart has its own class, all deriving from
:class:`StorageError`. The classes carry no HTTP status: :mod:`storage` knows nothing about
HTTP, and the server maps each class to a status in one place.
"""

from __future__ import annotations

__all__ = [
    "BodySizeMismatch",
    "CorruptObject",
    "DigestMismatch",
    "InvalidBody",
    "InvalidHeader",
    "ObjectNotFound",
    "PayloadTooLarge",
    "StagingNotFound",
    "StagingUnsupported",
    "StorageError",
]


class StorageError(Exception):
    """Base class of every error raised on purpose by :mod:`storage`."""


class ObjectNotFound(StorageError, KeyError):
    """No complete object is stored under this digest."""

    def __init__(self, digest: str) -> None:
        super().__init__(digest)
        self.digest = digest

    def __str__(self) -> str:
        return f"no object with digest {self.digest}"


class CorruptObject(StorageError):
    """Bytes that are not intact: a stored object (or its sidecar) that fails verification."""


class DigestMismatch(CorruptObject):
    """The bytes do not hash to the digest they were stored or announced under.

    Raised by ``put`` when the received body does not match the announced digest (nothing is
    published), and by ``get`` when the stored object has been corrupted (the value is never
    returned).
    """

    def __init__(self, expected: str, actual: str) -> None:
        super().__init__(expected, actual)
        self.expected = expected
        self.actual = actual

    def __str__(self) -> str:
        return f"content digest mismatch: expected {self.expected}, got {self.actual}"


class InvalidBody(StorageError, ValueError):
    """An array body that is not a valid array of its dtype and shape."""


class BodySizeMismatch(InvalidBody):
    """An array body's length does not equal ``dtype.itemsize * prod(shape)``."""

    def __init__(self, expected: int, actual: int, *, truncated: bool = False) -> None:
        super().__init__(expected, actual)
        self.expected = expected
        self.actual = actual
        self.truncated = truncated

    def __str__(self) -> str:
        got = f"more than {self.actual}" if self.truncated else str(self.actual)
        return f"body has {got} bytes, dtype and shape need {self.expected}"


class InvalidHeader(StorageError, ValueError):
    """The object header (kind, dtype, shape) is malformed or not storable."""


class PayloadTooLarge(InvalidBody):
    """A staged object larger than its writer may store."""


class StagingNotFound(StorageError):
    """Nothing is staged under this id (never staged, committed or removed already)."""

    def __init__(self, staging_id: str) -> None:
        super().__init__(staging_id)
        self.staging_id = staging_id

    def __str__(self) -> str:
        return f"nothing is staged under {self.staging_id!r}"


class StagingUnsupported(StorageError):
    """This storage (or this object's layout in it) takes no staged objects: upload the
    body instead."""
