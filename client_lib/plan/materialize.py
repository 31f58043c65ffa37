"""Getting a flat task graph out of Dask collections.

``materialize`` does what ``dask.base.compute`` does up to the scheduler call, so the keys
and the finalisation tasks are exactly Dask's. ``unfuse`` then expands fused tasks
(``_execute_subgraph``, from low-level linear fusion and from blockwise fusion) into one
graph node per operation, so an intermediate shared by two branches is hashed (and can
be cached) on its own however Dask happened to fuse each branch. docs/design/hashing.md,
The task hash (Unfusing).

Dask's optimisation drops the annotations of the layers it fuses (blockwise fusion of
array and bag layers). The cache's own annotations (``cache``, ``cache_ttl``,
``cache_version``) are read from the collections' layers before optimising and put back
on the unfused tasks they were made for, by the key Dask gave each task inside the fused
one; scheduling annotations are restored by :mod:`client_lib.plan.annotations`. DataFrames
have no layers to read them from: :mod:`client_lib.plan.frame_annotations` refuses them
where the frame is built (installed when this module is imported).
"""

from __future__ import annotations

import gc
from collections.abc import Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dask._task_spec import (
    Alias,
    DataNode,
    GraphNode,
    Task,
    TaskRef,
    _execute_subgraph,
    convert_legacy_graph,
)
from dask.base import collections_to_expr
from dask.core import flatten

from . import frame_annotations
from .scheduler_hook import plain_dask

__all__ = ["CACHE_ANNOTATIONS", "Materialized", "Prebuilt", "frozen_gc", "materialize",
           "paused_gc", "toposort", "unfuse"]

Key = Hashable
CACHE_ANNOTATIONS = ("cache", "cache_ttl", "cache_version")
frame_annotations.install()


@dataclass
class Materialized:
    """A computation ready to hash: flat graph, output keys, annotations by key."""

    graph: dict[Key, GraphNode]
    keys: list[Key]
    annotations: dict[str, dict[Key, Any]] = field(default_factory=dict)
    # Where each unfused key came from (inner key -> outer fused key), for annotations.
    origin: dict[Key, Key] = field(default_factory=dict)
    # The output keys per collection, nested as ``__dask_keys__`` (persist rebuilds from it).
    nested_keys: list[Any] = field(default_factory=list)
    # The cache's own annotations of the unoptimised layers, by key (see the module
    # docstring): ``unfuse`` puts them back.
    layer_annotations: dict[Key, dict[str, Any]] = field(default_factory=dict)

    def annotation(self, name: str, key: Key, default: Any = None) -> Any:
        by_key = self.annotations.get(name)
        if not by_key:
            return default
        if key in by_key:
            return by_key[key]
        outer = self.origin.get(key)
        while outer is not None:
            if outer in by_key:
                return by_key[outer]
            outer = self.origin.get(outer)
        return default


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside the block. Materialising, unfusing, hashing and
    rewriting a graph allocate a few objects per task and free almost none, so Python's
    collector runs again and again over the whole (growing) graph: a third of those
    phases' time on a 10k-task array (docs/architecture.md, What flows where). Nothing is
    lost: the collection the block skipped happens after it."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextmanager
def frozen_gc() -> Iterator[None]:
    """While the graph runs, the garbage collector leaves alone every object that existed
    when it started (``gc.freeze``, undone after): the user's graph and data and the run's
    plan live through the run, and each full collection walked all of them again, ~100 ms
    of a 1 s run of a 10k-task fan-in, as much as all of the run's planning (BENCHMARKS.md,
    section 19). Objects made during the run are collected as usual; a cycle among the
    older ones that dies meanwhile waits for the end of the run. Skipped when something
    else has frozen objects (a server that forks), since unfreezing would undo that."""
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    # First the young generations: the cycles the planning left (it ran paused) go now, as
    # they would have soon after it; frozen, a user's dropped Future in one stayed held on
    # the scheduler (tests/client/test_futures.py, released when the user drops them).
    gc.collect(1)
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _delayed_only(collections: Iterable[Any]) -> bool:
    from dask.delayed import Delayed

    return all(isinstance(c, Delayed) for c in collections)


class Prebuilt:
    """A computation Dask already built: the expression ``dask.compute`` hands its scheduler
    (``FinalizeCompute(...).optimize()``) and the flat output keys it asks for.
    :meth:`outputs` are collections for ``cached_compute``, one per key, that materialise
    to exactly that graph (``client_lib.routing``: the scheduler hook starts where
    ``dask.compute`` stopped)."""

    def __init__(self, expr: Any, keys: list[Key]) -> None:
        self.expr = expr
        self.keys = keys

    def outputs(self) -> list[PrebuiltOutput]:
        return [PrebuiltOutput(self, i) for i in range(len(self.keys))]


