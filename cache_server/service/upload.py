"""What one upload is (:class:`Upload`), and the manifest of a stored task result.

An :class:`Upload` is validated when it is built, so the service never starts reading a
body whose metadata it would refuse.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from cache_server.models import Manifest
from cache_server.service.errors import InvalidUpload
from client_lib.wire.bounds import MAX_COMPUTE_SECONDS, MAX_TTL_SECONDS
from storage import ObjectHeader, Sidecar, TaskReference, is_digest

__all__ = ["MAX_LABEL_CHARS", "MAX_SIGNATURE_CHARS", "MAX_TYPE_CHARS", "TYPE_NAME", "Upload",
           "header_safe", "manifest_for"]

MAX_LABEL_CHARS = 1024
MAX_TYPE_CHARS = 512
MAX_SIGNATURE_CHARS = 256
#: A client's signature is opaque to the server: visible ASCII, no spaces or commas.
_SIGNATURE = re.compile(rf"[!-+\--~]{{1,{MAX_SIGNATURE_CHARS}}}")
#: A value's type as clients name it, ``module.qualname`` (``<locals>``, ``<lambda>``):
#: what may go back into an ``X-Result-Type`` header as it is.
TYPE_NAME = re.compile(rf"[A-Za-z0-9_.<>]{{1,{MAX_TYPE_CHARS}}}")


@dataclass(frozen=True)
class Upload:
    """The validated metadata of one upload (``PUT /v1/objects/{hash}``); raises
    :class:`InvalidUpload` naming the first bad field."""

    task_hash: str
    header: ObjectHeader
    digest: str
    compute_seconds: float
    label: str
    type_name: str | None
    content_length: int | None
    signature: str | None = None
    ttl: float | None = None  # seconds the entry lives (X-Result-TTL); None: no expiry
    overwrite: bool = False  # replace an indexed entry (a refresh)
    run: str | None = None  # the run that stores it (X-Result-Run): its store event names it

    def __post_init__(self) -> None:
        if self.ttl is not None and not (math.isfinite(self.ttl)
                                         and 0 < self.ttl <= MAX_TTL_SECONDS):
            raise InvalidUpload(f"X-Result-TTL must be seconds in (0, {MAX_TTL_SECONDS:.0f}]")
        if not is_digest(self.digest):
            raise InvalidUpload("X-Result-Digest must be 32 lowercase hex characters")
        if self.run is not None and not is_digest(self.run):
            raise InvalidUpload("X-Result-Run must be a run id: 32 lowercase hex characters")
        seconds = self.compute_seconds
        if not (math.isfinite(seconds) and 0 <= seconds <= MAX_COMPUTE_SECONDS):
            raise InvalidUpload("X-Result-Compute-Seconds must be a finite float from 0 to "
                                f"{MAX_COMPUTE_SECONDS:g}")
        if self.signature is not None and not _SIGNATURE.fullmatch(self.signature):
            raise InvalidUpload(f"X-Result-Signature must be 1 to {MAX_SIGNATURE_CHARS} "
                                "visible ASCII characters without commas")
        if len(self.label) > MAX_LABEL_CHARS:
            raise InvalidUpload(f"X-Result-Label is longer than {MAX_LABEL_CHARS} characters")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in self.label):
            raise InvalidUpload("X-Result-Label must not hold control characters")
        if self.type_name is not None and not TYPE_NAME.fullmatch(self.type_name):
            raise InvalidUpload(f"X-Result-Type must be 1 to {MAX_TYPE_CHARS} characters of "
                                f"A-Z a-z 0-9 _ . < > (module.qualname), not "
                                f"{self.type_name[:80]!r}")

    def expires(self, created: float) -> float | None:
        """When an entry of this upload created at ``created`` expires (None: never)."""
        return None if self.ttl is None else created + self.ttl

    @property
    def expected_nbytes(self) -> int | None:
        """The body's size if known in advance: from dtype and shape, else the length the
        client announced, else None (a chunked pickle)."""
        size = self.header.expected_nbytes
        return self.content_length if size is None else size


def header_safe(value: str | None) -> bool:
    """Whether a stored field may go into a response header as it is: visible ASCII only
    (an entry stored before fields were checked may hold anything; such a field is left
    out of the headers rather than copied)."""
    return bool(value) and all(0x21 <= ord(c) <= 0x7E for c in value)  # type: ignore[union-attr]


def manifest_for(sidecar: Sidecar, task: TaskReference) -> Manifest:
    """The manifest of one task stored as the object ``sidecar`` describes (the digest
    covers kind, dtype and shape, so the sidecar's header is the upload's)."""
    header = sidecar.header
    return Manifest(
        hash=task.task_hash,
        digest=sidecar.digest,
        kind=header.kind,
        storage=sidecar.storage,  # type: ignore[arg-type]
        nbytes=sidecar.nbytes,
        dtype=header.dtype if header.is_array else None,
        shape=list(header.shape) if header.shape is not None else None,
        type=sidecar.type,
        compute_seconds=task.compute_seconds,
        label=task.label,
        created=task.created,
        last_access=task.created,
        pinned=task.pinned,
        signature=task.signature,
        expires=task.expires,
    )
