"""The task digests of the ``distributed`` futures the cache produced in this process.

A future made by ``CachedClient.submit``/``map``, ``CachedClient.persist`` or
``cached_persist`` holds a result whose task digest (``GraphHashes.digests``: the Merkle
digest, before any signing key keys the published hash) is known; a later call or graph
that takes that future is hashed with it (instead of being volatile). An entry is valid only
while its client still holds that very future state: a key released and reused later may
name another computation.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from dask._task_spec import GraphNode

__all__ = ["external_keys", "has_known", "known_hashes", "remember"]

Key = Hashable

_lock = threading.Lock()
# key -> (weak client, its future state for key, task digest)
_known: dict[Key, tuple[weakref.ref, Any, bytes]] = {}


def remember(client: Any, key: Key, digest: bytes) -> None:
    """Record that ``client``'s future ``key`` holds the result of the task ``digest``."""
    state = client.futures.get(key)
    if state is None:
        return
    with _lock:
        _known[key] = (weakref.ref(client), state, digest)
        if len(_known) > 10_000 and len(_known) & 1023 == 0:
            for stale in [k for k in _known if _valid(k) is None]:
                del _known[stale]


def _valid(key: Key) -> bytes | None:
    entry = _known.get(key)
    if entry is None:
        return None
    client_ref, state, digest = entry
    client = client_ref()
    if client is None or client.futures.get(key) is not state:
        return None
    return digest


def has_known() -> bool:
    """Whether any future was recorded (else nothing needs looking up)."""
    return bool(_known)


def known_hashes(keys: Iterable[Key]) -> dict[Key, bytes]:
    """The task digests of those ``keys`` that are live futures made through the cache."""
    if not _known:
        return {}
    with _lock:
        return {k: h for k in keys if (h := _valid(k)) is not None}


def external_keys(graph: Mapping[Key, GraphNode]) -> set[Key]:
    """Keys the graph's tasks depend on that it does not compute (futures' data)."""
    return {d for node in graph.values() for d in node.dependencies if d not in graph}