class PrebuiltOutput:
    """Output ``index`` of a :class:`Prebuilt`: a dask collection only to
    ``unpack_collections``; :func:`materialize` reads the expression instead."""

    def __init__(self, prebuilt: Prebuilt, index: int) -> None:
        self.prebuilt = prebuilt
        self.index = index

    def __dask_graph__(self) -> dict:
        return {}  # not None: a collection; no layers: no annotations to restore

    def __dask_tokenize__(self) -> tuple:
        return ("result-cache-prebuilt", id(self.prebuilt), self.index)


def materialize(collections: list[Any], optimize_graph: bool = True,
                finalize: bool = True) -> Materialized:
    """The graph ``dask.compute(*collections)`` would run, converted to the task spec;
    with ``finalize=False`` the graph ``dask.persist`` would run (every output key of
    every collection, no finalisation). The outputs of one :class:`Prebuilt`, in order,
    give its expression's graph as built (``optimize_graph`` was applied then).

    Delayed-only computations skip Dask's low-level optimisation (culling a wide delayed
    graph is quadratic); the rewrite culls anyway by walking back from the outputs.
    Computations Dask starts meanwhile (a dataframe's optimisation may read statistics)
    are not routed through the cache (:func:`~client_lib.plan.scheduler_hook.plain_dask`).
    """
    from dask._expr import FinalizeCompute

    with plain_dask():
        prebuilt = _prebuilt(collections)
        if prebuilt is not None:  # whether Dask optimised it or not, the layers tell
            return _materialize_expr(prebuilt.expr,
                                     _cache_annotations(_expression_graphs(prebuilt.expr)))
        if _delayed_only(collections):
            optimize_graph = False
        expr = collections_to_expr(collections, optimize_graph)
        expr = FinalizeCompute(expr).optimize() if finalize else expr.optimize()
        graphs = [c.__dask_graph__() for c in collections if optimize_graph
                  # a dataframe is an expression: its graph exists only once optimised
                  and not type(c).__module__.startswith("dask.dataframe")
                  and hasattr(c, "__dask_graph__")]
        return _materialize_expr(expr, _cache_annotations(graphs))


def _prebuilt(collections: list[Any]) -> Prebuilt | None:
    if not collections or not isinstance(collections[0], PrebuiltOutput):
        return None
    prebuilt = collections[0].prebuilt
    if [(c.prebuilt, c.index) if isinstance(c, PrebuiltOutput) else None
            for c in collections] != [(prebuilt, i) for i in range(len(prebuilt.keys))]:
        raise ValueError("the outputs of a prebuilt computation go together, in order")
    return prebuilt


def _materialize_expr(expr: Any, layer_annotations: dict[Key, dict[str, Any]]
                      ) -> Materialized:
    nested = expr.__dask_keys__()
    keys = list(flatten(nested))
    graph = expr.__dask_graph__()
    annotations = dict(expr.__dask_annotations__() or {})
    graph = convert_legacy_graph(dict(graph) if not isinstance(graph, dict) else graph)
    return Materialized(graph=graph, keys=keys, annotations=annotations, nested_keys=nested,
                        layer_annotations=layer_annotations)


def _expression_graphs(expr: Any) -> list[Any]:
    """The high-level graphs of the arrays, bags and delayed objects behind an expression
    ``dask.compute`` built, unoptimised: each sits in an ``HLGExpr`` (or the finalising or
    grouping expression around one) under the expression or its sequence."""
    from dask.highlevelgraph import HighLevelGraph

    graphs = []
    for node in (expr, *getattr(expr, "operands", ())):
        for _ in range(4):  # HLGFinalizeCompute holds the HLGExpr that holds the graph
            if "dsk" not in getattr(type(node), "_parameters", ()):
                break
            node = node.operand("dsk")
        if isinstance(node, HighLevelGraph):
            graphs.append(node)
    return graphs


def _cache_annotations(graphs: Iterable[Any]) -> dict[Key, dict[str, Any]]:
    """The ``cache``, ``cache_ttl`` and ``cache_version`` annotations of the layers of
    high-level graphs (arrays, bags, delayed), by key, callables called with the key as
    Dask does. Cheap without them: the layers are read, not their keys."""
    found: dict[Key, dict[str, Any]] = {}
    for graph in graphs:
        for layer in getattr(graph, "layers", {}).values():
            given = getattr(layer, "annotations", None) or {}
            own = {name: given[name] for name in CACHE_ANNOTATIONS if name in given}
            if own:
                for key in layer.get_output_keys():
                    found[key] = {name: value(key) if callable(value) else value
                                  for name, value in own.items()}
    return found


