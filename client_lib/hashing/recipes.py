"""Recipes: what each task hash was made of, so a miss can be explained
(docs/design/hashing.md, Recipes and why).

A *recipe* names the parts of one task's hash by their digests, never their values: the
function's fingerprint with its qualified name (and, for user code, its body and the
helpers and globals it reads, each by name), each argument's digest by position or
keyword (dependencies left out: they are listed by their task hashes), the files its
arguments name (path, size, modification time), and the version salts (the hash format,
a ``cache_version``, pandas' options). A *slot* names "the same task" across edits: the
namespace, the task's label, its chunk index and the labels of everything upstream (and,
where that is still ambiguous, its place below the outputs), so the previous version of
a task is found whatever changed in it.

Recipes are collected in a pass of their own after hashing, with an encoder of their own
(the graph hasher is not touched): a recipe that cannot be made is left out, never an
error. Digests are 8 bytes, as hex; every list is bounded (:data:`MAX_PARTS`).
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

import xxhash
from dask._task_spec import Alias, DataNode, GraphNode, NestedContainer, Task, TaskRef

from ..core.errors import VolatileValue
from ..core.signing import SigningKey
from .bytecode import code_names
from .encoder import Encoder
from .fingerprints import Fingerprinter
from .graph import KEY_VERSION, GraphHashes
from .pandas_values import options_in_effect
from .provenance import file_stamp, library_version
from .registry import HANDLERS

__all__ = ["MAX_PARTS", "Recipe", "RecipeMaker", "recipe_records", "slots"]

Key = Hashable
Recipe = dict[str, Any]
#: At most this many entries in each list of a recipe (the server refuses more).
MAX_PARTS = 32
_NAME = 200  # characters of a name or path kept
_HELPER_DEPTH = 2  # helpers of helpers are named, not deeper


def _hex(digest: bytes) -> str:
    return digest[:8].hex()


class _RecipeEncoder(Encoder):
    """The hash's encoding, but every dependency written as a bare mark (so an argument's
    digest is its own literal part) and the files its strings name collected."""

    files: list[list[Any]]
    memoizes = False  # every string's files are collected, each time it is written

    def write_str(self, obj: str) -> None:
        # The text only: a file it names is a part of its own (its stamp is not in the
        # argument's digest, so an edited file is not also a changed argument).
        self.write_name(obj)
        if 2 < len(obj) < 4096 and ("/" in obj or "\\" in obj or "." in obj) and len(
                self.files) < MAX_PARTS:
            stamp = file_stamp(obj)
            if stamp is not None:
                self.files.append(_file_entry(obj, stamp))


def _file_entry(path: str, stamp: bytes) -> list[Any]:
    if os.path.isdir(path):  # a directory: its files' total size, the latest change
        size, mtime = 0, 0
        for piece in stamp.split(b"\0"):
            fields = piece.rsplit(b":", 2)
            if len(fields) == 3 and fields[1].isdigit():
                size += int(fields[1])
                mtime = max(mtime, int(fields[2]))
        return [path[-_NAME:], size, mtime]
    size, _, mtime = stamp.partition(b":")
    return [path[-_NAME:], int(size), int(mtime)]


class RecipeMaker:
    """Makes the recipes of one hashed graph. Not thread safe; one per pass."""

    def __init__(self, graph: Mapping[Key, GraphNode], hashes: GraphHashes,
                 annotations: Any = None, signing_key: SigningKey | None = None) -> None:
        self.graph = graph
        # With a signing key, part digests are keyed too: a short literal (a password
        # passed as an argument) cannot be guessed back from its digest.
        self._hex = _hex if signing_key is None else (
            lambda digest: signing_key.keyed_hash(digest)[:16])
        self.hashes = hashes
        self.annotations = annotations
        names = getattr(annotations, "annotations", None)
        self._reads_version = annotations is not None and (
            names is None or "cache_version" in names)
        in_graph: dict[type, Any] = {TaskRef: _mark, Alias: _mark, NestedContainer: _walk,
                                     Task: _inlined, DataNode: _data}
        # (this runs in the poster thread: a module another thread is still importing
        # has no Array yet, and then no graph of this run holds one)
        array_type = getattr(sys.modules.get("dask.array.core"), "Array", None)
        if array_type is not None:  # a template holding this graph's chunks (xarray)
            in_graph[array_type] = _mark
        self.enc = _RecipeEncoder(HANDLERS.extended(in_graph), Fingerprinter)
        self.enc.files = []
        self.code: Fingerprinter = self.enc._code  # type: ignore[assignment]
        self._functions: dict[int, tuple[Any, list[list[str]]]] = {}
        options = options_in_effect()
        self._salts = [str(KEY_VERSION)] + ([self._hex(xxhash.xxh3_128_digest(repr(options)))]
                                            if options else [])

    def many(self, keys: Iterable[Key]) -> dict[Key, Recipe]:
        """The recipes of ``keys`` that have a hash (keys without one are left out)."""
        out = {}
        for key in keys:
            recipe = self.one(key)
            if recipe is not None:
                out[key] = recipe
        return out

    def one(self, key: Key) -> Recipe | None:
        """The recipe of one hashed node, or ``None`` (an alias, or a part that cannot be
        encoded: the hash already said what it could)."""
        node = self.graph.get(key)
        if key not in self.hashes.hashes or node is None or isinstance(node, Alias):
            return None
        enc = self.enc
        try:
            if isinstance(node, DataNode):
                enc.files = []
                return {"data": self._hex(enc.digest_of(node.value)), "i": enc.files,
                        "v": self._salts}
            if not isinstance(node, Task) or isinstance(node, NestedContainer):
                return None
            return self._task(key, node)
        except (VolatileValue, RecursionError, TypeError, ValueError, AttributeError):
            return None

    def _task(self, key: Key, task: Task) -> Recipe:
        enc = self.enc
        enc.files = []
        code = list(self.function_parts(task.func))
        args = []
        named = [*((str(i), a) for i, a in enumerate(task.args)),
                 *((k, task.kwargs[k]) for k in sorted(task.kwargs))]
        for name, value in named:
            if isinstance(value, (TaskRef, Alias)):
                continue
            if _is_user_function(value):  # map_partitions(f): f is code, not a value
                code.append([f"argument {name}: {_qualified(value)}",
                             self._hex(self.code.digest(value))])
            else:
                args.append([name, self._hex(enc.digest_of(value))])
        published = self.hashes.hashes
        deps = sorted({published[d][:16] for d in task.dependencies if d in published})
        salts = self._salts
        if self._reads_version:
            version = self.annotations.annotation("cache_version", key)
            if version is not None:
                salts = [*salts, f"cache_version={str(version)[:_NAME]}"]
        return {"f": code[:MAX_PARTS], "a": args[:MAX_PARTS], "i": enc.files,
                "d": deps[:MAX_PARTS * 8], "v": salts}

    # -- the function and what its code reads ---------------------------------------------

    def function_parts(self, func: Any) -> list[list[str]]:
        """``[name, digest]`` pairs: the callable's fingerprint first, then (user code)
        its body and the helpers and globals it reads; one computation per function."""
        hit = self._functions.get(id(func))
        if hit is not None and hit[0] is func:
            return hit[1]
        parts = [[_qualified(func), self._hex(self.code.digest(func))]]
        if _is_user_function(func):
            parts.append([parts[0][0] + " body", self._hex(self.code.code_digest(func.__code__))])
            self._globals(func, parts, 0, {id(func)})
        self._functions[id(func)] = (func, parts)
        return parts

    def _globals(self, func: types.FunctionType, parts: list[list[str]], depth: int,
                 seen: set[int]) -> None:
        names = code_names(func.__code__, set())
        glb = func.__globals__
        module = func.__module__ or "__main__"
        for name in sorted(names):
            if name not in glb or name.startswith("__"):
                continue
            value = glb[name]
            if isinstance(value, types.ModuleType):
                if library_version(value.__name__.partition(".")[0]) is not None:
                    continue
                attrs = vars(value)
                for attr in sorted(names):
                    if attr in attrs and not attr.startswith("__"):
                        self._named(f"{value.__name__}.{attr}", attrs[attr], parts, depth, seen)
            else:
                self._named(name if module == "__main__" else f"{module}.{name}", value,
                            parts, depth, seen)

    def _named(self, name: str, value: Any, parts: list[list[str]], depth: int,
               seen: set[int]) -> None:
        if len(parts) >= MAX_PARTS or id(value) in seen or isinstance(value, types.ModuleType):
            return
        seen.add(id(value))
        if _is_user_function(value):
            parts.append([f"helper {_qualified(value)}", self._hex(self.code.digest(value))])
            if depth < _HELPER_DEPTH:
                self._globals(value, parts, depth + 1, seen)
        elif isinstance(value, type) or callable(value):
            if library_version((getattr(value, "__module__", None) or "").partition(".")[0]):
                return  # a library's: its version is in the function's fingerprint
            parts.append([f"helper {_qualified(value)}", self._hex(self.code.digest(value))])
        else:
            parts.append([f"global {name}"[:_NAME], self._hex(self.enc.digest_of(value))])


def _mark(enc: Encoder, obj: Any) -> None:
    enc.write_raw(b"R")


def _walk(enc: Encoder, obj: NestedContainer) -> None:
    enc.write_raw(b"[%d:" % len(obj.args))
    for arg in obj.args:
        enc.encode(arg)


def _inlined(enc: Encoder, obj: Task) -> None:
    enc.write_raw(b"T")
    enc.write_callable(obj.func)
    for arg in obj.args:
        enc.encode(arg)
    for name in sorted(obj.kwargs):
        enc.write_name(name)
        enc.encode(obj.kwargs[name])


def _data(enc: Encoder, obj: DataNode) -> None:
    enc.encode(obj.value)


def _is_user_function(obj: Any) -> bool:
    return isinstance(obj, types.FunctionType) and library_version(
        (obj.__module__ or "__main__").partition(".")[0]) is None


def _qualified(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(
        obj).__qualname__
    module = getattr(obj, "__module__", None)
    if module and module != "__main__" and module != "builtins":
        name = f"{module}.{name}"
    return str(name)[:_NAME]


# -- slots ----------------------------------------------------------------------------------

def slots(graph: Mapping[Key, GraphNode], order: list[Key], labels: Mapping[Key, str],
          outputs: list[Key], namespace: str) -> dict[Key, str]:
    """The structural slot (32 hex) of every key of ``order`` (dependencies first):
    stable across edits of code, arguments and files, since it is made of labels, chunk
    indices and graph shape only. Keys whose upstream looks alike (``[f(i) for i in
    range(3)]``) are numbered in the order of their places below ``outputs``."""
    up: dict[Key, bytes] = {}
    for key in order:
        node = graph[key]
        deps = sorted(up[d] for d in node.dependencies if d in up) if isinstance(
            node, GraphNode) else []
        text = f"{labels.get(key, type(node).__name__)}\0{_index(key)}\0"
        up[key] = xxhash.xxh3_128_digest(text.encode() + b"".join(deps))
    groups: dict[bytes, list[Key]] = {}
    for key in order:
        groups.setdefault(up[key], []).append(key)
    alike = [keys for keys in groups.values() if len(keys) > 1]
    rank: dict[Key, int] = {}
    if alike:
        places = _places(graph, order, outputs)
        for keys in alike:  # the n-th of its kind below the outputs
            for i, key in enumerate(sorted(keys, key=lambda k: places.get(k, ()))):
                rank[key] = i
    prefix = namespace.encode("utf-8") + b"\0"
    return {key: xxhash.xxh3_128_hexdigest(prefix + up[key] + (
        b"#%d" % rank[key] if key in rank else b"")) for key in order}


def _index(key: Key) -> str:
    """A chunk's position (``("x-abc", 2, 0)`` -> ``2,0``), never the name's token."""
    if isinstance(key, tuple):
        return ",".join(str(k) for k in key[1:] if isinstance(k, int))
    return ""


def _places(graph: Mapping[Key, GraphNode], order: list[Key], outputs: list[Key]
            ) -> dict[Key, tuple]:
    """Each key's place below the outputs: the least (parent's place, argument position)."""
    places: dict[Key, tuple] = {key: (i,) for i, key in enumerate(outputs)}
    for key in reversed(order):
        place = places.get(key)
        if place is None:
            continue
        for i, dep in enumerate(_refs(graph[key])):
            candidate = (*place, i)
            if dep not in places or candidate < places[dep]:
                places[dep] = candidate
    return places


def _refs(node: Any) -> list[Key]:
    """The keys a node refers to, in the order its arguments name them."""
    found: list[Key] = []
    stack = [node]
    while stack and len(found) < 10_000:
        item = stack.pop()
        if isinstance(item, TaskRef):
            found.append(item.key)
        elif isinstance(item, Alias):
            found.append(item.target)
        elif isinstance(item, Task):
            stack.extend(reversed([*item.args, *(item.kwargs[k] for k in sorted(item.kwargs))]))
        elif isinstance(item, NestedContainer):
            stack.extend(reversed(item.args))
    return list(dict.fromkeys(found))


def slot_records(graph: Mapping[Key, GraphNode], order: list[Key], outputs: list[Key],
                 hashes: GraphHashes, namespace: str, only: set[str] | None = None
                 ) -> dict[Key, dict[str, Any]]:
    """``{"slot", "hash", "label"}`` for every hashed key of ``order`` (with ``only``, those
    whose task hash is in it): a recipe record without its recipe, which is what finding
    the previous record of a slot needs."""
    published = hashes.hashes
    keys = [k for k in order if k in published and (only is None or published[k] in only)]
    if not keys:
        return {}
    where = slots(graph, order, hashes.labels, outputs, namespace)
    return {key: {"slot": where[key], "hash": published[key],
                  "label": hashes.labels.get(key, "")[:_NAME]} for key in keys}


def recipe_records(graph: Mapping[Key, GraphNode], order: list[Key], outputs: list[Key],
                   hashes: GraphHashes, namespace: str, annotations: Any = None,
                   only: set[str] | None = None, signing_key: SigningKey | None = None,
                   slotted: dict[Key, dict[str, Any]] | None = None
                   ) -> dict[Key, dict[str, Any]]:
    """``{"slot", "hash", "label", "recipe"}`` for every hashed key of ``order`` (with
    ``only``, those whose task hash is in it): what ``POST /v1/recipes`` takes.
    ``slotted``: :func:`slot_records` of these keys or more, made already."""
    if slotted is None:
        slotted = slot_records(graph, order, outputs, hashes, namespace, only)
    keys = [k for k, r in slotted.items() if only is None or r["hash"] in only]
    made = RecipeMaker(graph, hashes, annotations, signing_key).many(keys) if keys else {}
    return {key: {**slotted[key], "recipe": recipe} for key, recipe in made.items()}
