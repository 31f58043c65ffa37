"""The value-handler registry: users' own types (``client_lib.register``), libraries
registered lazily, identifiers never taken for file names."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import dask
import pandas as pd
import pytest

from client_lib import register, task_hashes
from tests.client._value_hash import identity, value_hash

ROOT = Path(__file__).resolve().parents[2]


class Grid:
    """A user type whose state holds something that is not part of its value and cannot
    be hashed (unregistered, it would make every task that receives it volatile)."""

    def __init__(self, origin: tuple, values: list) -> None:
        self.origin, self.values = origin, values
        self.lock = threading.Lock()


class Opaque:
    pass


class Broken:
    pass


@register(Grid)
def _grid(grid: Grid) -> tuple:
    return (grid.origin, grid.values)


@register(Broken)
def _broken(obj: Broken) -> tuple:
    raise RuntimeError("cannot describe")


def test_a_registered_type_hashes_by_what_its_normaliser_returns():
    a = value_hash(Grid((0, 0), [1, 2]))
    assert a is not None
    assert value_hash(Grid((0, 0), [1, 2])) == a
    assert value_hash(Grid((0, 1), [1, 2])) != a
    assert value_hash(Grid((0, 0), [1, 3])) != a


def test_a_registered_type_differs_from_its_normalised_data():
    assert value_hash(Grid((0, 0), [1])) != value_hash(((0, 0), [1]))


def test_the_normaliser_code_is_part_of_the_hash():
    before = value_hash(Opaque())

    def normaliser(body):
        @register(Opaque)
        def normalise(obj):
            return int("1") if body == "int" else 1  # the same data either way

        return normalise

    normaliser("literal")
    registered = value_hash(Opaque())
    assert registered != before and value_hash(Opaque()) == registered
    normaliser("int")  # the same function, closing over another value
    assert value_hash(Opaque()) != registered


def test_a_failing_normaliser_makes_the_task_volatile_with_a_reason():
    from client_lib import cached_compute, last_report

    task = dask.delayed(identity, pure=True)(Broken(), dask_key_name="v")
    assert task_hashes(task) == {"v": None}
    cached_compute(task, cache="http://127.0.0.1:1", scheduler="sync")  # server down
    report = last_report()
    assert report.volatile == 1
    assert "cannot describe" in next(iter(report.volatile_reasons))


def test_a_pandas_subclass_from_elsewhere_keeps_its_own_state():
    """pandas' handlers describe pandas' own classes; a subclass's ``_metadata`` is not
    theirs to know, so it is hashed by its pickled state, metadata included."""

    class Tagged(pd.DataFrame):
        _metadata = ["units"]

        @property
        def _constructor(self):
            return Tagged

    def tagged(units):
        df = Tagged({"v": [1.0, 2.0]})
        df.units = units
        return df

    assert value_hash(tagged("m")) == value_hash(tagged("m"))
    assert value_hash(tagged("m")) != value_hash(tagged("km"))


def test_identifiers_are_never_looked_up_as_files(tmp_path, monkeypatch):
    """A module name or qualname is not a file name: a file named like the task's module
    in the current directory changes nothing."""
    monkeypatch.chdir(tmp_path)

    def hashed():
        return task_hashes(dask.delayed(identity, pure=True)(1, dask_key_name="v"))["v"]

    before = hashed()
    (tmp_path / identity.__module__).write_text("a file named like a module")
    (tmp_path / f"{identity.__module__}.identity").write_text("and like a qualname")
    assert hashed() == before


@pytest.mark.slow
def test_importing_and_hashing_imports_no_optional_library():
    code = (
        "import sys, dask, client_lib\n"
        "def f(x):\n    return x\n"
        "h = client_lib.task_hashes(dask.delayed(f, pure=True)([1, 'a.csv', 2.0], "
        "dask_key_name='v'))\n"
        "assert h['v'] is not None\n"
        "print(sorted(m for m in ('pandas', 'h5py', 'zarr', 'fsspec', 'distributed')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"
