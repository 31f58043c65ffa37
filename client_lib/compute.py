"""``cached_compute``: a drop-in for ``dask.compute`` that loads what the cache holds.

The steps are those of a :class:`~client_lib.plan.run.Run` (docs/architecture.md, What
flows where): materialise, unfuse, hash, one batch lookup, rewrite, run on the user's
scheduler, finalise. A cache outage never fails the computation: it warns once and
computes without the cache.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from dask.base import unpack_collections

from .core.signing import configured_key
from .plan.hashed import hash_collections
from .plan.run import Run
from .plan.settings import RunSettings, namespace_of
from .transport.client import CacheClient

__all__ = ["cached_compute", "task_hashes"]

Key = Hashable


def cached_compute(
    *args: Any,
    cache: str | CacheClient | None = None,
    policy: Any = None,
    namespace: str | None = None,
    scheduler: Any = None,
    explain: bool = False,
    traverse: bool = True,
    optimize_graph: bool = True,
    refresh: bool | None = None,
    **compute_kwargs: Any,
) -> tuple:
    """Compute dask collections like ``dask.compute``, loading cached results.

    Returns exactly what ``dask.compute(*args, ...)`` returns. ``cache`` is a URL or a
    :class:`CacheClient` (default: config ``result-cache.url``); ``policy`` says which
    results to store (``"auto"``, ``"all"``, ``"outputs"``, ``"none"`` or a callable,
    default config ``result-cache.policy``); ``namespace`` separates projects (default
    config ``result-cache.namespace``). ``refresh=True`` (default config
    ``result-cache.refresh``) recomputes everything it would have loaded and overwrites
    those entries. ``scheduler`` and ``compute_kwargs`` go to the scheduler as in
    ``dask.compute``; a ``distributed.Client`` (passed, or the default client) runs the
    loads and stores on its workers. ``explain=True`` prints what the cache did;
    :func:`client_lib.last_report` returns it.

    Config ``result-cache.mode = "read-only"`` loads but never stores, as does a process
    with ``result-cache.trusted-keys`` and no private ``signing-key``. Tasks this run
    computes are leased on the server, so another run that needs one of them meanwhile
    waits for it and loads it instead of computing it too (docs/protocol.md, "Leases").
    """
    collections, repack = unpack_collections(*args, traverse=traverse)
    if not collections:
        return args
    settings = RunSettings.read(cache, policy, namespace, refresh)
    return repack(Run(collections, settings, scheduler, compute_kwargs=compute_kwargs,
                      optimize_graph=optimize_graph, explain=explain).compute())


def task_hashes(*args: Any, namespace: str | None = None, traverse: bool = True,
                optimize_graph: bool = True) -> dict[Key, str | None]:
    """The task hash of every task ``cached_compute(*args)`` would consider, by Dask key
    (``None`` for volatile tasks), keyed by this process's ``result-cache.signing-key``
    when it is an HMAC secret (with Ed25519 keys: the public hashes every reader computes).
    Talks to no server; for debugging misses."""
    collections, _ = unpack_collections(*args, traverse=traverse)
    if not collections:
        return {}
    hashed = hash_collections(collections, namespace=namespace_of(namespace),
                              signing_key=configured_key(), optimize_graph=optimize_graph)
    return {k: hashed.hashes.hashes.get(k) for k in hashed.order}
