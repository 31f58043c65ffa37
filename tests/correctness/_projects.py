"""Small user projects for the code-edit cases: the ``Case`` record, the source templates,
and importing a project's ``pipe`` module in-process (then forgetting it again).

Every case is a directory with a module ``pipe`` (and any helper modules it imports)
whose ``build()`` returns the collections to compute. Most cases share one shape,

    a = step_a(ARG)     b = step_b(a)     c = step_c(b)          (outputs c and side)
    side_in()           side = side_op(side_in)

and edit something that ``step_b`` depends on, so exactly ``b`` and ``c`` must recompute
while ``a`` is loaded and ``side`` stays a hit. Test-side only: nothing here imports
client_lib.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

__all__ = ["EVERYTHING", "MAIN", "Case", "api_pipe", "array_pipe", "delayed_case",
           "imported_project", "key_name", "pipe", "xarray_pipe"]

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

    def write(self, directory: Path) -> None:
        """The project before the edit, with its input data."""
        for path, text in self.files.items():
            (directory / path).parent.mkdir(parents=True, exist_ok=True)
            (directory / path).write_text(text)
        if self.data is not None:
            self.data(directory)

    def apply_edit(self, directory: Path) -> None:
        """The edit: rewritten files (no stale ``.pyc`` left to run) and changed data."""
        for path, text in self.edit.items():
            (directory / path).write_text(text)
        for cache in list(directory.rglob("__pycache__")):
            shutil.rmtree(cache)
        if self.edit_data is not None:
            self.edit_data(directory)


@contextmanager
def imported_project(directory: str) -> Iterator[ModuleType]:
    """The project's ``pipe`` module, imported from ``directory``. On exit the project's
    modules leave ``sys.modules`` (cases share module names such as ``pipe`` and
    ``helpers``; one shadows the standard library's ``wave``, which is put back), and the
    working directory is restored (a case may change it)."""
    cwd = os.getcwd()
    own = {p.stem if p.suffix == ".py" else p.name for p in Path(directory).iterdir()
           if p.suffix == ".py" or (p / "__init__.py").exists()}
    shadowed = {name: sys.modules.pop(name) for name in own if name in sys.modules}
    sys.path.insert(0, directory)
    importlib.invalidate_caches()
    try:
        yield importlib.import_module("pipe")
    finally:
        sys.path.remove(directory)
        os.chdir(cwd)
        for name, module in list(sys.modules.items()):
            path = getattr(module, "__file__", None) or ""
            if path.startswith(directory + os.sep):
                del sys.modules[name]
        sys.modules.update(shadowed)


# -- source templates ----------------------------------------------------------------------

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
{c_body}


{side}

def build():
{prepare}
    a = dask.delayed(step_a, pure=True)({arg}, dask_key_name="a")
    b = dask.delayed(step_b, pure=True)(a, dask_key_name="b")
    c = dask.delayed(step_c, pure=True)(b, dask_key_name="c")
    return [c, side()]
'''


def pipe(defs: str = "def step_b(x):\n    return x * 2", *, header: str = "",
         arg: str = "1", prepare: str = "pass", a_body: str = "return x + 1",
         c_body: str = "return x - 3") -> str:
    return PIPE.format(header=header, side=SIDE, defs=textwrap.dedent(defs).strip() + "\n",
                       a_body=textwrap.indent(a_body, "    "),
                       c_body=textwrap.indent(c_body, "    "),
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


# A helper edit must reach every collection API that takes a user function.
API_PIPE = '''\
import dask
import dask.array as da
import dask.bag as db
import dask.dataframe as dd
import numpy as np
import pandas as pd

K = {k}


def f(x):
    return x * K


{side}

def build():
    x = da.ones((20, 20), chunks=10)
    b = db.from_sequence(range(10), npartitions=2)
    df = dd.from_pandas(pd.DataFrame({{"g": np.arange(20) % 3, "v": np.arange(20.0)}}),
                        npartitions=2)
    return [{expr}, side()]
'''


def api_pipe(expr: str, k: int) -> str:
    return API_PIPE.format(k=k, expr=expr, side=SIDE)


# xarray: a dataset opened from a file or built in memory, with coordinates.
XARRAY_PIPE = '''\
import os

import dask
import numpy as np
import pandas as pd
import xarray as xr

HERE = os.path.dirname(os.path.abspath(__file__))
START = {start!r}
LABELS = {labels!r}


def dataset():
    time = pd.date_range(START, periods=12, freq="6h")
    values = np.arange(36.0).reshape(12, 3)
    return xr.Dataset({{"temp": (("time", "x"), values)}},
                      coords={{"time": time, "x": LABELS}})


def detrend(v):
    return {detrend}


{side}

def build():
{body}
    return [result, side()]
'''


def xarray_pipe(body: str, *, start: str = "2000-01-01", labels: tuple = ("a", "b", "c"),
                detrend: str = "v - v.mean(axis=-1, keepdims=True)") -> str:
    return XARRAY_PIPE.format(start=start, labels=list(labels), detrend=detrend, side=SIDE,
                              body=textwrap.indent(textwrap.dedent(body).strip(), "    "))
