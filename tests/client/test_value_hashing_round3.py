"""Issue 27's value classes at the hash level, both ways: values that differ in what code
can see hash apart (the fresh-process cases are in tests/correctness/_round3_cases.py),
and values that are the same hash alike however they were built (chunking, slicing,
what sits under a mask or a null), so that exactness costs no misses."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from client_lib.hashing import value_digest


def same(a, b) -> bool:
    return value_digest(a) == value_digest(b)


def arrow(values, kind=None, chunks=None) -> pd.Series:
    data = (pa.chunked_array([pa.array(c, kind) for c in chunks]) if chunks
            else pa.chunked_array([pa.array(values, kind)]))
    return pd.Series(pd.arrays.ArrowExtensionArray(data))


@pytest.mark.parametrize("left, right", [
    (pd.Series([0.0, 1.0], dtype="Float64"), pd.Series([-0.0, 1.0], dtype="Float64")),
    (arrow([0.0, 1.0]), arrow([-0.0, 1.0])),
    (arrow([float("nan"), 1.0]), arrow([None, 1.0])),
    (arrow([[0.0], [1.0]]), arrow([[-0.0], [1.0]])),
    (arrow([{"a": 0.0}]), arrow([{"a": -0.0}])),
    (arrow(["", "b"]), arrow([None, "b"])),
    (arrow(["ab", "c"]), arrow(["a", "bc"])),
    (arrow([1, 2], pa.int64()), arrow([1, 2], pa.int32())),
    (pd.Series(pd.Categorical([1, "1", 1])), pd.Series(pd.Categorical(["1", 1, "1"]))),
    (pd.Series(pd.Categorical([b"a", "a"])), pd.Series(pd.Categorical(["a", b"a"]))),
    (pd.Series(pd.IntervalIndex.from_breaks([0.0, 1.0])),
     pd.Series(pd.IntervalIndex.from_breaks([-0.0, 1.0]))),
    (pd.Series(pd.arrays.SparseArray([0.0, 1.0], fill_value=np.nan)),
     pd.Series(pd.arrays.SparseArray([-0.0, 1.0], fill_value=np.nan))),
    (pd.Series([np.str_("a"), "b"], dtype=object), pd.Series(["a", np.str_("b")], dtype=object)),
    (pd.Series(["ab", "c"], dtype=object), pd.Series(["a", "bc"], dtype=object)),
    (pd.Series([b"x", b"y"], dtype=object), pd.Series(["x", "y"], dtype=object)),
    (pd.DataFrame({"a": [1]}), pd.DataFrame({"a": [1]}).set_flags(allows_duplicate_labels=False)),
    (np.zeros(2, dtype=np.dtype("f8", metadata={"u": 1})),
     np.zeros(2, dtype=np.dtype("f8", metadata={"u": 2}))),
    (np.zeros(1, dtype=[("a", np.dtype("f8", metadata={"u": 1}))]),
     np.zeros(1, dtype=[("a", np.dtype("f8", metadata={"u": 2}))])),
    (np.ma.masked_array([1, 2], mask=[0, 1]), np.ma.masked_array([1, 2], mask=[0, 1],
                                                                  hard_mask=True)),
    (memoryview(np.arange(4, dtype=np.int32)),
     memoryview(np.arange(4, dtype=np.int32).view(np.float32))),
    (memoryview(b"ab"), memoryview(bytearray(b"ab"))),
    (b"ab", bytearray(b"ab")),
    (np.arange(6.0).reshape(2, 3), np.asfortranarray(np.arange(6.0).reshape(2, 3))),
])
def test_values_code_can_tell_apart_hash_apart(left, right):
    assert not same(left, right)


def test_equal_values_hash_alike_however_they_were_built():
    # Arrow: chunking, slicing (offsets that do not start at 0), what sits under a null
    assert same(arrow(None, chunks=[[1.0], [None, 2.0]]), arrow([1.0, None, 2.0]))
    strings = pd.Series(["xx", None, "yyy", "z"], dtype="str")
    assert same(strings.iloc[1:].reset_index(drop=True),
                pd.Series([None, "yyy", "z"], dtype="str"))
    assert same(arrow(None, pa.string(), chunks=[["a", None], ["b"]]),
                arrow(["a", None, "b"], pa.string()))
    # masked arrays: the value under the mask is never read
    garbage = pd.array([None, 1.0], dtype="Float64")
    garbage._data[0] = 123.0
    assert same(pd.Series(garbage), pd.Series(pd.array([None, 1.0], dtype="Float64")))
    # categoricals built from other inputs, same categories and codes
    assert same(pd.Series(pd.Categorical(["b", "a"], categories=["a", "b"])),
                pd.Series(pd.Categorical(["b", "a"])))
    # numpy: a C-ordered strided view is its copy; F order copies stay F order
    assert same(np.arange(6.0)[::2], np.arange(6.0)[::2].copy())
    f = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    assert same(f, f.copy(order="F"))
    assert same(np.arange(3.0).reshape(3, 1), np.asfortranarray(np.arange(3.0).reshape(3, 1)))
    # a masked array's lazily filled fill value and a pickle round trip change nothing
    masked = np.ma.masked_array([1.0, 2.0, 3.0], mask=[0, 1, 0])
    before = value_digest(masked)
    repr(masked), masked.filled(), masked.sum()
    assert value_digest(masked) == before
    import pickle

    assert value_digest(pickle.loads(pickle.dumps(masked))) == before


def test_memmaps_hash_by_data(tmp_path):
    first = np.memmap(tmp_path / "a.bin", dtype="f8", mode="w+", shape=(3,))
    second = np.memmap(tmp_path / "b.bin", dtype="f8", mode="w+", shape=(3,))
    first[:] = second[:] = 1.5
    assert same(first, second)
    second[0] = 2.5
    assert not same(first, second)


def test_structured_dtypes_with_fields_out_of_order_hash():
    """``x[["b", "a"]]`` has its fields out of order, which ``dtype.descr`` refuses (the
    oracle campaign: Dask's test_field_access failed through the cache)."""
    x = np.array([(1, 1.0), (2, 2.0)], dtype=[("a", "i4"), ("b", "f4")])
    assert not same(x[["b", "a"]], x[["a", "b"]])
    assert not same(np.dtype([("a", "i4"), ("b", "f8")], align=True),
                    np.dtype([("a", "i4"), ("b", "f8")]))
    assert not same(x.dtype, x.view(np.recarray).dtype)  # np.record scalars, not np.void


def test_extension_arrays_and_pickle_buffers_held_as_values_hash_by_their_data():
    """A pandas extension array outside a Series (an argument of a dataframe method
    call), and the pickle buffers protocol 5 reduces buffers to, were volatile (the
    oracle campaign: Dask's test_unknown_categories)."""
    import pickle

    first = pd.array(["a", "b", None], dtype="str")
    assert same(first, pd.array(["a", "b", None], dtype="str"))
    assert not same(first, pd.array(["a", "c", None], dtype="str"))
    assert not same(first, pd.Series(first))
    assert not same(pd.array([1, None], dtype="Int64"), pd.array([1, 2], dtype="Int64"))
    assert not same(pd.Categorical([1, "1"]), pd.Categorical(["1", 1]))
    assert same(pickle.PickleBuffer(b"ab"), pickle.PickleBuffer(b"ab"))
    assert not same(pickle.PickleBuffer(b"ab"), pickle.PickleBuffer(b"ac"))


def test_long_doubles_hash_by_their_value_not_their_padding():
    """The oracle campaign: x87 long doubles fill 10 of their 12 or 16 bytes, numpy leaves
    the rest uninitialised, and a ``clongdouble`` scalar hashed apart in every process."""
    for dtype in (np.longdouble, np.clongdouble):
        clean = np.arange(4, dtype=dtype)
        dirty = clean.copy()
        raw = dirty.view(np.uint8).reshape(-1, np.dtype(np.longdouble).itemsize)
        raw[:, 10:] = 0xAB  # padding only where there is any (x87)
        assert np.array_equal(clean, dirty)
        assert value_digest(clean) == value_digest(dirty)
        assert value_digest(clean[1]) == value_digest(dirty[1])
        assert value_digest(clean) != value_digest(clean + 1)


def test_structured_arrays_hash_by_their_fields_not_the_bytes_between_them():
    """The oracle campaign's ``test_field_access_with_shape``: ``x[["col1"]]`` keeps the
    whole item with col2's place as padding, and a copy numpy makes of such an array leaves
    it uninitialised, so the hash changed in every process. Gaps, aligned padding and x87
    long doubles inside fields are left out; every field's bytes count."""
    dtype = np.dtype([("col1", "f4", (3, 2)), ("col2", "f4", 3)])
    data = np.ones(4, dtype=dtype)
    data["col2"] = np.arange(12).reshape(4, 3)
    clean = data[["col1"]]  # itemsize 36, col1 in bytes 0-23
    dirty = np.empty_like(clean)
    dirty.view(np.uint8)[:] = 0xAB
    dirty["col1"] = clean["col1"]
    assert dirty.dtype == clean.dtype and np.array_equal(clean, dirty)
    assert value_digest(clean) == value_digest(dirty)
    assert value_digest(clean[1]) == value_digest(dirty[1])
    changed = clean.copy()
    changed["col1"][0, 0, 0] = 2
    assert value_digest(clean) != value_digest(changed)
    aligned = np.dtype([("a", "u1"), ("b", "f8"), ("c", np.longdouble)], align=True)
    one, two = np.zeros(3, aligned), np.empty(3, aligned)
    two.view(np.uint8)[:] = 0xCD
    two["a"], two["b"], two["c"] = 0, 0, 0
    assert value_digest(one) == value_digest(two)
    assert value_digest(data) != value_digest(data[["col1", "col2"]][["col2", "col1"]])


_HALF_IMPORTED_PANDAS = """
import importlib.util, sys, types
from client_lib.hashing.pandas_values import options_in_effect
spec = importlib.util.find_spec("pandas")
half = types.ModuleType("pandas")  # what another thread sees while pandas imports
half.__spec__, half.__path__ = spec, list(spec.submodule_search_locations)
spec._initializing = True
sys.modules["pandas"] = half
print(options_in_effect(), "pandas._config" in sys.modules)
"""


def test_pandas_options_are_not_read_from_a_pandas_still_importing():
    # The recipe poster thread read pandas' options while the user's thread was importing
    # pandas: its import of pandas._config broke the user's import (circular import error).
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _HALF_IMPORTED_PANDAS], capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["()", "False"]
