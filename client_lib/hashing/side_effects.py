"""Tasks that must always run, though they have a hash: side effects on worker state, on
shared stores or outside the process, and scratch stores with the tasks that use them.
Their results are never looked up or stored (``GraphHashes.pinned``); which tasks are
side effects and which create scratch stores is :mod:`.task_kinds`' decision."""

from __future__ import annotations

import functools
import sys
from collections.abc import Hashable, Mapping
from typing import Any

from dask._task_spec import Alias, DataNode, GraphNode, NestedContainer, Task, TaskRef

from .task_kinds import TaskKinds

__all__ = ["pinned_keys"]

Key = Hashable
_PLAIN_NODES = frozenset({Task, Alias, DataNode})  # never a P2P barrier (Task subclasses)


def pinned_keys(graph: Mapping[Key, GraphNode], order: list[Key],
                kinds: TaskKinds) -> set[Key]:
    """Tasks that must always run as they are, though they have a hash:

    - P2P barriers (special ``Task`` subclasses), the transfers they wait for, the unpacks
      that wait for them, and anything else from ``distributed.shuffle``;
    - side effects (:meth:`TaskKinds.side_effect`) and everything downstream of them: a
      load of a downstream task would skip the effect; and the task that made a store's
      target (:meth:`TaskKinds.write_target`): a loaded copy would be written into;
    - scratch stores (a disk shuffle's partd) with every task that touches them and every
      task between two that do (a shuffle's barrier): the store exists in this run only.
      What is read out of it is hashed by what went in, so downstream stays cacheable.
    """
    barriers = {k for k in order if type(graph[k]) not in _PLAIN_NODES
                and isinstance(graph[k], Task) and not isinstance(graph[k], NestedContainer)}
    pinned = set(barriers)
    effects: set[Key] = set()
    scratch: set[Key] = set()
    # By id of a function in the graph: (it, its side effect, always runs, makes scratch).
    by_function: dict[int, tuple[Any, bool, bool, bool]] = {}
    for key in order:
        node = graph[key]
        deps = node.dependencies
        if barriers and key in barriers:
            pinned.update(deps)
        elif barriers and deps & barriers:
            pinned.add(key)
        elif type(node) is not Task and (
                not isinstance(node, Task) or isinstance(node, NestedContainer)):
            if effects and deps & effects:  # a container of side effects' results
                effects.add(key)
        else:
            func = node.func
            kind = by_function.get(id(func))
            if kind is None or kind[0] is not func:
                # Each question only where the one before it said no, as per task before.
                writes = kinds.side_effect(func)
                always = not writes and _has_side_effects(func)
                kind = by_function[id(func)] = (func, writes, always,
                                                not writes and not always
                                                and kinds.scratch(func))
            if effects and deps & effects or kind[1] or kinds.writes_in_arguments(
                    node.args, node.kwargs):
                effects.add(key)
                target = _target_key(node, kinds)
                if target is not None:
                    pinned.add(target)
            elif kind[2]:
                pinned.add(key)
            elif kind[3]:
                scratch.add(key)
    return pinned | effects | _scratch_regions(graph, order, scratch)


def _target_key(node: Task, kinds: TaskKinds) -> Key | None:
    """The task that made the object a writer writes into, if a task of the graph did."""
    index = kinds.write_target(node.func)
    if index is None or index >= len(node.args):
        return None
    target = node.args[index]
    if isinstance(target, TaskRef):
        return target.key
    return target.target if isinstance(target, Alias) else None


def _scratch_regions(graph: Mapping[Key, GraphNode], order: list[Key],
                     roots: set[Key]) -> set[Key]:
    """``roots`` (tasks creating scratch stores), the tasks that take one as an input,
    and the tasks downstream of one of those and upstream of another."""
    if not roots:
        return set()
    touching = {k for k in order if graph[k].dependencies & roots}
    after: set[Key] = set()  # downstream of a task touching a store
    for key in order:
        if any(d in touching or d in after for d in graph[key].dependencies):
            after.add(key)
    before: set[Key] = set()  # upstream of a task touching a store
    for key in reversed(order):
        if key in touching or key in before:
            before.update(graph[key].dependencies)
    return roots | touching | (after & before)


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
