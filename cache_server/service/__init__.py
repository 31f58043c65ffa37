"""The cache's domain operations, free of HTTP: what the routes and the offline maintenance
commands (``gc``, ``reindex``) call.

- :mod:`.cache`: :class:`ResultCache`, the one object callers use: lookup, pin, listings,
  statistics, events, runs; it hands stores, reads and removals to the modules below.
- :mod:`.writes`: the write path (what happens on a ``PUT``, batch stores, overwrites).
- :mod:`.reads`: the read path (``GET`` streams, ``HEAD``, direct-read locations, corrupt
  objects found on read).
- :mod:`.capacity`: the size cap (making room, eviction).
- :mod:`.removal`: removing entries and their objects in the one safe order, expiry.
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
