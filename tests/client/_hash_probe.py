"""Prints the task hashes of a fixed set of computations as JSON
(``python -m tests.client._hash_probe H5_PATH``): the values below that tend to hash
differently in different processes, and every entry of the equality corpus. With
``--values``, the digest of every non-builtin value in those graphs instead, each on
its own (the handlers' and ``__dask_tokenize__``'s output, by type); with ``--both``,
``{"hashes": ..., "values": ...}``.

Used by test_hashing.py to compare hashes across interpreter processes with different
PYTHONHASHSEEDs, across threads and in a worker process. Keys of non-pure delayed and
finalize tasks are random, so each entry is the sorted set of hashes, with "volatile"
for tasks that could not be hashed. (A set: how Dask fuses a graph can depend on
PYTHONHASHSEED, e.g. ``da.linalg.qr``, which changes how many aliases and fused keys
share one hash, but never the hashes themselves.)
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys

import dask
import dask.array as da
import dask.bag as db
import dask.dataframe as dd
import numpy as np
import pandas as pd


class Point:  # a class defined in __main__ when run as a script
    def __init__(self, x, y):
        self.x, self.y = x, y

    def norm(self):
        return (self.x**2 + self.y**2) ** 0.5


@dataclasses.dataclass(frozen=True)
class Config:
    names: frozenset
    weights: tuple


def combine(*args, **kwargs):
    return len(args) + len(kwargs)


def corpus(h5_path: str) -> dict:
    import h5py

    inc = dask.delayed(lambda x: x + 1, pure=True)
    nonpure = dask.delayed(combine)
    x = np.arange(1000.0).reshape(40, 25)
    arr = da.from_array(x, chunks=(10, 25))
    rng = da.random.default_rng(42).random((60, 10), chunks=(20, 10))
    pdf = pd.DataFrame({"a": np.arange(60), "b": list("xyz") * 20, "c": np.linspace(0, 1, 60)})
    ddf = dd.from_pandas(pdf, npartitions=3)
    h5 = h5py.File(h5_path, "r")["data"]

    class Account:  # a delayed method: its class attribute is a DelayedLeaf
        def __init__(self, base):
            self.base = base

        @dask.delayed  # its key (its __dask_tokenize__) is random
        def add(self, x):
            return self.base + x

    return {
        "delayed_pure": inc(inc(1)),
        "delayed_nonpure": nonpure(nonpure(1, 2), key="v"),
        "frozenset_arg": nonpure(frozenset({"alpha", "beta", "gamma", "delta"})),
        "set_arg": nonpure({"one", "two", "three", 4, 5.0}),
        "dict_arg": nonpure({"b": 1, "a": [1, 2, {"c": (3,)}]}),
        "main_class_instance": nonpure(Point(3, 4)),
        "dataclass_frozenset": nonpure(Config(frozenset({"p", "q", "r"}), (0.5, 0.25))),
        "partial": nonpure(functools.partial(combine, 1, k=frozenset({"z", "y"}))),
        "array_mean": arr.mean(axis=0),
        "array_map_blocks": arr.map_blocks(np.sin).sum(),
        "array_rechunk": arr.rechunk((20, 5)).max(),
        "array_random_seeded": rng.std(),
        "array_h5py": da.from_array(h5, chunks=10).sum(),
        "dataframe": ddf.groupby("b").c.sum(),
        "dataframe_assign": ddf.assign(d=ddf.a * 2)[["a", "d"]],
        "bag": db.from_sequence(range(10), npartitions=2).map(str).frequencies(),
        # Dask lists a set's members in the order the set iterates them (issue 27)
        "set_of_delayed": dask.delayed({inc(1), inc(2), "three", 4.0}),
        "delayed_method": Account(100).add(3),
    }


def probe_graphs(h5_path: str) -> dict[str, tuple]:
    """Every computation materialised and unfused, ready to hash: ``(graph, order)``.

    Shuffles and rechunks are planned as plain tasks: otherwise Dask picks P2P when it
    finds a distributed client and a disk shuffle when not, which makes other graphs (not
    other hashes). Build graphs in one thread at a time: on Python 3.11 dask-expr's
    nested ``functools.cached_property`` can deadlock when two threads plan at once.
    """
    from dask.base import unpack_collections

    from client_lib.plan.materialize import materialize, toposort, unfuse
    from tests.client._corpus import CORPUS, build

    with dask.config.set({"dataframe.shuffle.method": "tasks",
                          "array.rechunk.method": "tasks"}):
        collections = corpus(h5_path)
        collections.update({f"corpus:{name}": build(name, {"h5": h5_path})
                            for name in CORPUS})
        graphs = {}
        for name, coll in collections.items():
            m = unfuse(materialize(unpack_collections(coll)[0]))
            graphs[name] = (m, toposort(m.graph, m.keys))
    return graphs


def hash_graphs(graphs: dict[str, tuple]) -> dict[str, list[str]]:
    """The sorted set of task hashes of every graph, by name (thread safe)."""
    from client_lib.hashing import hash_graph

    result = {}
    for name, (m, order) in graphs.items():
        hashes = hash_graph(m.graph, order, "default", m)
        result[name] = sorted({hashes.hashes.get(k) or "volatile" for k in order})
    return result


def probe_hashes(h5_path: str) -> dict[str, list[str]]:
    """The sorted set of task hashes of every computation, by name."""
    return hash_graphs(probe_graphs(h5_path))


_LEAVES = (str, bytes, int, float, complex, bool, type(None))
_MAX_VALUES = 400  # per computation: enough to reach every kind of value it holds
# Libraries whose values have handlers of their own (their attributes are not hashed).
_OWN_HANDLERS = frozenset({"builtins", "numpy", "pandas", "h5py", "zarr", "fsspec",
                           "distributed"})


def _values_in(obj, found: list, depth: int = 0) -> None:
    """The non-builtin values reachable from a graph node: task functions and arguments,
    data, and (a few levels deep) what partials, bound methods, containers and objects'
    attributes hold. Graph references are skipped (their hashes are the task hashes)."""
    from dask._task_spec import Alias, DataNode, Task, TaskRef

    if len(found) >= _MAX_VALUES or depth > 5 or isinstance(obj, (_LEAVES, TaskRef, Alias)):
        return
    if isinstance(obj, Task):
        for part in (obj.func, *obj.args, *obj.kwargs.values()):
            _values_in(part, found, depth + 1)
        return
    if isinstance(obj, DataNode):
        _values_in(obj.value, found, depth + 1)
        return
    if isinstance(obj, (list, tuple, set, frozenset)):
        for item in list(obj)[:50]:
            _values_in(item, found, depth + 1)
        return
    if isinstance(obj, dict):
        for item in list(obj.values())[:50]:
            _values_in(item, found, depth + 1)
        return
    found.append(obj)
    if isinstance(obj, functools.partial):
        for part in (obj.func, *obj.args, *obj.keywords.values()):
            _values_in(part, found, depth + 1)
    elif hasattr(obj, "__self__") and not isinstance(obj.__self__, type(sys)):
        _values_in(obj.__self__, found, depth + 1)
    elif (type(obj).__module__.partition(".")[0] not in _OWN_HANDLERS
          and not hasattr(obj, "__dask_tokenize__")):  # hashed by its pickled state
        state = getattr(obj, "__dict__", None)
        if isinstance(state, dict):
            _values_in(dict(state), found, depth + 1)


def probe_values(h5_path: str) -> dict[str, list[str]]:
    """For every computation, ``"type: digest"`` of each non-builtin value its graph
    holds (functions, arrays, frames, filesystems, locks, objects with
    ``__dask_tokenize__``, ...), each hashed on its own: what every handler and every
    ``__dask_tokenize__`` the hash relies on gives, so a difference names its type."""
    from dask._task_spec import DataNode

    from client_lib.hashing import hash_graph

    result = {}
    for name, (m, order) in probe_graphs(h5_path).items():
        found: list = []
        for key in order:
            _values_in(m.graph[key], found)
        digests = set()
        for value in found:
            digest = hash_graph({"v": DataNode("v", value)}, ["v"], "guard").hashes.get("v")
            kind = f"{type(value).__module__}.{type(value).__qualname__}"
            digests.add(f"{kind}: {digest or 'volatile'}")
        result[name] = sorted(digests)
    return result


def main() -> None:
    if sys.argv[2:] == ["--values"]:
        json.dump(probe_values(sys.argv[1]), sys.stdout)
    elif sys.argv[2:] == ["--both"]:  # one process for both (each start costs seconds)
        json.dump({"hashes": probe_hashes(sys.argv[1]), "values": probe_values(sys.argv[1])},
                  sys.stdout)
    else:
        json.dump(probe_hashes(sys.argv[1]), sys.stdout)


if __name__ == "__main__":
    main()
