"""Warming the workers (docs/design/transport.md, Warming the workers): the first
``cached_compute`` with a ``distributed`` client registers a worker plugin that prepares
every worker, present or joining later, for loads while the user's process hashes and
looks up.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Any

import xxhash
from distributed.diagnostics.plugin import WorkerPlugin

from ..transport.client import CacheClient

__all__ = ["WARMED", "WarmLoads", "plugin_name", "warm_cache", "warm_workers"]

logger = logging.getLogger("client_lib")

#: In a worker: cache URL -> seconds its warm-up took, or the error that stopped it.
WARMED: dict[str, float | str] = {}
# In the user's process: the plugin names registered with each client (weak: a closed,
# dropped client takes its entry with it).
_registered: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
_registered_lock = threading.Lock()


class WarmLoads(WorkerPlugin):
    """Prepares a worker for loading from ``cache``: unpickling the plugin imports
    ``client_lib``; ``setup`` then builds the worker's shared :class:`CacheClient` (the
    same one its tasks will unpickle) and opens a connection, in a thread of its own so
    the worker's event loop and tasks never wait for it. Failures are logged, never
    raised: a cold worker still loads, only later."""

    idempotent = True  # registering it again with the scheduler changes nothing

    def __init__(self, cache: CacheClient) -> None:
        self.cache = cache
        self.name = plugin_name(cache)

    def setup(self, worker: Any = None) -> None:
        threading.Thread(target=warm_cache, args=(self.cache,), name="result-cache-warm",
                         daemon=True).start()


def plugin_name(cache: CacheClient) -> str:
    """One plugin per cache a cluster talks to (URL and token; the token only hashed)."""
    identity = repr((cache.url, cache.token, cache.from_config)).encode()
    return f"result-cache-warm-{xxhash.xxh64_hexdigest(identity)}"


def warm_cache(cache: CacheClient) -> None:
    """``cache.warm()``, its seconds or its error recorded in :data:`WARMED`; never raises."""
    start = time.perf_counter()
    try:
        cache.warm()
    except Exception as exc:  # the first load connects (or fails) as it would have
        WARMED[cache.url] = f"{type(exc).__name__}: {exc}"
        logger.warning("result cache: could not warm this worker for %s (%s); its first "
                       "load connects instead", cache.url, exc)
        return
    WARMED[cache.url] = time.perf_counter() - start


def warm_workers(client: Any, cache: CacheClient) -> None:
    """Register :class:`WarmLoads` for ``cache`` with ``client``'s cluster, once per client
    and cache (later calls cost a dictionary lookup). The registration goes in the
    background: the caller goes on materialising and hashing meanwhile, and a failure is
    logged, never raised."""
    if getattr(client, "asynchronous", False):
        return  # its calls are coroutines; nothing here awaits them
    name = plugin_name(cache)
    with _registered_lock:
        names = _registered.setdefault(client, set())
        if name in names:
            return
        names.add(name)
    threading.Thread(target=_register, args=(client, WarmLoads(cache)),
                     name="result-cache-warm-register", daemon=True).start()


def _register(client: Any, plugin: WarmLoads) -> None:
    try:
        client.register_plugin(plugin)
    except Exception as exc:  # e.g. the client closed meanwhile; its workers warm on use
        with _registered_lock:  # a later run tries again
            _registered.get(client, set()).discard(plugin.name)
        logger.warning("result cache: could not register the warm-up plugin %s: %s",
                       plugin.name, exc)
