"""Tasks that must always run, though they have a hash: side effects on worker state or on
shared stores. Their results are never looked up or stored (``GraphHashes.pinned``)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Hashable, Mapping
from typing import Any

from dask._task_spec import GraphNode, NestedContainer, Task

__all__ = ["side_effect_keys"]

Key = Hashable


def side_effect_keys(graph: Mapping[Key, GraphNode], order: list[Key]) -> set[Key]:
    """Tasks that talk to worker state and must always run as they are: P2P barriers
    (special ``Task`` subclasses), the transfers they wait for, the unpacks that wait for
    them, and anything else from ``distributed.shuffle``."""
    barriers = {k for k in order if isinstance(graph[k], Task)
                and not isinstance(graph[k], NestedContainer) and type(graph[k]) is not Task}
    pinned = set(barriers)
    decided: dict[int, bool] = {}  # by id of a function in the graph
    for key in order:
        node = graph[key]
        if key in barriers:
            pinned.update(node.dependencies)
        elif node.dependencies & barriers:
            pinned.add(key)
        elif isinstance(node, Task):
            effect = decided.get(id(node.func))
            if effect is None:
                effect = decided[id(node.func)] = _has_side_effects(node.func)
            if effect:
                pinned.add(key)
    return pinned


def _has_side_effects(func: Any) -> bool:
    """Tasks that talk to worker state or to a shared on-disk store must always run:
    P2P shuffles and rechunks (``distributed.shuffle``) and Dask's partd disk shuffle,
    whose groups write into a store that later tasks read."""
    func = getattr(func, "func", func)  # functools.partial
    if (getattr(func, "__module__", None) or "").startswith("distributed.shuffle"):
        return True
    return func in _disk_shuffle_functions() or type(func) in _disk_shuffle_functions()


def _disk_shuffle_functions() -> frozenset:
    # A graph can only hold these if dask.dataframe was imported; never import it here
    # (that alone costs half a second).
    if "dask.dataframe.dask_expr._shuffle" not in sys.modules:
        return frozenset()
    return _load_disk_shuffle_functions()


@functools.cache
def _load_disk_shuffle_functions() -> frozenset:
    from dask.dataframe import shuffle
    from dask.dataframe.dask_expr._shuffle import DiskShuffle

    return frozenset({shuffle.barrier, shuffle.collect, shuffle.maybe_buffered_partd,
                      DiskShuffle._shuffle_group})
