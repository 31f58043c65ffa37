"""The catalogue of code-edit cases: a small user project, one edit, and what must
recompute. One catalogue for both suites: ``tests/correctness/test_mutations.py`` runs every
case in fresh processes against a real server, ``tests/client/test_hashing.py`` checks the
same edits in-process at the level of task hashes. The projects' shapes are in
:mod:`tests.correctness._projects`. Test-side only: nothing here imports client_lib.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from tests.correctness._projects import (
    EVERYTHING,
    MAIN,
    Case,
    api_pipe,
    array_pipe,
    delayed_case,
    pipe,
    xarray_pipe,
)
from tests.correctness._round2_cases import CASES as SECOND_ROUND
from tests.correctness._round3_cases import CASES as THIRD_ROUND

__all__ = ["CASES", "LIBRARIES"]


# -- data files ---------------------------------------------------------------------------


def _write_h5(directory: Path) -> None:
    import h5py

    with h5py.File(directory / "data.h5", "w") as f:
        f["x"] = np.arange(60.0).reshape(30, 2)


def _edit_h5(directory: Path) -> None:
    import h5py

    with h5py.File(directory / "data.h5", "r+") as f:  # same path, same size
        f["x"][7, 1] = -100.0


def _write_zarr(directory: Path) -> None:
    import zarr

    z = zarr.create_array(zarr.storage.LocalStore(directory / "data.zarr"), shape=(30, 2),
                          chunks=(10, 2), dtype="f8")
    z[...] = np.arange(60.0).reshape(30, 2)


def _edit_zarr(directory: Path) -> None:
    import zarr

    z = zarr.open_array(zarr.storage.LocalStore(directory / "data.zarr"), mode="r+")
    z[12, 0] = -100.0  # one chunk file rewritten, same path


def _write_netcdf(directory: Path, offset: float = 0.0) -> None:
    import pandas as pd
    import xarray as xr

    time = pd.date_range("2000-01-01", periods=12, freq="6h")
    values = np.arange(36.0).reshape(12, 3) + offset
    xr.Dataset({"temp": (("time", "x"), values)}, coords={"time": time}).to_netcdf(
        directory / "data.nc", engine="h5netcdf")


def _edit_netcdf(directory: Path) -> None:
    _write_netcdf(directory, offset=0.5)  # same path, same size


def _write_csv(directory: Path) -> None:
    (directory / "table.csv").write_text("k,v\n1,10\n2,20\n")


def _edit_csv(directory: Path) -> None:
    (directory / "table.csv").write_text("k,v\n1,10\n2,29\n")


# -- the cases ----------------------------------------------------------------------------

HELPERS = "def scale(x):\n    return x * 2\n"
HELPERS_EDITED = "def scale(x):\n    return x * 7\n"

LIBRARIES = {
    # name: (version before, source before, version after, source after)
    "tinylib_code": ("1.0", "def scale(x):\n    return x * 2\n",
                     "2.0", "def scale(x):\n    return x * 5\n"),
    "tinylib_bump": ("1.0", "def scale(x):\n    return x * 2\n",
                     "1.1", "def scale(x):\n    return x * 2\n"),
    # Reinstalled from a local build with new code under the same version, as
    # ``pip install .`` of one's own project does again and again.
    "tinylib_local": ("0.1.0", "def scale(x):\n    return x * 2\n",
                      "0.1.0", "def scale(x):\n    return x * 4\n"),
}


COUNT_STRINGS = "return sum(isinstance(v, str) for v in x.o)"


def _defs(body: str, extra: str = "") -> str:
    return f"{textwrap.dedent(extra).strip()}\n\n\ndef step_b(x):\n" + textwrap.indent(
        textwrap.dedent(body).strip(), "    ")


CASES: list[Case] = [
    delayed_case("function body", {}, {"defs": _defs("return x * 3")}),
    delayed_case(
        "same-module helper",
        {"defs": _defs("return helper(x)", "def helper(x):\n    return x * 2")},
        {"defs": _defs("return helper(x)", "def helper(x):\n    return x * 3")},
    ),
    delayed_case(
        "helper in another user module",
        {"header": "import helpers", "defs": _defs("return helpers.scale(x)")},
        {"header": "import helpers", "defs": _defs("return helpers.scale(x)")},
        {"helpers.py": HELPERS}, {"helpers.py": HELPERS_EDITED},
    ),
    delayed_case(
        "helper from-imported from another user module",
        {"header": "from helpers import scale", "defs": _defs("return scale(x)")},
        {"header": "from helpers import scale", "defs": _defs("return scale(x)")},
        {"helpers.py": HELPERS}, {"helpers.py": HELPERS_EDITED},
    ),
    delayed_case(
        "helper two calls deep",
        {"header": "from helpers import outer", "defs": _defs("return outer(x)")},
        {"header": "from helpers import outer", "defs": _defs("return outer(x)")},
        {"helpers.py": "def inner(x):\n    return x * 2\n\n\ndef outer(x):\n"
                       "    return inner(x) + 1\n"},
        {"helpers.py": "def inner(x):\n    return x * 6\n\n\ndef outer(x):\n"
                       "    return inner(x) + 1\n"},
    ),
    delayed_case(
        "closure variable",
        {"defs": "def make(k):\n    def f(x):\n        return x * k\n    return f\n\n\n"
                 "step_b = make(2)"},
        {"defs": "def make(k):\n    def f(x):\n        return x * k\n    return f\n\n\n"
                 "step_b = make(3)"},
    ),
    delayed_case("default argument", {"defs": "def step_b(x, k=2):\n    return x * k"},
                 {"defs": "def step_b(x, k=3):\n    return x * k"}),
    delayed_case("keyword-only default", {"defs": "def step_b(x, *, k=2):\n    return x * k"},
                 {"defs": "def step_b(x, *, k=3):\n    return x * k"}),
    delayed_case("module-level constant", {"defs": _defs("return x * FACTOR", "FACTOR = 2")},
                 {"defs": _defs("return x * FACTOR", "FACTOR = 2.5")}),
    delayed_case(
        "module-level dict mutated in place before the run",
        {"defs": _defs("return x * TABLE['k']", "TABLE = {'k': 2}")},
        {"defs": _defs("return x * TABLE['k']", "TABLE = {'k': 2}"),
         "prepare": "TABLE['k'] = 9"},
    ),
    delayed_case(
        "module-level list mutated in place before the run",
        {"defs": _defs("return x * sum(WEIGHTS)", "WEIGHTS = [1, 1]")},
        {"defs": _defs("return x * sum(WEIGHTS)", "WEIGHTS = [1, 1]"),
         "prepare": "WEIGHTS[1] = 5"},
    ),
    delayed_case(
        "class method the task calls",
        {"defs": _defs("return Scaler().apply(x)",
                       "class Scaler:\n    def apply(self, x):\n        return x * 2")},
        {"defs": _defs("return Scaler().apply(x)",
                       "class Scaler:\n    def apply(self, x):\n        return x * 4")},
    ),
    delayed_case("lambda", {"defs": "step_b = lambda x: x * 2"},  # noqa: E731
                 {"defs": "step_b = lambda x: x * 3"}),
    delayed_case(
        "functools.partial argument",
        {"defs": "def mul(x, k):\n    return x * k\n\n\nstep_b = functools.partial(mul, k=2)"},
        {"defs": "def mul(x, k):\n    return x * k\n\n\nstep_b = functools.partial(mul, k=3)"},
    ),
    delayed_case("argument value", {"arg": "1"}, {"arg": "2"},
                 recompute=frozenset({"a", "b", "c"})),
    delayed_case(
        "numpy input array (one element)",
        {"arg": "np.arange(10.0)"},
        {"arg": "x", "prepare": "x = np.arange(10.0)\nx[4] = -1.0"},
        recompute=frozenset({"a", "b", "c"}),
    ),
    delayed_case(
        "pandas input DataFrame (one cell)",
        {"header": "import pandas as pd",
         "prepare": "df = pd.DataFrame({'u': [1.0, 2.0, 3.0], 'w': [4, 5, 6]})",
         "arg": "df"},
        {"header": "import pandas as pd",
         "prepare": "df = pd.DataFrame({'u': [1.0, 2.0, 3.0], 'w': [4, 5, 6]})\n"
                    "df.loc[1, 'w'] = 50",
         "arg": "df"},
        recompute=frozenset({"a", "b", "c"}),
    ),
    Case(
        "h5py file content (same path)",
        {"pipe.py": array_pipe(
            "x = da.from_array(h5py.File(os.path.join(HERE, 'data.h5'), 'r')['x'], "
            "chunks=(10, 2))", header="import h5py")},
        recompute=MAIN, data=_write_h5, edit_data=_edit_h5,
    ),
    Case(
        "zarr array content (same path)",
        {"pipe.py": array_pipe("x = da.from_zarr(os.path.join(HERE, 'data.zarr'))")},
        recompute=MAIN, data=_write_zarr, edit_data=_edit_zarr,
    ),
    Case(
        "dask.array chunking change that keeps values",
        {"pipe.py": array_pipe("x = da.from_array(np.arange(60.0).reshape(30, 2), "
                               "chunks=(10, 2))")},
        {"pipe.py": array_pipe("x = da.from_array(np.arange(60.0).reshape(30, 2), "
                               "chunks=(15, 1))")},
        recompute=None, same_result=True,
    ),
    delayed_case("namespace", {}, {}, recompute=EVERYTHING, new_namespace=True,
                 same_result=True),
    delayed_case(
        "per-function cache version",
        {"header": "from client_lib import cache_version",
         "defs": "@cache_version('1')\ndef step_b(x):\n    return x * 2"},
        {"header": "from client_lib import cache_version",
         "defs": "@cache_version('2')\ndef step_b(x):\n    return x * 3"},
    ),
    delayed_case(
        "library version (new code, new version)",
        {"header": "import tinylib_code", "defs": "step_b = tinylib_code.scale"},
        {"header": "import tinylib_code", "defs": "step_b = tinylib_code.scale"},
        library="tinylib_code",
    ),
    delayed_case(
        "library version (same code, new version)",
        {"header": "import tinylib_bump", "defs": _defs("return tinylib_bump.scale(x)")},
        {"header": "import tinylib_bump", "defs": _defs("return tinylib_bump.scale(x)")},
        library="tinylib_bump", same_result=True,
    ),
    delayed_case(
        "library reinstalled from a local build, same version",
        {"header": "from tinylib_local import scale", "defs": _defs("return scale(x)")},
        {"header": "from tinylib_local import scale", "defs": _defs("return scale(x)")},
        library="tinylib_local",
    ),
    # -- what the suite found (each was a stale hit before the fix) ---------------------
    delayed_case(
        "helper imported inside the task body",
        {"defs": _defs("import helpers\nreturn helpers.scale(x)")},
        {"defs": _defs("import helpers\nreturn helpers.scale(x)")},
        {"helpers.py": HELPERS}, {"helpers.py": HELPERS_EDITED},
    ),
    delayed_case(
        "helper from-imported inside the task body",
        {"defs": _defs("from helpers import scale\nreturn scale(x)")},
        {"defs": _defs("from helpers import scale\nreturn scale(x)")},
        {"helpers.py": HELPERS}, {"helpers.py": HELPERS_EDITED},
    ),
    delayed_case(
        "helper in a user subpackage (pkg.sub.scale)",
        {"header": "import pkg.sub", "defs": _defs("return pkg.sub.scale(x)")},
        {"header": "import pkg.sub", "defs": _defs("return pkg.sub.scale(x)")},
        {"pkg/__init__.py": "", "pkg/sub.py": HELPERS}, {"pkg/sub.py": HELPERS_EDITED},
    ),
    delayed_case(
        "user module named like a standard-library module",
        {"header": "import wave", "defs": _defs("return wave.scale(x)")},
        {"header": "import wave", "defs": _defs("return wave.scale(x)")},
        {"wave.py": HELPERS}, {"wave.py": HELPERS_EDITED},
    ),
    delayed_case(
        "functools.lru_cache helper",
        {"defs": _defs("return helper(x)",
                       "@functools.lru_cache\ndef helper(x):\n    return x * 2")},
        {"defs": _defs("return helper(x)",
                       "@functools.lru_cache\ndef helper(x):\n    return x * 3")},
    ),
    delayed_case(
        "functools.singledispatch helper",
        {"defs": _defs("return helper(x)",
                       "@functools.singledispatch\ndef helper(x):\n    return x * 2")},
        {"defs": _defs("return helper(x)",
                       "@functools.singledispatch\ndef helper(x):\n    return x * 3")},
    ),
    delayed_case(
        "toolz.curry task function",
        {"header": "import toolz",
         "defs": "@toolz.curry\ndef mul(k, x):\n    return x * k * 2\n\n\nstep_b = mul(1)"},
        {"header": "import toolz",
         "defs": "@toolz.curry\ndef mul(k, x):\n    return x * k * 3\n\n\nstep_b = mul(1)"},
    ),
    delayed_case(
        "enum member value",
        {"header": "import enum",
         "defs": _defs("return x * Factor.K.value", "class Factor(enum.Enum):\n    K = 2")},
        {"header": "import enum",
         "defs": _defs("return x * Factor.K.value", "class Factor(enum.Enum):\n    K = 3")},
    ),
    delayed_case(
        "object column: a number becomes its string",
        {"header": "import pandas as pd", "a_body": COUNT_STRINGS,
         "prepare": "df = pd.DataFrame({'o': pd.Series([1, 'b'], dtype=object)})",
         "arg": "df"},
        {"header": "import pandas as pd", "a_body": COUNT_STRINGS,
         "prepare": "df = pd.DataFrame({'o': pd.Series(['1', 'b'], dtype=object)})",
         "arg": "df"},
        recompute=frozenset({"a", "b", "c"}),
    ),
    Case(
        "file named by a relative path without a slash",
        {"pipe.py": pipe(
            "def step_b(x):\n    return x * 2",
            header="import os\nimport pandas as pd\n\n\ndef load(path):\n"
                   "    return float(pd.read_csv(path).v.sum())",
            prepare="os.chdir(os.path.dirname(os.path.abspath(__file__)))\n"
                    "t = dask.delayed(load, pure=True)('table.csv', dask_key_name='t')",
            arg="t")},
        recompute=frozenset({"t", "a", "b", "c"}), data=_write_csv, edit_data=_edit_csv,
    ),
]


# -- kinds of edit the in-process hash tests covered first ---------------------------------

SINGLEDISPATCH = """
@functools.singledispatch
def helper(x):
    return x


