"""Task hashes: what a task computes, as 16 bytes. docs/design/hashing.md, The task hash.

- :mod:`.encoder`: values to bytes, with :meth:`~.Encoder.sub_digest` for nested digests;
- :mod:`.registry`: the open registry of value handlers (lazy per library; users add
  their own types with :func:`register`);
- :mod:`.stdlib_values`, :mod:`.numpy_values`, :mod:`.pandas_values` (with
  :mod:`.arrow_values`), :mod:`.external`, :mod:`.xarray_values`:
  the handlers, one small function per kind of value;
- :mod:`.fingerprints`: functions, classes and modules by their code;
- :mod:`.provenance`: library versions, local builds, compiled modules, file stamps;
- :mod:`.graph`: the Merkle hash over the graph; :mod:`.side_effects`: tasks that must
  always run; :mod:`.user_versions`: ``cache_version``;
- :mod:`.recipes`: what each hash was made of, by name, and the structural slots
  (for ``why``).
"""

from . import (  # noqa: F401 (handlers)
    external,
    numpy_values,
    pandas_values,
    stdlib_values,
    xarray_values,
)
from .graph import KEY_VERSION, GraphHashes, hash_graph, value_digest
from .registry import register
from .user_versions import cache_version

__all__ = ["KEY_VERSION", "GraphHashes", "cache_version", "hash_graph", "register",
           "value_digest"]
