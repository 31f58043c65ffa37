"""Merkle hashes of graph nodes: content, never key names. docs/design/hashing.md, The task
hash.

``task_hash = xxh3_128(KEY_VERSION, namespace, function fingerprint, arguments with every
dependency replaced by its task hash)``, and pandas' options where they differ from the
defaults (``future.infer_string=False`` changes what every task that builds a frame
computes). A ``DataNode`` hashes its value, an ``Alias``
is its target's hash, a nested ``Task`` argument hashes as the standalone task it would be
if Dask had not inlined it (so inlined and separate forms agree), containers are walked.
A task whose hash cannot be computed is *volatile*, and so is everything downstream, as
is a task whose function is impure or opens a handle onto outside state
(:mod:`.task_kinds`).

With a signing key (docs/protocol.md, "Signed results") the published hash of every task
is keyed, ``HMAC-SHA256(K_hash, task_hash)[:16]``, so that nobody without the key can
compute it; the Merkle chain underneath (and the namespace in it) stays as above.
"""

from __future__ import annotations

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
from dask.core import flatten
from dask.utils import funcname

from ..core.errors import VolatileValue
from ..core.signing import SigningKey
from .encoder import Encoder
from .fingerprints import Fingerprinter
from .pandas_values import options_in_effect
from .registry import HANDLERS, Dispatch
from .side_effects import pinned_keys
from .task_kinds import TaskKinds

__all__ = ["KEY_VERSION", "GraphHashes", "GraphHasher", "HashedData", "hash_graph",
           "remember_reopened"]

# Bump whenever hashing or the value codecs change, so old entries are never misread
# (and re-record tests/client/golden_hashes.json).
KEY_VERSION = 4

Key = Hashable
_CONTAINERS = {List: b"[", Tuple: b"(", Set: b"<", Dict: b"{"}
#: Arguments encoded as they come: cheap, or one task's own (a dependency).
_DIRECT = frozenset({TaskRef, Alias, int, float, bool, str, bytes, type(None)})
_xxh3 = xxhash.xxh3_128_digest


@dataclass
class GraphHashes:
    """The outcome of hashing a graph.

    ``hashes`` holds the 32-hex task hash of every hashable node; ``volatile`` maps the
    keys that must not be cached to the reason; ``pinned`` holds tasks that have a hash
    but must always run (side effects, e.g. P2P shuffle transfers); ``labels`` are
    readable names for the entries; ``cost_keys`` name what a task's cost is learned
    under (its label and its function's code fingerprint: two functions of one name keep
    their own estimates, client_lib/policy/costs.py); ``digests`` the Merkle digests the
    hashes are made from (equal to them unless a signing key keys the published hashes).
    """

    hashes: dict[Key, str] = field(default_factory=dict)
    volatile: dict[Key, str] = field(default_factory=dict)
    pinned: set[Key] = field(default_factory=set)
    labels: dict[Key, str] = field(default_factory=dict)
    cost_keys: dict[Key, str] = field(default_factory=dict)
    digests: dict[Key, bytes] = field(default_factory=dict)


class _VolatileDependency(Exception):
    pass


# open_cached's load tasks (issue 27, case 10): the functions that load an entry, given the
# cache and the published task hash as their first two arguments, and the digest of each
# task whose entry this process reopened (published hash -> digest). Such a task hashes as
# the task it reopens, never by the cache client it holds.
_loaders: set[Any] = set()
_reopened: dict[str, bytes] = {}


def remember_reopened(loader: Any, task_hash: str, digest: bytes) -> None:
    """Tasks ``loader(cache, task_hash, ...)`` hash as the task whose digest is ``digest``."""
    _loaders.add(loader)
    _reopened[task_hash] = digest


def _reopened_digest(task: Task) -> bytes | None:
    if not _reopened or type(task) is not Task or len(task.args) < 2:
        return None
    try:
        if task.func not in _loaders:
            return None
    except TypeError:  # an unhashable callable
        return None
    task_hash = task.args[1]
    return _reopened.get(task_hash) if isinstance(task_hash, str) else None


