"""Pinned task hashes: the equality corpus, representative argument values and functions.

A task hash names a stored result, so an unintended change of any hash silently turns every
cached entry into a miss (or, worse, two different computations into one name). The
digests recorded in ``golden_hashes.json`` are compared by ``test_golden_hashes.py``; a
deliberate change of the encoding bumps ``KEY_VERSION`` and re-records them:

    python -m tests.client._golden --write

The file also records the library versions it was made with: hashes name library
versions, so an upgrade of numpy, pandas or dask changes them legitimately. Entries that
depend on the machine (file stamps, absolute paths) are left out.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import enum
import fractions
import functools
import json
import math
import pathlib
import pickle
import sys
import types
import uuid
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pandas as pd
import pyarrow as pa
import toolz

GOLDEN = Path(__file__).with_name("golden_hashes.json")
LIBRARIES = ("python", "dask", "distributed", "numpy", "pandas", "toolz", "xarray", "zarr")


def identity(x):
    return x


# -- argument values ------------------------------------------------------------------------


class Colour(enum.Enum):
    RED = 1
    GREEN = "g"


class Level(enum.IntEnum):
    LOW = 1


class Perm(enum.Flag):
    R = 4
    W = 2


@dataclasses.dataclass
class Settings:
    name: str
    weights: tuple = (0.5, 0.25)


@dataclasses.dataclass(frozen=True)
class Frozen:
    names: frozenset


class Plain:
    def __init__(self, x: float, y: float) -> None:
        self.x, self.y = x, y

    def norm(self) -> float:
        return math.hypot(self.x, self.y)


class Lazy:
    def __init__(self, k: int) -> None:
        self.k = k

    @functools.cached_property
    def doubled(self) -> int:
        return self.k * 2


class Tagged(np.ndarray):
    """An ndarray subclass whose instances carry an attribute of their own."""


def _tagged() -> Tagged:
    arr = np.arange(3.0).view(Tagged)
    arr.unit = "m"
    return arr


def _cyclic() -> list:
    items: list = [1, 2]
    items.append(items)
    return items


def _lazy_accessed() -> Lazy:
    obj = Lazy(3)
    assert obj.doubled == 6  # a filled cache is not part of the value
    return obj


def values() -> dict[str, Any]:
    """Argument values of every kind the encoder handles, built deterministically."""
    rng = np.random.default_rng(5)
    big = bytes(range(256)) * 20  # over the inline limit: hashed by digest
    frame = pd.DataFrame({"k": np.arange(6) % 3, "name": [f"n{i}" for i in range(6)],
                          "v": rng.random(6)})
    return {
        "none": None, "true": True, "false": False, "int": 12345678901234567890,
        "negative int": -7, "float": 0.1, "negative zero": -0.0, "nan": float("nan"),
        "inf": float("inf"), "complex": 1.5 - 2j, "str": "héllo wörld",
        "str with a dot": "results.v2", "str with a slash": "no/such/file-here",
        "empty str": "", "bytes": b"\x00\x01abc", "big bytes": big,
        "bytearray": bytearray(b"xyz"), "memoryview": memoryview(b"abcdef"),
        "strided memoryview": memoryview(b"abcdef")[::2],
        "tuple": (1, "a", 2.0), "empty tuple": (), "list": [1, [2, [3]]],
        "dict": {"b": 1, "a": [1, 2, {"c": (3,)}]}, "dict order": {"a": [1, 2, {"c": (3,)}],
                                                                      "b": 1},
        "set": {"one", "two", "three", 4, 5.0}, "frozenset": frozenset({"p", "q", (1, 2)}),
        "mappingproxy": types.MappingProxyType({"k": 1}), "slice": slice(1, None, 2),
        "range": range(3, 30, 4), "ellipsis": ..., "notimplemented": NotImplemented,
        "cycle": _cyclic(), "ordereddict": collections.OrderedDict(a=1, b=2),
        "defaultdict": collections.defaultdict(list, {"a": [1]}),
        "counter": collections.Counter("abracadabra"),
        "namedtuple": collections.namedtuple("Pair", "left right")(1, 2),
        "float64 array": np.arange(12.0).reshape(3, 4),
        "fortran array": np.asfortranarray(np.arange(12).reshape(3, 4)),
        "bool array": np.array([True, False]), "zero-d array": np.array(3),
        "big array": rng.random(2000), "unicode array": np.array(["alpha", "b.csv"]),
        "bytes array": np.array([b"x", b"yz"]), "object array": np.array([1, "a", None],
                                                                         dtype=object),
        "structured array": np.array([(1, 2.0)], dtype=[("a", "i4"), ("b", "f8")]),
        "datetime64 array": np.arange("2026-01-01", "2026-01-05", dtype="datetime64[D]"),
        "masked array": np.ma.masked_array([1, 2, 3], mask=[0, 1, 0]),
        "float64 scalar": np.float64(1.5), "int8 scalar": np.int8(-3),
        "bool scalar": np.bool_(True), "datetime64 scalar": np.datetime64("2026-01-01T10"),
        "str scalar": np.str_("abc"), "object scalar": np.array([{"a": 1}], dtype=object)[0],
        "dtype": np.dtype("f8"), "structured dtype": np.dtype([("a", "i4"), ("b", "f8")]),
        "enum": Colour.RED, "enum with str value": Colour.GREEN, "int enum": Level.LOW,
        "flag": Perm.R | Perm.W, "library module": math, "numpy module": np,
        "pure path": pathlib.PurePosixPath("no/such/dir/file.csv"),
        "path": pathlib.Path("/no/such/file.parquet"),
        "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "decimal": decimal.Decimal("1.25"), "fraction": fractions.Fraction(3, 7),
        "datetime": datetime.datetime(2026, 1, 15, 9, 30, 1, 250),
        "aware datetime": datetime.datetime(2026, 1, 15, 9, tzinfo=datetime.UTC),
        "fold datetime": datetime.datetime(2026, 10, 25, 1, 30, fold=1),
        "date": datetime.date(2026, 1, 15), "time": datetime.time(9, 30, 15),
        "timedelta": datetime.timedelta(days=2, seconds=5, microseconds=7),
        "timestamp": pd.Timestamp("2026-01-15 09:00", tz="UTC"),
        "pandas timedelta": pd.Timedelta(100, "us"),
        "dataframe": frame, "series": frame.v.rename("values"),
        "object column": pd.DataFrame({"o": pd.Series([1, "b", None], dtype=object)}),
        "string column": pd.Series(["a", "b", None], dtype="string"),
        "categorical": pd.Series(["x", "y", "x"], dtype="category"),
        "datetime column": pd.Series(pd.date_range("2026-01-01", periods=4, freq="D")),
        "tz column": pd.Series(pd.date_range("2026-01-01", periods=3, tz="Europe/London")),
        "nullable float column": pd.Series([0.0, -0.0, None], dtype="Float64"),
        "arrow float column": pd.Series([1.5, None, -0.0], dtype=pd.ArrowDtype(pa.float64())),
        "str column": pd.Series(["a", None, "b/c"], dtype="str"),
        "interval column": pd.Series(pd.IntervalIndex.from_breaks([0.0, 1.0, 2.5])),
        "sparse column": pd.Series(pd.arrays.SparseArray([0.0, 1.0, 0.0])),
        "period column": pd.Series(pd.period_range("2026-01", periods=3, freq="M")),
        "mixed categorical": pd.Series(pd.Categorical([1, "1", 1])),
        "str_ elements": pd.Series([np.str_("a"), "b"], dtype=object),
        "frame flags": pd.DataFrame({"a": [1]}).set_flags(allows_duplicate_labels=False),
        "dtype with metadata": np.dtype("f8", metadata={"unit": "m"}),
        "hard masked array": np.ma.masked_array([1, 2], mask=[0, 1], hard_mask=True),
        "ndarray subclass": _tagged(), "reversed view": np.arange(6.0)[::-1],
        "float32 memoryview": memoryview(np.arange(4, dtype=np.float32)),
        "pickle buffer": pickle.PickleBuffer(b"abc"),
        "extension array": pd.array(["a", None, "c"], dtype="str"),
        "range index": pd.RangeIndex(2, 20, 3), "index": pd.Index(["a", "b"], name="i"),
        "multiindex": pd.MultiIndex.from_tuples([(1, "a"), (2, "b")], names=["n", "s"]),
        "datetime index": pd.date_range("2026-01-01", periods=3, freq="h"),
        "categorical dtype": pd.CategoricalDtype(["a", "b"], ordered=True),
        "frame with attrs": frame.assign(w=1).pipe(_with_attrs),
        "dataclass": Settings("run"), "frozen dataclass": Frozen(frozenset({"p", "q"})),
        "user object": Plain(3.0, 4.0), "cached_property filled": _lazy_accessed(),
        "bound method value": Plain(1.0, 2.0).norm,
    }


def _with_attrs(df: pd.DataFrame) -> pd.DataFrame:
    df.attrs["source"] = "unit"
    return df


# -- functions --------------------------------------------------------------------------------

FACTOR = 3
TABLE = {"k": 2}


def plain(x):
    return x + 1


def uses_global(x):
    return x * FACTOR + TABLE["k"]


def calls_helper(x):
    return plain(x) * 2


def recursive(x):
    return x if x < 1 else recursive(x - 1)


def ping(x):
    return pong(x - 1) if x > 0 else 0


def pong(x):
    return ping(x - 1) if x > 0 else 1


def with_defaults(x, k=2, *, m=3):
    return x * k * m


def imports_inside(x):
    import json as _json

    return _json.dumps(x)


def uses_numpy(x):
    return np.sum(x)


def make_closure(k):
    def scaled(x):
        return x * k

    return scaled


def attributed(x):
    return x * attributed.k


attributed.k = 5


@functools.lru_cache
def memoised(x):
    return x * 3


@functools.singledispatch
def dispatched(x):
    return x


@dispatched.register(int)
def _(x):
    return x * 4


@toolz.curry
def curried(k, x):
    return x * k


@functools.wraps(plain)
def wrapper(x):
    return plain(x)


class Scaler:
    unit = "m"

    def __init__(self, k: int = 2) -> None:
        self.k = k

    def apply(self, x):
        return x * self.k

    @staticmethod
    def static(x):
        return x

    @classmethod
    def make(cls, k):
        return cls(k)

    @property
    def double(self):
        return self.k * 2

    def __call__(self, x):
        return self.apply(x)


class Meta(type):
    def __call__(cls, *args):
        return 7


class Made(metaclass=Meta):
    pass


delayed_plain = dask.delayed(plain, pure=True)


def calls_delayed(x):
    return delayed_plain(x)


def versioned_function():
    from client_lib import cache_version

    @cache_version("3")
    def step(x):
        return x + 100

    return step


def functions() -> dict[str, Any]:
    """Callables of every kind the fingerprints handle (each is a task's function)."""
    return {
        "plain": plain, "lambda": lambda x: x * 2, "global constants": uses_global,
        "helper": calls_helper, "recursive": recursive, "mutual recursion": ping,
        "defaults": with_defaults, "import in body": imports_inside,
        "library global": uses_numpy, "closure": make_closure(3),
        "function attribute": attributed, "lru_cache": memoised,
        "singledispatch": dispatched, "toolz.curry": curried(2), "wraps": wrapper,
        "partial": functools.partial(with_defaults, k=5),
        "bound method": Scaler(3).apply, "static method": Scaler.static,
        "class method": Scaler.make, "class": Scaler, "callable instance": Scaler(4),
        "metaclass": Made, "dataclass class": Settings, "enum class": Colour,
        "builtin": len, "library builtin": math.sqrt, "method descriptor": str.upper,
        "bound builtin": [1, 2].count, "class builtin": dict.fromkeys, "ufunc": np.add,
        "library function": np.linspace, "library class": pd.DataFrame,
        "vectorize": np.vectorize(plain), "cache_version": versioned_function(),
        "delayed global": calls_delayed,
    }


# -- graphs built by hand -----------------------------------------------------------------------


def graphs() -> dict[str, Any]:
    """Graph nodes the graph hasher handles: aliases, data nodes, containers, inlined
    tasks, annotations."""
    from dask._task_spec import Alias, DataNode, Dict, List, Set, Task, TaskRef, Tuple
    from dask.delayed import Delayed

    def delayed(graph: dict, out: str) -> Delayed:
        return Delayed(out, graph)

    a = Task("a", plain, 1)
    result = {
        "task": delayed({"a": a}, "a"),
        "data node": delayed({"d": DataNode("d", np.arange(3)),
                              "t": Task("t", identity, TaskRef("d"))}, "t"),
        "alias": delayed({"a": a, "al": Alias("al", "a"),
                          "t": Task("t", identity, TaskRef("al"))}, "t"),
        "containers": delayed({"a": a, "t": Task("t", identity, List(TaskRef("a"), 2),
                                                  Tuple(1, TaskRef("a")),
                                                  Set(3, TaskRef("a")),
                                                  Dict(k=TaskRef("a")))}, "t"),
        "inlined task": delayed({"t": Task("t", identity, Task("inner", plain, 4))}, "t"),
        "kwargs": delayed({"t": Task("t", with_defaults, 1, k=2, m=TaskRef("a")),
                           "a": a}, "t"),
    }
    with dask.annotate(cache_version="v7"):
        result["annotated version"] = dask.delayed(plain, pure=True)(1, dask_key_name="v")
    return result


# -- computing and recording ------------------------------------------------------------------


def _data_node(value: Any) -> Any:
    """A graph whose one task takes ``value`` as a data node (hashed by the value encoder)."""
    from dask._task_spec import DataNode, Task, TaskRef
    from dask.delayed import Delayed

    return Delayed("v", {"d": DataNode("d", value), "v": Task("v", identity, TaskRef("d"))})


def _single(collection: Any) -> str:
    from client_lib import task_hashes

    hashes = task_hashes(collection)
    return ",".join(sorted(h or "volatile" for h in hashes.values()))


GROUPS = ("values", "functions", "graphs", "corpus")


def compute(group: str, h5_path: str) -> dict[str, Any]:
    """The pinned hashes of one group, by name (``h5_path``: a scratch HDF5 file the probe
    corpus needs; its entries are left out, as they name the file's path)."""
    if group == "values":
        return {name: _single(_data_node(v)) for name, v in values().items()}
    if group == "functions":
        return {name: _single(dask.delayed(f, pure=True)(1, dask_key_name="f"))
                for name, f in functions().items()}
    if group == "graphs":
        return {name: _single(g) for name, g in graphs().items()}
    from tests.client._hash_probe import hash_graphs, probe_graphs

    return {name: hashes for name, hashes in hash_graphs(probe_graphs(h5_path)).items()
            if "h5py" not in name and not name.startswith(_ON_FILES)}


# Corpus entries that read input files (their hashes hold paths and file stamps).
_ON_FILES = ("corpus:io_", "corpus:value_listed_paths")


def environment() -> dict[str, Any]:
    from client_lib import KEY_VERSION

    versions = {name: sys.modules[name].__version__ if name != "python" else
                f"{sys.version_info[0]}.{sys.version_info[1]}" for name in LIBRARIES
                if name == "python" or __import__(name)}
    return {"KEY_VERSION": KEY_VERSION, **versions}


def main(argv: list[str]) -> int:
    import tempfile

    import h5py

    from tests.client._corpus_values import write_inputs

    if argv != ["--write"]:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        h5 = str(Path(tmp) / "data.h5")
        with h5py.File(h5, "w") as f:
            f["data"] = np.arange(200.0).reshape(20, 10)
        write_inputs(tmp)
        record = {"environment": environment(), **{g: compute(g, h5) for g in GROUPS}}
    GOLDEN.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
    return 0


if __name__ == "__main__":
    # Record from the importable module: run as a script, its functions would be __main__'s.
    from tests.client import _golden

    sys.exit(_golden.main(sys.argv[1:]))
