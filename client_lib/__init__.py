"""dask-result-cache, client side: content hashing, graph rewrite and ``cached_compute``.

Runs in the user's process and on Dask workers; talks to the cache server over HTTP
(docs/protocol.md) and never imports ``cache_server`` or ``storage``.

The public names load on first use (PEP 562): importing the package registers the
``result-cache`` config defaults and nothing else, so ``cache_server``, which takes the
protocol's facts from :mod:`client_lib.wire`, does not import Dask's collections, the
hasher and the HTTP client at every start (about half a second each).
"""

import importlib
import sys
import types
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from .core import config as _config  # noqa: F401  (registers the result-cache defaults)
from .core.config import setting as _setting

if _TYPE_CHECKING:
    from .compute import cached_compute, task_hashes
    from .core.errors import (
        CacheAccessDenied,
        CacheEntryCorrupt,
        CacheEntryUnavailable,
        CacheEntryUntrusted,
        CacheProtocolError,
        CacheUnavailable,
        ResultCacheError,
        VolatileValue,
    )
    from .futures import CachedClient
    from .hashing import KEY_VERSION, cache_version, register
    from .lazy import NotCached, open_cached
    from .persist import cached_persist
    from .plan.report import CacheReport, last_report
    from .planning import Plan, plan, visualize, why
    from .policy.modes import Candidate
    from .routing import disable, enable, enabled
    from .transport.client import CacheClient

#: Where each public name lives.
_PUBLIC = {
    "KEY_VERSION": ".hashing",
    "CacheAccessDenied": ".core.errors",
    "CacheClient": ".transport.client",
    "CacheEntryCorrupt": ".core.errors",
    "CachedClient": ".futures",
    "CacheEntryUnavailable": ".core.errors",
    "CacheEntryUntrusted": ".core.errors",
    "CacheProtocolError": ".core.errors",
    "CacheReport": ".plan.report",
    "CacheUnavailable": ".core.errors",
    "Candidate": ".policy.modes",
    "Plan": ".planning",
    "NotCached": ".lazy",
    "ResultCacheError": ".core.errors",
    "VolatileValue": ".core.errors",
    "cache_version": ".hashing",
    "cached_compute": ".compute",
    "cached_persist": ".persist",
    "disable": ".routing",
    "enable": ".routing",
    "enabled": ".routing",
    "last_report": ".plan.report",
    "open_cached": ".lazy",
    "plan": ".planning",
    "register": ".hashing",
    "task_hashes": ".compute",
    "visualize": ".planning",
    "why": ".planning",
}

__all__ = [
    "KEY_VERSION",
    "CacheAccessDenied",
    "CacheClient",
    "CacheEntryCorrupt",
    "CachedClient",
    "CacheEntryUnavailable",
    "CacheEntryUntrusted",
    "CacheProtocolError",
    "CacheReport",
    "CacheUnavailable",
    "Candidate",
    "Plan",
    "NotCached",
    "ResultCacheError",
    "VolatileValue",
    "cache_version",
    "cached_compute",
    "cached_persist",
    "disable",
    "enable",
    "enabled",
    "last_report",
    "open_cached",
    "plan",
    "register",
    "task_hashes",
    "visualize",
    "why",
]


def __getattr__(name: str) -> _Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'client_lib' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})


class _Package(types.ModuleType):
    """This package, whose public function ``plan`` shares its name with the sub-package
    ``client_lib.plan``: importing the sub-package (as ``sys.modules`` entry, which every
    import uses) does not make it the package's attribute ``plan``."""

    def __setattr__(self, name: str, value: _Any) -> None:
        if name in _PUBLIC and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


# Workers of a LocalCluster made in this process import and warm the cache as they start.
importlib.import_module(".worker", __name__).add_worker_preload()

# result-cache.enabled: Dask's entry points through the cache, no code change (a value
# that is neither yes nor no warns there).
if _setting("enabled") not in (None, False):
    importlib.import_module(".routing", __name__).enable_from_config()