@helper.register(int)
def _(x):
    return x * {k}
"""

CACHED_PROPERTY = """
class Config:
    @functools.cached_property
    def k(self):
        return {k}
"""

METACLASS = """
class Meta(type):
    def __call__(cls):
        return {k}


class Made(metaclass=Meta):
    pass
"""

TAGGED = """
@dataclasses.dataclass
class Tagged:
    value: int


def tagged(tag):
    t = Tagged(1)
    t.tag = tag  # not a field, but part of the object
    return t


def step_b(x):
    return x * 2
"""

MODULE_CLOSURE = """
def make():
    import helpers

    def scaled(x):
        return helpers.scale(x)
    return scaled


step_b = make()
"""

CASES += [
    delayed_case("body of the last task", {}, {"c_body": "return x - 4"},
                 recompute=frozenset({"c"})),
    delayed_case("body of the first task", {}, {"a_body": "return x + 2"},
                 recompute=frozenset({"a", "b", "c"})),
    delayed_case("unchanged code moved down a line", {},
                 {"header": "\n\n# a comment: every function moves down"},
                 recompute=frozenset(), same_result=True),
    delayed_case("function attribute",
                 {"defs": "def step_b(x):\n    return x * step_b.k\n\n\nstep_b.k = 2"},
                 {"defs": "def step_b(x):\n    return x * step_b.k\n\n\nstep_b.k = 3"}),
    delayed_case("functools.singledispatch registration",
                 {"defs": _defs("return helper(x)", SINGLEDISPATCH.format(k=2))},
                 {"defs": _defs("return helper(x)", SINGLEDISPATCH.format(k=3))}),
    delayed_case("cached_property of a class the task uses",
                 {"defs": _defs("return x * Config().k", CACHED_PROPERTY.format(k=2))},
                 {"defs": _defs("return x * Config().k", CACHED_PROPERTY.format(k=3))}),
    delayed_case("metaclass",
                 {"defs": _defs("return x * Made()", METACLASS.format(k=2))},
                 {"defs": _defs("return x * Made()", METACLASS.format(k=3))}),
    delayed_case(
        "dataclass attribute that is not a field",
        {"header": "import dataclasses", "defs": TAGGED, "arg": "tagged(2)",
         "a_body": "return x.value + x.tag"},
        {"header": "import dataclasses", "defs": TAGGED, "arg": "tagged(3)",
         "a_body": "return x.value + x.tag"},
        recompute=frozenset({"a", "b", "c"}),
    ),
    delayed_case("module imported by the function that made the closure",
                 {"defs": MODULE_CLOSURE}, {"defs": MODULE_CLOSURE},
                 {"helpers.py": HELPERS}, {"helpers.py": HELPERS_EDITED}),
    delayed_case("user module as an argument",
                 {"header": "import helpers", "arg": "helpers",
                  "a_body": "return x.scale(1)"},
                 {"header": "import helpers", "arg": "helpers",
                  "a_body": "return x.scale(1)"},
                 {"helpers.py": HELPERS}, {"helpers.py": HELPERS_EDITED},
                 recompute=frozenset({"a", "b", "c"})),
]

# A helper edit must reach every collection API that takes a user function. Which tasks
# depend on the helper is the API's business: the result is checked, and that the side
# branch stays a hit.
API_EXPRESSIONS = {
    "map_blocks": "x.map_blocks(f).sum()",
    "map_overlap": "x.map_overlap(f, depth=1).sum()",
    "blockwise": "da.blockwise(f, 'ij', x, 'ij').sum()",
    "apply_along_axis": "da.apply_along_axis(lambda r: f(r).sum(), 0, x)",
    "array reduction": "da.reduction(x, lambda a, axis, keepdims: f(a).sum(axis=axis, "
                       "keepdims=keepdims), lambda a, axis, keepdims: a.sum(axis=axis, "
                       "keepdims=keepdims), dtype=float)",
    "bag.map": "b.map(f).sum()",
    "bag.filter": "b.filter(lambda v: f(v) > 5).count()",
    "bag.foldby": "b.foldby(lambda v: v % 2, lambda a, v: a + f(v), 0)",
    "bag.reduction": "b.reduction(lambda p: sum(map(f, p)), sum)",
    "map_partitions": "df.map_partitions(lambda p: p.assign(v=f(p.v)))",
    "series.apply": "df.v.apply(f, meta=('v', float))",
    "groupby.apply": "df.groupby('g').v.apply(lambda s: f(s.sum()), meta=('v', float))",
    "custom aggregation": "df.groupby('g').v.agg(dd.Aggregation('s', lambda s: f(s.sum()), "
                          "lambda s: s.sum()))",
    "assign callable": "df.assign(w=lambda d: f(d.v))",
    "to_delayed": "dask.delayed(sum)([dask.delayed(f)(v) for v in x.to_delayed().ravel()])",
}

CASES += [Case(f"helper edit through {api}", {"pipe.py": api_pipe(expr, 2)},
               {"pipe.py": api_pipe(expr, 3)}, recompute=None)
          for api, expr in API_EXPRESSIONS.items()]


CASES += SECOND_ROUND  # issue 10's value, version, path and IO cases
CASES += THIRD_ROUND  # issue 27's value cases

# xarray (issue 18): the input file, the function, the coordinates.
XARRAY_OPEN = ("ds = xr.open_dataset(os.path.join(HERE, 'data.nc'), engine='h5netcdf', "
               "chunks={'time': 4})")
XARRAY_UFUNC = ("result = xr.apply_ufunc(detrend, ds.temp, input_core_dims=[['x']], "
                "output_core_dims=[['x']], dask='parallelized', output_dtypes=[float])")
CASES += [
    Case("xarray NetCDF file content (same path)",
         {"pipe.py": xarray_pipe(f"{XARRAY_OPEN}\nresult = ds.temp.resample(time='1D').mean()")},
         recompute=MAIN, data=_write_netcdf, edit_data=_edit_netcdf),
    Case("xarray function applied with apply_ufunc",
         {"pipe.py": xarray_pipe(f"{XARRAY_OPEN}\n{XARRAY_UFUNC}")},
         {"pipe.py": xarray_pipe(f"{XARRAY_OPEN}\n{XARRAY_UFUNC}",
                                 detrend="v - v.max(axis=-1, keepdims=True)")},
         recompute=None, data=_write_netcdf),
    Case("xarray coordinate values that regroup a resample",
         {"pipe.py": xarray_pipe("ds = dataset().chunk({'time': 4})\n"
                                 "result = ds.temp.resample(time='1D').sum()")},
         {"pipe.py": xarray_pipe("ds = dataset().chunk({'time': 4})\n"
                                 "result = ds.temp.resample(time='1D').sum()",
                                 start="2000-01-01T12:00")},
         recompute=None),
    Case("xarray coordinate labels only (same data)",
         {"pipe.py": xarray_pipe("ds = dataset().chunk({'time': 4})\nresult = ds.temp * 2")},
         {"pipe.py": xarray_pipe("ds = dataset().chunk({'time': 4})\nresult = ds.temp * 2",
                                 labels=("a", "b", "d"))},
         recompute=None),
]


def check_unique() -> None:
    names = [c.slug for c in CASES]
    assert len(names) == len(set(names)), "case names must differ"


check_unique()
