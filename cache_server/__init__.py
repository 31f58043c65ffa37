"""The cache server: HTTP API (FastAPI) over a Redis index and :mod:`storage`.

Layers, each importing only those below it (tests/server/test_layering.py):

- :mod:`.api`: the HTTP API (routes, tokens, the error-to-status table, middleware).
- :mod:`.service`: the domain operations (:class:`~.service.cache.ResultCache`, gc,
  reindex) and their errors; no HTTP.
- :mod:`.index`: Redis (the index, its client, eviction rank, the embedded Redis).
- :mod:`storage` (a package of its own): objects on disk by content digest.
- :mod:`.cli`: the ``dask-cache`` commands, beside the layers.

Shared by them: :mod:`.settings`, :mod:`.models` (manifests, stats, events, API bodies),
:mod:`.metrics`, :mod:`.runtime` (``open_cache``: lock, Redis, storage, service),
:mod:`.data_lock`; :mod:`.launch` runs a server as a subprocess; :mod:`.examples` is
what ``dask-cache demo`` runs.

``create_app`` builds the app, ``start_server`` runs ``dask-cache serve`` as a subprocess.
Names are imported lazily so that ``cache_server.launch`` stays cheap to import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["RunningServer", "Settings", "create_app", "start_server"]

_SOURCES = {
    "RunningServer": "cache_server.launch",
    "start_server": "cache_server.launch",
    "Settings": "cache_server.settings",
    "create_app": "cache_server.api.app",
}

if TYPE_CHECKING:
    from cache_server.api.app import create_app
    from cache_server.launch import RunningServer, start_server
    from cache_server.settings import Settings


def __getattr__(name: str) -> Any:
    if name in _SOURCES:
        import importlib

        return getattr(importlib.import_module(_SOURCES[name]), name)
    raise AttributeError(f"module 'cache_server' has no attribute {name!r}")
