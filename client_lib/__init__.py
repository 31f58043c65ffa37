"""dask-result-cache, client side: content hashing, graph rewrite and ``cached_compute``.

Runs in the user's process and on Dask workers; talks to the cache server over HTTP
(docs/protocol.md) and never imports ``cache_server`` or ``storage``.
"""

from .compute import cached_compute, task_hashes
from .core import config as _config  # noqa: F401  (registers the result-cache defaults)
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
from .planning import Plan, plan, visualize
from .policy.modes import Candidate
from .routing import disable, enable, enabled
from .transport.client import CacheClient

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
]

from . import routing as _routing  # noqa: E402  (last: everything it routes to is loaded)

_routing.enable_from_config()  # result-cache.enabled: Dask's entry points, no code change
