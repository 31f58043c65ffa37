"""The body of ``POST /v1/objects/batch`` (docs/protocol.md, "Batched stores"): items back
to back, each a 4-byte big-endian header length, the item's JSON header, its bytes."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = ["MEDIA_TYPE", "pack"]

MEDIA_TYPE = "application/x-result-batch"


def pack(items: Iterable[tuple[dict[str, Any], bytes | memoryview]]) -> bytes:
    """One batch body of ``(header, body)`` items; each header names its ``nbytes``."""
    parts: list[bytes | memoryview] = []
    for meta, body in items:
        header = json.dumps(meta, separators=(",", ":")).encode()
        parts += [len(header).to_bytes(4, "big"), header, body]
    return b"".join(parts)
