"""The cache's domain operations, free of HTTP: what the routes and the offline maintenance
commands (``gc``, ``reindex``) call.

- :mod:`.cache`: :class:`ResultCache`, lookup, store, load, pin, delete, evict, statistics.
- :mod:`.upload`: :class:`Upload` (one upload's validated metadata), :func:`manifest_for`.
- :mod:`.body`: :class:`UploadBody`, a bounded upload body read in pieces.
- :mod:`.locks`: :class:`DigestLocks`, one lock per content digest.
- :mod:`.maintenance`: ``gc`` and ``reindex`` of a data directory and its index.
- :mod:`.errors`: the service's errors (no HTTP status: the API maps them), all
  derived from :class:`ServiceError`.
"""

from cache_server.service.cache import ResultCache
from cache_server.service.errors import ServiceError
from cache_server.service.upload import Upload

__all__ = ["ResultCache", "ServiceError", "Upload"]