class HashedData(DataNode):
    """A task's result held as data, with the digest of the task that made it
    (``GraphHashes.digests``): what ``cached_persist`` puts in the collections it rebuilds
    on a local scheduler, so that a computation on them hashes as one on the collections
    they persisted, and loads what that stored (issue 27, case 9). A pickle is a plain
    ``DataNode`` again, hashed by its value (a miss, never a wrong hit)."""

    __slots__ = ("digest",)

    def __init__(self, key: Key, value: Any, digest: bytes) -> None:
        super().__init__(key, value)
        self.digest = digest

    def copy(self) -> HashedData:
        return HashedData(self.key, self.value, self.digest)

    def substitute(self, subs: Mapping, key: Key | None = None) -> HashedData:
        # Under another key inside a fused task (unfuse renames it): the same task's data.
        if key is not None and key != self.key:
            return HashedData(key, self.value, self.digest)
        return self


class GraphHasher:
    """Hashes the nodes of one graph, dependencies first. One per pass; not thread safe.

    ``annotations`` is anything with an ``annotation(name, key, default)`` method (a
    :class:`~client_lib.plan.materialize.Materialized`); ``handlers`` the value registry to start
    from (graph nodes inside arguments are handled here, in front of it).
    """

    def __init__(self, graph: Mapping[Key, GraphNode], namespace: str, annotations: Any,
                 handlers: Dispatch = HANDLERS, signing_key: SigningKey | None = None) -> None:
        self.graph = graph
        self.annotations = annotations
        # Which of the two annotations the hash reads exist at all (most graphs have
        # neither): then no task pays for looking them up.
        names = getattr(annotations, "annotations", None)
        self._reads_cache = annotations is not None and (names is None or "cache" in names)
        self._reads_version = annotations is not None and (
            names is None or "cache_version" in names)
        self.signing_key = signing_key
        self.prefix = b"drc%d\0%s\0" % (KEY_VERSION, namespace.encode("utf-8"))
        options = options_in_effect()  # pandas' non-default options: every task reads them
        if options:
            self.prefix += b"pandas%r\0" % (options,)
        self.digests: dict[Key, bytes] = {}
        self.result = GraphHashes()
        self.kinds = TaskKinds()
        self._in_progress: set[Key] = set()
        self._labels: dict[int, str] = {}  # by id of a function in the graph
        self._cost_keys: dict[int, str] = {}  # likewise
        self._heads: dict[int, tuple[Any, bytes]] = {}  # see _task_body
        in_graph = {
            TaskRef: self._ref,
            Alias: self._alias,
            NestedContainer: self._nested,
            Task: self._inlined_task,
            DataNode: self._data,
            HashedData: self._data,
        }
        array_module = sys.modules.get("dask.array.core")  # no arrays unless imported
        if array_module is not None:
            in_graph[array_module.Array] = self._collection
        self.enc = Encoder(handlers.extended(in_graph), Fingerprinter)

    def run(self, order: list[Key]) -> GraphHashes:
        result = self.result
        # Members of a function's family (plain graph tasks of a function already hashed
        # once, so its head is known) whose arguments are dependencies and small numbers
        # go through _member_digest: the same bytes, without the encoder.
        members = not (self._reads_cache or self._reads_version)
        graph, digests, heads, keyed = self.graph, self.digests, self._heads, self.signing_key
        for key in order:
            node = graph[key]
            if members and type(node) is Task:
                head = heads.get(id(node.func))
                if head is not None and head[0] is node.func and not node.kwargs:
                    digest = self._member_digest(head[1], node.args)
                    if digest is not None:
                        digests[key] = digest
                        result.hashes[key] = (digest.hex() if keyed is None
                                              else keyed.keyed_hash(digest))
                        result.labels[key] = self._label(node.func)
                        result.cost_keys[key] = self._cost_key(node.func)
                        continue
            try:
                digest = self._node_digest(key, node)
            except _VolatileDependency:
                result.volatile[key] = "depends on a volatile task"
                continue
            except VolatileValue as exc:
                result.volatile[key] = exc.reason
                continue
            except Exception as exc:  # a value no handler foresaw: never the user's failure
                result.volatile[key] = f"cannot be hashed ({type(exc).__name__}: {exc})"
                continue
            self.digests[key] = digest
            result.hashes[key] = (digest.hex() if self.signing_key is None
                                  else self.signing_key.keyed_hash(digest))
        return result

    def _member_digest(self, head: bytes, args: tuple) -> bytes | None:
        """The digest :meth:`_node_digest` gives a plain task with this cached ``head`` and
        these arguments, when each is a dependency already hashed, an int or ``None``
        (the encoder's bytes for them, written here); ``None`` for any other argument."""
        parts = [self.prefix, head, b"(%d:" % len(args)]
        digests = self.digests
        for arg in args:
            kind = type(arg)
            if kind is TaskRef:
                digest = digests.get(arg.key)
                if digest is None:
                    return None  # volatile, or not hashed yet: the general path says
                parts.append(b"R" + digest)
            elif kind is int:
                parts.append(b"i%d;" % arg)
            elif arg is None:
                parts.append(b"N")
            else:
                return None
        return _xxh3(b"".join(parts))

    def _node_digest(self, key: Key, node: GraphNode) -> bytes:
        if isinstance(node, Alias):
            return self._dep_digest(node.target)
        if type(node) is HashedData:
            return node.digest
        if isinstance(node, Task) and (reopened := _reopened_digest(node)) is not None:
            return reopened
        if self._reads_cache and self.annotations.annotation("cache", key, True) is False:
            raise VolatileValue("annotated cache=False")
        enc = self.enc
        with enc.sub_digest(self.prefix) as sub:
            if isinstance(node, DataNode):
                enc.write_raw(b"V")
                enc.encode(node.value)
            elif isinstance(node, Task):
                version = None
                if self._reads_version:
                    version = self.annotations.annotation("cache_version", key)
                self._task_body(node, version, top=True)
                self.result.labels[key] = self._label(node.func)
                self.result.cost_keys[key] = self._cost_key(node.func)
            else:
                raise VolatileValue(f"unknown graph node type {type(node).__name__}")
        return sub.value

    def _task_body(self, task: Task, version: Any = None, top: bool = False) -> None:
        """``top``: a node of the graph itself, not a task met inside a value (an inlined
        task, or one reached from a function's globals while fingerprinting it)."""
        enc = self.enc
        if isinstance(task, NestedContainer):
            self._container(task)
            return
        func = task.func
        # A plain graph Task of a function met before in this pass: its head at once.
        plain = top and version is None and type(task) is Task
        head = self._heads.get(id(func)) if plain else None
        if head is not None and head[0] is func:
            enc.write_raw(head[1])
        else:
            reason = self.kinds.volatile_reason(func, task.args, task.kwargs)
            if reason is not None:
                raise VolatileValue(reason)
            start = enc.position()
            enc.write_raw(b"T")
            if version is not None:  # replaces the code of the function, not its state
                enc.write_raw(b"V")
                enc.write_name(str(version))
                enc.write_versioned_callable(func, str(version))
            else:
                enc.write_callable(func)
            if type(task) is not Task:
                enc.write_name(type(task).__module__ + "." + type(task).__qualname__)
            # The same bytes for every such task, unless volatility depends on arguments.
            if plain and not self.kinds.depends_on_arguments(func):
                self._heads[id(func)] = (func, enc.written_since(start))
        args = task.args
        if (func is set or func is frozenset) and len(args) == 1 and type(args[0]) in (
                List, Tuple):
            # set(List(...)): Dask lists a set's members (delayed({a, b})) in the order
            # the set iterates them, which PYTHONHASHSEED changes; the set does not care.
            args = (Set(*args[0].args),)
        write = self._write_shared if top else enc.encode
        enc.write_raw(b"(%d:" % len(args))
        for arg in args:
            write(arg)
        if task.kwargs:
            enc.write_raw(b"{%d:" % len(task.kwargs))
            for name in sorted(task.kwargs):
                enc.write_name(name)
                write(task.kwargs[name])

    def _write_shared(self, arg: Any) -> None:
        """``enc.encode(arg)`` for a graph task's argument; an argument many tasks share
        (the same object) is encoded once per pass and its bytes written again."""
        if type(arg) in _DIRECT:
            self.enc.encode(arg)
        else:  # a frame's meta, a template array, an options dict: once per pass
            self.enc.write_shared(arg)

    def _container(self, node: NestedContainer) -> None:
        enc = self.enc
        enc.write_raw(_CONTAINERS.get(type(node), b"?") + b"%d:" % len(node.args))
        if type(node) is Set:
            for digest in sorted(enc.digest_of(a) for a in node.args):
                enc.write_raw(digest)
            return
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
        # Named inside an inlined task but not among its dependencies (a fused subgraph
        # that Dask inlined into another task, e.g. by ProhibitReuse): hash it now.
        if key in self._in_progress:
            raise VolatileValue(f"the graph refers to {key!r} in a cycle")
        self._in_progress.add(key)
        try:
            digest = self._node_digest(key, self.graph[key])
        finally:
            self._in_progress.discard(key)
        self.digests[key] = digest
        return digest

    def _label(self, func: Any) -> str:
        """A readable name for entries of this function (computed once per function)."""
        label = self._labels.get(id(func))
        if label is None:
            try:
                label = funcname(func)
            except Exception:
                label = type(func).__name__
            self._labels[id(func)] = label
        return label

    def _cost_key(self, func: Any) -> str:
        """The label and the function's code fingerprint (computed once per function; the
        fingerprint is cached by the hashing pass already)."""
        cost_key = self._cost_keys.get(id(func))
        if cost_key is None:
            try:
                cost_key = f"{self._label(func)}@{self.enc.fingerprint(func).hex()[:16]}"
            except Exception:  # a versioned or unhashable callable: by its name only
                cost_key = self._label(func)
            self._cost_keys[id(func)] = cost_key
        return cost_key

    # -- graph nodes inside arguments -------------------------------------------------------

    def _ref(self, enc: Encoder, obj: TaskRef) -> None:
        enc.write_raw(b"R" + self._dep_digest(obj.key))

    def _alias(self, enc: Encoder, obj: Alias) -> None:
        enc.write_raw(b"R" + self._dep_digest(obj.target))

    def _nested(self, enc: Encoder, obj: NestedContainer) -> None:
        self._container(obj)

    def _inlined_task(self, enc: Encoder, obj: Task) -> None:
        # Hash an inlined task exactly as if it were its own graph node.
        reopened = _reopened_digest(obj)
        if reopened is not None:
            enc.write_raw(b"R" + reopened)
            return
        with enc.sub_digest(self.prefix) as sub:
            self._task_body(obj)
        enc.write_raw(b"R" + sub.value)

    def _collection(self, enc: Encoder, obj: Any) -> None:
        """A dask array held as a value (xarray's finalisation task holds its dataset, dask
        arrays inside, as a template): when its chunks are tasks of this graph, by their
        hashes and its layout, never by its name (a dask token, which differs between
        environments); otherwise as any value."""
        keys = list(flatten(obj.__dask_keys__()))
        if not keys or not all(k in self.digests or k in self.graph for k in keys):
            enc.write_generic(obj)
            return
        enc.write_raw(b"K")
        enc.write_names((str(obj.dtype), repr(obj.chunks)))
        enc.write_raw(b"%d:" % len(keys))
        for key in keys:
            enc.write_raw(b"R" + self._dep_digest(key))

    def _data(self, enc: Encoder, obj: DataNode) -> None:
        if type(obj) is HashedData:  # inlined: as the reference to its task would be
            enc.write_raw(b"R" + obj.digest)
            return
        enc.encode(obj.value)


