"""The mutation cases: a small user project, one edit, and what must recompute.

Each case is a directory with a module ``pipe`` (and any helper modules it imports) whose
``build()`` returns the collections to compute. Most cases share one shape,

    a = step_a(ARG)     b = step_b(a)     c = step_c(b)          (outputs c and side)
    side_in()           side = side_op(side_in)

and edit something that ``step_b`` depends on, so exactly ``b`` and ``c`` must recompute
while ``a`` is loaded and ``side`` stays a hit. Array cases read files and expect every task
outside the ``side`` branch to recompute. Test-side only: nothing here imports client_lib.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["CASES", "Case", "LIBRARIES", "MAIN", "EVERYTHING", "key_name"]

MAIN = "main"  # every task outside the side branch recomputes
EVERYTHING = "everything"  # every task recomputes (a new namespace)


def key_name(key: object) -> str:
    """``"b"`` for ``"b"``, ``"sum-aggregate-..."`` for ``("sum-aggregate-...", 0)``."""
    return key if isinstance(key, str) else str(key[0])  # type: ignore[index]


@dataclass(frozen=True)
class Case:
    """One edit. ``files`` is the project before the edit and ``edit`` the files the edit
    rewrites; ``recompute`` is the set of task names that must run after the edit (or
    ``MAIN``/``EVERYTHING``; ``None``: any, only the result is checked). ``data`` writes
    input files before the first run and ``edit_data`` changes them in place."""

    name: str
    files: dict[str, str]
    edit: dict[str, str] = field(default_factory=dict)
    recompute: frozenset[str] | str | None = frozenset({"b", "c"})
    data: Callable[[Path], None] | None = None
    edit_data: Callable[[Path], None] | None = None
    new_namespace: bool = False
    same_result: bool = False  # the edit keeps the value (a rechunk, a version bump)
    library: str | None = None  # the tiny installed package the case uses, if any

    @property
    def slug(self) -> str:
        return "".join(c if c.isalnum() else "_" for c in self.name.lower())


# The branch that no edit touches: it must stay a hit.
SIDE = '''\
def side_in():
    return 40


def side_op(x):
    return x + 2


def side():
    s = dask.delayed(side_in, pure=True)(dask_key_name="side_in")
    return dask.delayed(side_op, pure=True)(s, dask_key_name="side")
'''

PIPE = '''\
import functools

import dask
import numpy as np
{header}

def step_a(x):
{a_body}

{defs}

def step_c(x):
    return x - 3


{side}

def build():
{prepare}
    a = dask.delayed(step_a, pure=True)({arg}, dask_key_name="a")
    b = dask.delayed(step_b, pure=True)(a, dask_key_name="b")
    c = dask.delayed(step_c, pure=True)(b, dask_key_name="c")
    return [c, side()]
'''


def pipe(defs: str = "def step_b(x):\n    return x * 2", *, header: str = "",
         arg: str = "1", prepare: str = "pass", a_body: str = "return x + 1") -> str:
    return PIPE.format(header=header, side=SIDE, defs=textwrap.dedent(defs).strip() + "\n",
                       a_body=textwrap.indent(a_body, "    "),
                       arg=arg, prepare=textwrap.indent(textwrap.dedent(prepare).strip(),
                                                        "    "))


def delayed_case(name: str, before: dict, after: dict, helpers: dict | None = None,
                 edited_helpers: dict | None = None, **options) -> Case:
    """A case on the shared shape: ``before``/``after`` are keyword arguments of
    :func:`pipe`; ``helpers`` are other files of the project."""
    files = {"pipe.py": pipe(**before), **(helpers or {})}
    edit = dict(edited_helpers or {})
    if after != before:
        edit["pipe.py"] = pipe(**after)
    return Case(name, files, edit, **options)


ARRAY_PIPE = '''\
import os

import dask
import dask.array as da
import numpy as np
{header}

HERE = os.path.dirname(os.path.abspath(__file__))


{side}

def build():
{body}
    return [(x * 2).sum(axis=0), x[::3].mean(), side()]
'''


def array_pipe(body: str, header: str = "") -> str:
    return ARRAY_PIPE.format(header=header, side=SIDE,
                             body=textwrap.indent(textwrap.dedent(body).strip(), "    "))


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


def check_unique() -> None:
    names = [c.slug for c in CASES]
    assert len(names) == len(set(names)), "case names must differ"


check_unique()