def _inner_name(outer: Key, inner: Key) -> Key:
    """A graph-unique key for an unfused inner task (inner keys repeat across chunks)."""
    if isinstance(outer, tuple) and isinstance(inner, str):
        return (f"{inner}~{outer[0]}", *outer[1:])
    if isinstance(outer, tuple) and isinstance(inner, tuple):
        return (f"{inner[0]}~{outer[0]}", *inner[1:], *outer[1:])
    if isinstance(inner, tuple):
        return (f"{inner[0]}~{outer}", *inner[1:])
    return f"{inner}~{outer}"


def unfuse(m: Materialized) -> Materialized:
    """Expand every ``_execute_subgraph`` task (recursively) into plain graph nodes.

    The fused task's key stays the key of its output node; inner keys get fresh
    graph-unique names; inner placeholders are bound to the fused task's dependencies.
    """
    out: dict[Key, GraphNode] = {}
    origin: dict[Key, Key] = dict(m.origin)
    dropped = m.layer_annotations
    annotations = m.annotations
    if dropped:
        annotations = {name: dict(by_key) for name, by_key in annotations.items()}
    for key, node in m.graph.items():
        _expand(key, node, out, origin, key, dropped, annotations)
    return Materialized(graph=out, keys=m.keys, annotations=annotations, origin=origin,
                        nested_keys=m.nested_keys)


def _expand(key: Key, node: GraphNode, out: dict, origin: dict, dask_key: Key,
            dropped: Mapping[Key, dict[str, Any]], annotations: dict) -> None:
    """``dask_key``: the key Dask gave this node (its key inside a fused task)."""
    if dropped:
        for name, value in dropped.get(dask_key, {}).items():
            annotations.setdefault(name, {}).setdefault(key, value)
    inner_task = _reuse_wrapped(node)
    if inner_task is not None:  # the task it wraps, under this key
        node = inner_task.substitute({}, key=key)
    if not (isinstance(node, Task) and node.func is _execute_subgraph and not node.kwargs):
        out[key] = node
        return
    inner, outkey, inkeys, *deps = node.args
    subs: dict[Key, Any] = {}
    for placeholder, dep in zip(inkeys, deps, strict=True):
        if isinstance(dep, TaskRef):
            subs[placeholder] = dep.key
        elif isinstance(dep, Alias):
            subs[placeholder] = dep.target
        elif isinstance(dep, GraphNode):  # an inlined task or data: keep it inline
            subs[placeholder] = dep
        else:  # a literal bound to the placeholder
            subs[placeholder] = DataNode(None, dep)
    for ik in inner:
        if ik == outkey:
            subs[ik] = key
        elif ik not in subs:
            subs[ik] = _inner_name(key, ik)
    for ik, inode in inner.items():
        if ik in inkeys and ik not in (outkey,):
            continue  # placeholders are bound above, never run
        new_key = subs[ik]
        if isinstance(inode, Alias):
            target = subs.get(inode.target, inode.target)
            new_node: GraphNode = (target.substitute({}, key=new_key) if isinstance(
                target, GraphNode) else Alias(new_key, target))
        else:
            new_node = inode.substitute(subs, key=new_key)
        if new_key != key:
            origin[new_key] = key
        _expand(new_key, new_node, out, origin, ik, dropped, annotations)


def _reuse_wrapped(node: GraphNode) -> Task | None:
    """The task inside a ``ProhibitReuse`` copy (``_identity(task)`` under a fresh key,
    which Dask makes when a collection is an argument of ``dask.delayed``), else None."""
    if (isinstance(node, Task) and len(node.args) == 1 and not node.kwargs
            and getattr(node.func, "__qualname__", "") == "ProhibitReuse._identity"
            and isinstance(node.args[0], Task)):
        return node.args[0]
    return None


def toposort(graph: Mapping[Key, GraphNode], outputs: Iterable[Key]) -> list[Key]:
    """Keys reachable from ``outputs``, dependencies first. Missing keys are skipped
    (they are external: futures held by a distributed client)."""
    order: list[Key] = []
    done: set[Key] = set()
    for root in outputs:
        if root in done or root not in graph:
            continue
        stack: list[tuple[Key, Iterator | None]] = [(root, None)]
        entered = {root}
        while stack:
            key, it = stack[-1]
            if it is None:
                it = iter(graph[key].dependencies)
                stack[-1] = (key, it)
            for dep in it:
                if dep in done or dep in entered or dep not in graph:
                    if dep in entered and dep not in done:
                        raise ValueError(f"cycle in task graph at {dep!r}")
                    continue
                entered.add(dep)
                stack.append((dep, None))
                break
            else:
                stack.pop()
                done.add(key)
                order.append(key)
    return order