def hash_graph(graph: Mapping[Key, GraphNode], order: list[Key], namespace: str,
               annotations: Any = None, signing_key: SigningKey | None = None,
               known: Mapping[Key, bytes] | None = None) -> GraphHashes:
    """Hash the nodes of ``graph`` named in ``order`` (dependencies first).

    ``annotations`` is anything with an ``annotation(name, key, default)`` method (a
    :class:`~client_lib.plan.materialize.Materialized`): ``cache=False`` makes a task volatile and
    ``cache_version=...`` replaces its function's code in the hash. ``signing_key`` keys
    the published hashes. ``known`` gives the (unkeyed) digests of keys outside the graph
    (futures the cache made, :mod:`client_lib.plan.known`; see ``GraphHashes.digests``); any
    other key outside the graph makes its dependents volatile.
    """
    hasher = GraphHasher(graph, namespace, annotations, signing_key=signing_key)
    if known:
        hasher.digests.update(known)
    result = hasher.run(order)
    result.digests = hasher.digests
    result.pinned = pinned_keys(graph, order, hasher.kinds)
    return result


def value_digest(value: Any) -> bytes:
    """The 16-byte digest of one value, as the task hash sees it (type, every cell, index,
    dtypes, attrs for pandas objects). Raises :class:`VolatileValue` for a value that
    cannot be hashed deterministically. Two values with equal digests are equal for the
    cache, which is what a lossless re-encoding must preserve (client_lib/wire/frames.py)."""
    return Encoder(HANDLERS, Fingerprinter).digest_of(value)
