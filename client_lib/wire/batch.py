"""The body of ``POST /v1/objects/batch`` (docs/protocol.md, "Batched stores"): items back
to back, each a 4-byte big-endian header length, the item's JSON header (naming its
``nbytes``), its bytes. :func:`pack` for the client, :func:`unpack` for the server."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .bounds import MAX_BATCH_HEADER_BYTES, MAX_BATCH_ITEMS, MAX_BATCH_OBJECT_BYTES

__all__ = ["MEDIA_TYPE", "BatchFormatError", "pack", "unpack"]

MEDIA_TYPE = "application/x-result-batch"


class BatchFormatError(ValueError):
    """A batch body that is not items framed as the protocol says, or breaks its bounds."""


def pack(items: Iterable[tuple[dict[str, Any], bytes | memoryview]]) -> bytes:
    """One batch body of ``(header, body)`` items; each header names its ``nbytes``."""
    parts: list[bytes | memoryview] = []
    for meta, body in items:
        header = json.dumps(meta, separators=(",", ":")).encode()
        parts += [len(header).to_bytes(4, "big"), header, body]
    return b"".join(parts)


def unpack(body: bytes | bytearray | memoryview) -> list[tuple[Any, memoryview]]:
    """The ``(header, bytes)`` items of a batch body; every bound is checked before the
    bytes it covers are used. A header is whatever JSON it holds (the caller validates
    its fields). Each item's bytes are a view of ``body``, not a copy (a server holds a
    batch once). Raises :class:`BatchFormatError`."""
    items: list[tuple[Any, memoryview]] = []
    view = memoryview(body)
    pos = 0
    while pos < len(view):
        if len(items) == MAX_BATCH_ITEMS:
            raise BatchFormatError(f"more than {MAX_BATCH_ITEMS} objects in one batch")
        if pos + 4 > len(view):
            raise BatchFormatError("batch body ends inside an item's header length")
        size = int.from_bytes(view[pos:pos + 4], "big")
        if size > MAX_BATCH_HEADER_BYTES:
            raise BatchFormatError(f"batch item header longer than {MAX_BATCH_HEADER_BYTES} "
                                   "bytes")
        start = pos + 4 + size
        if start > len(view):
            raise BatchFormatError("batch body ends inside an item's header")
        try:
            meta = json.loads(bytes(view[pos + 4:start]))
            nbytes = int(meta["nbytes"]) if isinstance(meta, dict) else -1
        except (ValueError, KeyError, TypeError) as exc:
            raise BatchFormatError(f"unreadable batch item header: {exc}") from None
        if not 0 <= nbytes <= MAX_BATCH_OBJECT_BYTES:
            raise BatchFormatError(f"a batched object must have 0 to {MAX_BATCH_OBJECT_BYTES} "
                                   "bytes (PUT larger ones)")
        if start + nbytes > len(view):
            raise BatchFormatError("batch body ends inside an object")
        items.append((meta, view[start:start + nbytes]))
        pos = start + nbytes
    return items
