"""Merkle hashes of graph nodes: content, never key names. DESIGN.md section 2.

``task_hash = xxh3_128(KEY_VERSION, namespace, function fingerprint, arguments with every
dependency replaced by its task hash)``. A ``DataNode`` hashes its value, an ``Alias``
is its target's hash, a nested ``Task`` argument hashes as the standalone task it would be
if Dask had not inlined it (so inlined and separate forms agree), containers are walked.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import xxhash
from dask._task_spec import (
    Alias,
    DataNode,
    Dict,
    GraphNode,
    List,
    NestedContainer,
    Set,
    Task,
    TaskRef,
    Tuple,
)
from dask.utils import funcname

from .errors import VolatileValue
from .fingerprint import Fingerprinter
from .normalize import ValueEncoder

__all__ = ["KEY_VERSION", "GraphHashes", "hash_graph"]

# Bump whenever hashing or the value codecs change, so old entries are never misread.
KEY_VERSION = 2

Key = Hashable
_xxh3 = xxhash.xxh3_128_digest
_CONTAINERS = {List: b"[", Tuple: b"(", Set: b"<", Dict: b"{"}


@dataclass
class GraphHashes:
    """The outcome of hashing a graph.

    ``hashes`` holds the 32-hex task hash of every hashable node; ``volatile`` maps the
    keys that must not be cached to the reason; ``pinned`` holds tasks that have a hash
    but must always run (side effects, e.g. P2P shuffle transfers); ``labels`` are
    readable names for the entries.
    """

    hashes: dict[Key, str] = field(default_factory=dict)
    volatile: dict[Key, str] = field(default_factory=dict)
    pinned: set[Key] = field(default_factory=set)
    labels: dict[Key, str] = field(default_factory=dict)


class _VolatileDependency(Exception):
    pass


class _Hasher:
    def __init__(self, graph: Mapping[Key, GraphNode], namespace: str,
                 annotations: Any) -> None:
        self.graph = graph
        self.annotations = annotations
        self.enc = ValueEncoder()
        self.fp = Fingerprinter(self.enc)
        self.enc.encode_graph_node = self._encode_graph_node
        self.prefix = b"drc%d\0%s\0" % (KEY_VERSION, namespace.encode("utf-8"))
        self.digests: dict[Key, bytes] = {}
        self.result = GraphHashes()

    def run(self, order: list[Key]) -> GraphHashes:
        result = self.result
        for key in order:
            node = self.graph[key]
            try:
                digest = self._node_digest(key, node)
            except _VolatileDependency:
                result.volatile[key] = "depends on a volatile task"
                continue
            except VolatileValue as exc:
                result.volatile[key] = exc.reason
                continue
            self.digests[key] = digest
            result.hashes[key] = digest.hex()
        return result

    def _node_digest(self, key: Key, node: GraphNode) -> bytes:
        if isinstance(node, Alias):
            return self._dep_digest(node.target)
        if self.annotations is not None and self.annotations.annotation(
                "cache", key, True) is False:
            raise VolatileValue("annotated cache=False")
        self.enc.out = [self.prefix]
        if isinstance(node, DataNode):
            self.enc.out.append(b"V")
            self.enc.encode(node.value)
        elif isinstance(node, Task):
            version = None
            if self.annotations is not None:
                version = self.annotations.annotation("cache_version", key)
            self._task_body(node, version)
            self.result.labels[key] = _label(node)
        else:
            raise VolatileValue(f"unknown graph node type {type(node).__name__}")
        return _xxh3(b"".join(self.enc.out))

    def _task_body(self, task: Task, version: Any = None) -> None:
        enc = self.enc
        out = enc.out
        if isinstance(task, NestedContainer):
            self._container(task)
            return
        out.append(b"T")
        if version is not None:  # a manual version replaces the function's code
            out.append(b"V")
            enc.encode((getattr(task.func, "__module__", None), funcname(task.func),
                        str(version)))
        else:
            enc.encode_callable(task.func)
        if type(task) is not Task:
            enc.encode(type(task).__module__ + "." + type(task).__qualname__)
        out.append(b"(%d:" % len(task.args))
        for arg in task.args:
            enc.encode(arg)
        if task.kwargs:
            out.append(b"{%d:" % len(task.kwargs))
            for name in sorted(task.kwargs):
                enc.encode(name)
                enc.encode(task.kwargs[name])

    def _container(self, node: NestedContainer) -> None:
        enc = self.enc
        tag = _CONTAINERS.get(type(node), b"?")
        if type(node) is Set:
            enc.out.append(tag + b"%d:" % len(node.args))
            enc.out.extend(sorted(enc.digest_of(a) for a in node.args))
            return
        enc.out.append(tag + b"%d:" % len(node.args))
        for arg in node.args:
            enc.encode(arg)

    def _dep_digest(self, key: Key) -> bytes:
        digest = self.digests.get(key)
        if digest is not None:
            return digest
        if key in self.result.volatile:
            raise _VolatileDependency(key)
        if key not in self.graph:
            raise VolatileValue(f"depends on {key!r}, which is not in the graph "
                                "(data held by a distributed Future)")
        raise RuntimeError(f"{key!r} was not hashed before its dependents")

    def _encode_graph_node(self, obj: Any) -> bool:
        if isinstance(obj, TaskRef):
            self.enc.out.append(b"R" + self._dep_digest(obj.key))
        elif isinstance(obj, Alias):
            self.enc.out.append(b"R" + self._dep_digest(obj.target))
        elif isinstance(obj, NestedContainer):
            self._container(obj)
        elif isinstance(obj, Task):
            # Hash an inlined task exactly as if it were its own graph node.
            saved = self.enc.out
            self.enc.out = [self.prefix]
            try:
                self._task_body(obj)
                digest = _xxh3(b"".join(self.enc.out))
            finally:
                self.enc.out = saved
            saved.append(b"R" + digest)
        elif isinstance(obj, DataNode):
            self.enc.encode(obj.value)
        else:
            return False
        return True


def hash_graph(graph: Mapping[Key, GraphNode], order: list[Key], namespace: str,
               annotations: Any = None) -> GraphHashes:
    """Hash the nodes of ``graph`` named in ``order`` (dependencies first).

    ``annotations`` is anything with an ``annotation(name, key, default)`` method (a
    :class:`~client_lib.graph.Materialized`): ``cache=False`` makes a task volatile and
    ``cache_version=...`` replaces its function's code in the hash.
    """
    result = _Hasher(graph, namespace, annotations).run(order)
    result.pinned = _side_effect_keys(graph, order)
    return result


def _side_effect_keys(graph: Mapping[Key, GraphNode], order: list[Key]) -> set[Key]:
    """Tasks that talk to worker state and must always run as they are: P2P barriers
    (special ``Task`` subclasses), the transfers they wait for, the unpacks that wait for
    them, and anything else from ``distributed.shuffle``."""
    barriers = {k for k in order if isinstance(graph[k], Task)
                and not isinstance(graph[k], NestedContainer) and type(graph[k]) is not Task}
    pinned = set(barriers)
    for key in order:
        node = graph[key]
        if key in barriers:
            pinned.update(node.dependencies)
        elif node.dependencies & barriers or (
                isinstance(node, Task) and _has_side_effects(node.func)):
            pinned.add(key)
    return pinned


def _label(task: Task) -> str:
    try:
        return funcname(task.func)
    except Exception:
        return type(task.func).__name__


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
