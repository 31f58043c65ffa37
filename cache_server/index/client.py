"""Async Redis clients that pack commands with hiredis.

redis-py's asyncio connections pack every argument in Python (~1 µs each), which dominates a
100k-hash ``SMISMEMBER`` (about 120 ms of packing against ~60 ms in all with hiredis on this
machine). The synchronous client already uses hiredis's packer; we give the async
connection classes the same one, and call it directly: redis-py's wrapper re-walks every
argument in Python first (~20 ms of a 100k-hash lookup's ~40 ms of packing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import redis.asyncio as aioredis
from redis.connection import HiredisRespSerializer
from redis.utils import HIREDIS_AVAILABLE

if HIREDIS_AVAILABLE:
    import hiredis

__all__ = ["Prepacked", "connect", "pack_fixed_width"]


@dataclass(frozen=True)
class Prepacked:
    """A whole command already in Redis's wire format (RESP); sent as it is by
    ``redis.execute_command(name, prepacked)``, through redis-py's usual retries,
    error handling and response parsing."""

    wire: bytes


def pack_fixed_width(name: str, key: str, items: bytes, width: int) -> Prepacked:
    """``name key item item ...`` for ``items`` of ``width`` bytes each, back to back.

    Built with one numpy copy: a 100k-hash ``SMISMEMBER`` packs in ~5 ms this way, against
    ~20 ms for hiredis packing 100k separate strings (and ~15 ms more to cut them out).
    """
    n, rest = divmod(len(items), width)
    if rest or not n:
        raise ValueError(f"{len(items)} bytes are not a whole number of {width}-byte items")
    head = f"*{n + 2}\r\n${len(name)}\r\n{name}\r\n${len(key.encode())}\r\n".encode()
    prefix = f"${width}\r\n".encode()
    rows = np.empty((n, len(prefix) + width + 2), np.uint8)
    rows[:, : len(prefix)] = np.frombuffer(prefix, np.uint8)
    rows[:, len(prefix) : len(prefix) + width] = np.frombuffer(items, np.uint8).reshape(n, width)
    rows[:, -2:] = np.frombuffer(b"\r\n", np.uint8)
    return Prepacked(head + key.encode() + b"\r\n" + rows.tobytes())


class _HiredisPacking:
    _serializer = HiredisRespSerializer() if HIREDIS_AVAILABLE else None

    def pack_command(self, *args: Any) -> list[bytes]:
        if len(args) == 2 and isinstance(args[1], Prepacked):
            return [args[1].wire]
        if self._serializer is None:
            return super().pack_command(*args)  # type: ignore[misc]
        # Plain str/bytes/number arguments (every large command we send) go straight to
        # hiredis; multi-word command names and buffers take redis-py's path.
        if isinstance(args[0], str) and " " not in args[0]:
            try:
                return [hiredis.pack_command(args)]
            except TypeError:
                pass
        return self._serializer.pack(*args)


_PACKING_CLASSES: dict[type, type] = {}


def _with_hiredis_packing(connection_class: type) -> type:
    if connection_class not in _PACKING_CLASSES:
        name = f"Hiredis{connection_class.__name__}"
        _PACKING_CLASSES[connection_class] = type(name, (_HiredisPacking, connection_class), {})
    return _PACKING_CLASSES[connection_class]


def connect(url: str) -> aioredis.Redis:
    """A client for ``url`` (``redis://``, ``rediss://`` or ``unix://``) that returns strings.

    Connections are made lazily, on first use.
    """
    client = aioredis.from_url(url, decode_responses=True)
    pool = client.connection_pool
    pool.connection_class = _with_hiredis_packing(pool.connection_class)
    return client
