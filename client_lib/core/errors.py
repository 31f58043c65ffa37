"""The exceptions of ``client_lib``: one hierarchy, in one module."""

from __future__ import annotations

__all__ = [
    "AnnotatedFrame",
    "CacheAccessDenied",
    "CacheEntryCorrupt",
    "CacheEntryUnavailable",
    "CacheEntryUntrusted",
    "CacheProtocolError",
    "CacheServerLost",
    "CacheUnavailable",
    "ResultCacheError",
    "VolatileValue",
    "access_hint",
]


class ResultCacheError(Exception):
    """Base class of every error raised by ``client_lib``."""


class CacheUnavailable(ResultCacheError):
    """The cache server could not be reached, or answered with a server error."""


class CacheAccessDenied(ResultCacheError):
    """The cache server refused our token: missing or unknown (401), or its scope does not
    allow the request (403, e.g. a read token storing a result)."""

    def __init__(self, status: int, message: str, hint: str = "") -> None:
        super().__init__(status, message, hint)
        self.status = status
        self.message = message
        self.hint = hint  # what to do, the same for every request

    def __str__(self) -> str:
        return self.message


class CacheProtocolError(ResultCacheError):
    """The cache server answered something that does not follow the protocol."""


class CacheEntryUnavailable(ResultCacheError):
    """A load task found its entry missing or corrupt.

    Raised on the worker by a load task; ``cached_compute`` catches it, stops trusting
    ``task_hash`` and recomputes. Picklable, so it crosses process boundaries.
    """

    def __init__(self, task_hash: str, reason: str) -> None:
        super().__init__(task_hash, reason)
        self.task_hash = task_hash
        self.reason = reason

    def __str__(self) -> str:
        return f"cache entry {self.task_hash} unavailable: {self.reason}"


class CacheEntryUntrusted(CacheEntryUnavailable):
    """A load task found its entry without a valid signature for ``result-cache.signing-key``
    (docs/protocol.md, "Signed results"): nothing was unpickled, the entry is left alone,
    and ``cached_compute`` recomputes the task and counts it as ``untrusted``."""


class CacheServerLost(CacheEntryUnavailable):
    """A load task could not reach the cache server (it answered the lookup, then went
    away or failed): ``cached_compute`` stops using the server for the rest of the run and
    computes everything once, without loads or stores."""


class CacheEntryCorrupt(CacheEntryUnavailable):
    """A downloaded object does not match its digest: its bytes were damaged on the way
    (the server verifies what it reads). The value is never returned; the entry is left to
    the server."""

    def __init__(self, task_hash: str, expected: str, actual: str) -> None:
        super().__init__(task_hash, f"downloaded bytes hash to {actual}, not {expected}")
        self.args = (task_hash, expected, actual)  # rebuilt as such when unpickled
        self.expected = expected
        self.actual = actual


class VolatileValue(ResultCacheError):
    """A value cannot be hashed deterministically, so its task must not be cached."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class AnnotatedFrame(ResultCacheError, ValueError):
    """A ``dask.dataframe`` collection was built under ``dask.annotate(cache=...)``,
    ``cache_ttl=...`` or ``cache_version=...``, which dask-expr would ignore
    (:mod:`client_lib.plan.frame_annotations`)."""


def access_hint(status: int, token_given: bool, set_token: str) -> str:
    """What to do about a 401 or 403, the one wording the client and the CLI share;
    ``set_token`` says how the caller sets a token (a setting, a flag)."""
    if status == 401 and not token_given:
        return f"the server requires a token: {set_token}"
    if status == 401:
        return f"the server does not accept this token ({set_token})"
    return "the token's scope does not allow this (a write token is needed to store)"
