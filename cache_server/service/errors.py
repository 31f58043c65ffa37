"""The errors of the cache service: what went wrong, never how to answer it.

They carry no HTTP status. The API maps each class to a status in one table
(:mod:`cache_server.api.errors`); the offline maintenance commands never see HTTP at all.
Storage errors (:mod:`storage.errors`) pass through the service unchanged.
"""

from __future__ import annotations

import errno

__all__ = [
    "BodyTimeout",
    "BodyTooLarge",
    "Busy",
    "EntryNotFound",
    "IndexUnavailable",
    "InvalidLease",
    "InvalidUpload",
    "NoRoom",
    "RunNotFound",
    "ServiceError",
    "TooManyLeases",
    "storage_full",
]


class ServiceError(Exception):
    """Base class of the errors the service raises on purpose; ``str()`` is the message."""


class InvalidUpload(ServiceError):
    """An upload's metadata is malformed (digest, compute seconds, label, type name)."""


class InvalidLease(ServiceError):
    """A lease request the service refuses (too many hashes, estimates for others)."""


class TooManyLeases(ServiceError):
    """Granting a lease request would pass the bound on outstanding leases, in all
    (``max_leases``) or the requesting client's (``max_client_leases``); nothing was leased.
    ``retry_after``: seconds until leases may have ended (they expire within their TTL)."""

    def __init__(self, message: str, retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class EntryNotFound(ServiceError):
    """No entry for this task hash (or its object was found missing or corrupt)."""

    def __init__(self, task_hash: str) -> None:
        super().__init__(f"no entry for task hash {task_hash}")
        self.task_hash = task_hash


class RunNotFound(ServiceError):
    """No run with this id is recorded (or it was trimmed as one of the oldest)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run {run_id}")
        self.run_id = run_id


class BodyTooLarge(ServiceError):
    """An upload's body exceeds ``max_body_bytes``."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"body exceeds max_body_bytes ({limit} bytes)")
        self.limit = limit


class BodyTimeout(ServiceError):
    """An upload sent nothing for ``body_timeout`` seconds; it was aborted."""

    def __init__(self, timeout: float) -> None:
        super().__init__(f"the body stalled: nothing received for {timeout:g} s "
                         "(body_timeout); upload aborted")


class Busy(ServiceError):
    """The server is at a limit that frees itself (uploads in flight, a concurrent write of
    the same object); ``retry_after`` seconds is a fair time to come back."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class NoRoom(ServiceError):
    """No room for an object: larger than ``max_bytes``, the cache is full of pinned
    entries, or the disk itself is full."""


class IndexUnavailable(ServiceError):
    """The index (Redis) does not answer."""


#: ``OSError`` numbers that mean "the disk is full" (or a per-file or per-user limit hit).
_NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def storage_full(exc: BaseException) -> bool:
    """Whether ``exc`` is the file system saying there is no room."""
    return isinstance(exc, OSError) and exc.errno in _NO_SPACE_ERRNOS
