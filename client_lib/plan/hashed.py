"""A computation ready for the cache: its graph as Dask made it, unfused, in dependency
order and hashed (docs/design/hashing.md, The task hash). Every entry point starts here:
``cached_compute`` and ``cached_persist`` (through the run), ``plan``, ``open_cached``,
``task_hashes``."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from ..core.signing import SigningKey
from ..hashing import GraphHashes, hash_graph
from . import annotations
from .known import external_keys, has_known, known_hashes
from .materialize import Materialized, materialize, toposort, unfuse
from .rewrite import cacheable_keys

__all__ = ["Hashed", "hash_collections", "hash_materialized", "restore_annotations"]

Key = Hashable


@dataclass
class Hashed:
    """``fused``: the graph as Dask made it (what a run without the cache executes);
    ``m``: unfused, one node per operation; ``order``: its keys, dependencies first."""

    fused: Materialized
    m: Materialized
    order: list[Key]
    hashes: GraphHashes

    def cacheable(self) -> dict[Key, str]:
        """The keys that may be looked up and stored, with their task hashes."""
        return cacheable_keys(self.m, self.hashes)


def hash_materialized(fused: Materialized, namespace: str, signing_key: SigningKey | None
                      ) -> Hashed:
    """Unfuse, order and hash a materialised graph (hashes keyed by ``signing_key``)."""
    m = unfuse(fused)
    order = toposort(m.graph, m.keys)
    # Futures the cache made (CachedClient, persist) count by their tasks' digests.
    known = known_hashes(external_keys(m.graph)) if has_known() else None
    return Hashed(fused, m, order, hash_graph(m.graph, order, namespace, m, signing_key,
                                              known))


def hash_collections(collections: list, *, namespace: str, signing_key: SigningKey | None,
                     optimize_graph: bool = True, finalize: bool = True) -> Hashed:
    """Materialise (as ``dask.compute`` would, or ``dask.persist`` with ``finalize=False``)
    and hash ``collections``."""
    return hash_materialized(materialize(collections, optimize_graph, finalize=finalize),
                             namespace, signing_key)


def _annotated(collections: list) -> bool:
    """Whether any layer of the collections' graphs carries annotations (cheap: layers,
    not keys). Dataframes are expressions, whose graph only optimising makes: skipped."""
    for collection in collections:
        if type(collection).__module__.startswith("dask.dataframe"):
            continue
        graph = collection.__dask_graph__() if hasattr(collection, "__dask_graph__") else None
        if any(getattr(layer, "annotations", None)
               for layer in getattr(graph, "layers", {}).values()):
            return True
    return False


def restore_annotations(hashed: Hashed, collections: list, namespace: str,
                        signing_key: SigningKey | None, optimize_graph: bool,
                        finalize: bool) -> None:
    """Put back the scheduling annotations Dask's optimisation dropped (by task hash,
    :mod:`.annotations`): hashes the unoptimised graph too, only then."""
    if not (optimize_graph and _annotated(collections)):
        return
    if annotations.has_scheduling(hashed.m):
        return  # Dask kept them
    plain = materialize(collections, optimize_graph=False, finalize=finalize)
    if annotations.has_scheduling(plain):
        unoptimised = hash_materialized(plain, namespace, signing_key)
        annotations.restore(hashed.m, hashed.hashes.hashes, unoptimised.m,
                            unoptimised.hashes.hashes)
