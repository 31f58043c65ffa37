"""The worker preload: ``dask worker --preload client_lib.worker`` (docs/design/transport.md,
Warming the workers).

A fresh worker's first cache task used to import ``client_lib`` while it was unpickled, and
its first request built httpx's transport, both on the critical path of a fresh cluster's
first run. As a ``distributed`` preload this module does both while the worker starts:
:func:`dask_setup` imports what the cache's tasks run (loads, stores, leases, the codec) before
the worker takes its first task, and builds the connection pool in a thread of its own
(for ``result-cache.url`` when configured, else httpx's transport imports only).

Importing ``client_lib`` calls :func:`add_worker_preload`: the ``distributed.worker.preload``
config then names this module, so the workers of a ``LocalCluster`` made in this process
afterwards (whose nannies read that config) preload it with no code change. Config
``result-cache.preload-workers: false`` leaves Dask's config alone.

This module imports only ``dask.config`` at its top: the package imports it at every start,
the server too. Failures in the preload are logged, never raised: a worker that could not
warm loads later, as it would have without the preload.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import dask.config

from .core.config import setting

__all__ = ["PRELOAD", "add_preload", "add_worker_preload", "dask_setup"]

logger = logging.getLogger("client_lib")

#: This module, as a ``distributed.worker.preload`` entry.
PRELOAD = __name__


def add_worker_preload() -> None:
    """Name this module in ``distributed.worker.preload`` (once) unless config
    ``result-cache.preload-workers`` is false. A worker preloading it twice would only
    import twice what is imported already; the check keeps the config readable."""
    if setting("preload-workers") in (False, 0, "0", "false", "False", "no"):
        return
    preload = dask.config.get("distributed.worker.preload", []) or []
    if PRELOAD != preload and PRELOAD not in (preload if isinstance(preload, list) else []):
        add_preload("distributed.worker", PRELOAD)


def add_preload(section: str, module: str) -> dask.config.set:
    """Append ``module`` to the ``<section>.preload`` list of Dask's config (``section``
    is ``distributed.worker`` or ``distributed.client``), with an empty argv when the
    argvs are given one list per preload. The returned ``dask.config.set`` puts the
    previous values back on ``__exit__``."""
    preload = dask.config.get(f"{section}.preload", []) or []
    preload = [preload] if isinstance(preload, str) else list(preload)  # one, as distributed
    argv = list(dask.config.get(f"{section}.preload-argv", []) or [])
    update: dict[str, Any] = {f"{section}.preload": [*preload, module]}
    if argv and not isinstance(argv[0], str):  # one argv per preload: ours takes none
        update[f"{section}.preload-argv"] = [*argv, []]
    return dask.config.set(update)


def dask_setup(worker: Any = None) -> None:
    """A preload's entry: import the cache's worker-side modules now (the first task then
    unpickles without importing them) and warm the connection pool in the background."""
    try:
        from .execution import leases, store, store_queue, tasks, warm  # noqa: F401
        from .transport.client import CacheClient
        from .wire import codec  # noqa: F401
    except Exception as exc:  # a broken install fails its first cache task, not the worker
        logger.warning("result cache: the worker preload could not import client_lib: %s", exc)
        return
    url = setting("url")
    if url:
        cache = CacheClient.shared(url, setting("token"), from_config=True)
        target: Any = warm.warm_cache
        args: tuple[Any, ...] = (cache,)
    else:  # the URL comes with the first task: import httpx's transport meanwhile
        target, args = _import_transport, ()
    threading.Thread(target=target, args=args, name="result-cache-preload", daemon=True).start()


def _import_transport() -> None:
    try:
        import httpx

        httpx.HTTPTransport().close()  # imports httpcore and h11, as the first client does
    except Exception as exc:  # the first request imports them instead
        logger.warning("result cache: the worker preload could not import httpx: %s", exc)
