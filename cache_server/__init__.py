"""The cache server: HTTP API (FastAPI) over a Redis index and :mod:`storage`.

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
