"""The protocol's bounds (docs/protocol.md), each defined once: the client stays within
them and the server (``cache_server`` imports this module) enforces them."""

from __future__ import annotations

__all__ = ["LEASE_BATCH", "LOOKUP_BATCH", "MAX_BATCH_BYTES", "MAX_BATCH_HEADER_BYTES",
           "MAX_BATCH_ITEMS", "MAX_BATCH_OBJECT_BYTES", "MAX_COMPUTE_SECONDS",
           "MAX_LEASE_SECONDS", "MAX_RECIPE_BATCH", "MAX_RECIPE_BYTES",
           "MAX_RUN_BYTES", "MAX_RUN_TASKS", "MAX_TTL_SECONDS", "MIN_LEASE_SECONDS"]

#: The largest ``X-Result-Compute-Seconds`` (about 116 days): a finite bound, so that sums
#: of recorded seconds (seconds saved) stay finite.
MAX_COMPUTE_SECONDS = 1e7
#: The longest entry lifetime (``X-Result-TTL``, ``cache_ttl``): ten years.
MAX_TTL_SECONDS = 10 * 365 * 86_400.0
#: A lease's TTL, in seconds.
MIN_LEASE_SECONDS, MAX_LEASE_SECONDS = 1.0, 3600.0
#: Hashes per lease request the client sends: the server's default ``max_lease_hashes``.
LEASE_BATCH = 100_000
#: Hashes per packed lookup the client sends (the server's ``max_lookup_hashes`` is more).
LOOKUP_BATCH = 200_000
#: One ``POST /v1/objects/batch``: items, bytes in all, bytes per object (below the size
#: of direct writes: larger ones stream through ``PUT``), bytes per item header.
MAX_BATCH_ITEMS = 1000
MAX_BATCH_BYTES = 64 * 2**20
MAX_BATCH_OBJECT_BYTES = 16 * 2**20 - 1
MAX_BATCH_HEADER_BYTES = 16 * 2**10
#: A run summary's task list; larger runs send counts by label.
MAX_RUN_TASKS = 5000
#: Recipes (docs/design/hashing.md, Recipes and why): per ``POST /v1/recipes`` or
#: ``POST /v1/recipes/previous``, and the JSON bytes of one recipe.
MAX_RECIPE_BATCH = 5000
MAX_RECIPE_BYTES = 8192
#: A run summary as the server stores it (its default ``max_run_bytes``): a client whose
#: task list would be larger sends counts by label instead.
MAX_RUN_BYTES = 4 * 2**20
