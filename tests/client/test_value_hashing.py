"""Property tests: argument values hash equal exactly when they are equal in type and
content, in this process and in a fresh one."""

from __future__ import annotations

import json
import pickle
import struct
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.client import _value_hash


def value_hash(value) -> str:
    h = _value_hash.value_hash(value)
    assert h is not None
    return h


def canon(v):
    """Equality in type and content (1, 1.0 and True differ; NaN equals NaN)."""
    t = type(v).__name__
    if isinstance(v, float):
        return (t, struct.pack("<d", v))
    if isinstance(v, (list, tuple)):
        return (t, tuple(canon(x) for x in v))
    if isinstance(v, dict):
        return (t, tuple((canon(k), canon(x)) for k, x in v.items()))
    if isinstance(v, (set, frozenset)):
        return (t, tuple(sorted(repr(canon(x)) for x in v)))
    return (t, v)


scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True)
    | st.text(max_size=20)
    | st.binary(max_size=20)
    | st.complex_numbers()
)
hashables = st.recursive(
    scalars, lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=4), max_leaves=8
)
values = st.recursive(
    scalars | hashables,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=5) | st.integers(), inner, max_size=4)
        | st.sets(hashables, max_size=4)
        | st.frozensets(hashables, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(values, min_size=2, max_size=6))
def test_values_hash_equal_iff_equal_in_type_and_content(batch):
    groups_by_canon: dict = {}
    groups_by_hash: dict = {}
    for i, v in enumerate(batch):
        groups_by_canon.setdefault(repr(canon(v)), set()).add(i)
        groups_by_hash.setdefault(value_hash(v), set()).add(i)
    assert sorted(map(sorted, groups_by_canon.values())) == sorted(
        map(sorted, groups_by_hash.values())
    )


def test_distinct_lookalikes_hash_differently():
    lookalikes = [
        1,
        1.0,
        True,
        "1",
        b"1",
        (1,),
        [1],
        {1},
        frozenset({1}),
        {1: None},
        np.int64(1),
        np.float64(1.0),
        np.array(1),
        np.array([1]),
        None,
        0,
        -0.0,
        0.0,
        "",
        b"",
        (),
        [],
    ]
    hashes = [value_hash(v) for v in lookalikes]
    assert len(set(hashes)) == len(lookalikes)


_CHILD = """
import json, pickle, sys
from tests.client._value_hash import value_hash
values = pickle.load(open(sys.argv[1], "rb"))
json.dump([value_hash(v) for v in values], sys.stdout)
"""


@pytest.mark.slow
@settings(max_examples=3, deadline=None)
@given(st.lists(values, min_size=20, max_size=40))
def test_values_hash_the_same_in_a_fresh_process(tmp_path_factory, batch):
    path = tmp_path_factory.mktemp("values") / "values.pkl"
    path.write_bytes(pickle.dumps(batch))
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONHASHSEED": "777", "PATH": "/usr/bin:/bin"},
    )
    assert json.loads(out.stdout) == [value_hash(v) for v in batch]


array_dtypes = (
    hnp.integer_dtypes()
    | hnp.unsigned_integer_dtypes()
    | hnp.floating_dtypes()
    | hnp.complex_number_dtypes()
    | hnp.boolean_dtypes()
    | hnp.datetime64_dtypes()
    | hnp.timedelta64_dtypes()
    | hnp.byte_string_dtypes(max_len=4)
    | hnp.unicode_string_dtypes(max_len=4)
)


@settings(max_examples=120, deadline=None)
@given(hnp.arrays(array_dtypes, hnp.array_shapes(min_dims=0, max_dims=4, max_side=5)), st.data())
def test_arrays_hash_by_dtype_shape_and_bytes(arr, data):
    h = value_hash(arr)
    assert value_hash(arr.copy()) == h
    # The memory order counts where it can change what code sees (np.nditer, order "K":
    # issue 27, case 4): F order differs from C order once two axes are longer than one.
    fortran = value_hash(np.array(arr, order="F"))
    assert (fortran == h) == (sum(n > 1 for n in arr.shape) < 2)
    assert value_hash(np.array(arr, order="F").copy(order="F")) == fortran
    if arr.ndim and arr.shape[0] > 1:  # a reversed view is walked backwards in memory
        assert value_hash(arr[::-1]) != value_hash(arr[::-1].copy())
    if arr.ndim >= 1 and arr.shape[0] > 1:
        strided = np.concatenate([arr, arr])[::2]
        assert value_hash(strided) == value_hash(np.ascontiguousarray(strided))
    if arr.size:
        edited = arr.copy()
        index = data.draw(st.tuples(*(st.integers(0, n - 1) for n in arr.shape)))
        raw = edited.reshape(-1).view(np.uint8)
        flat = int(np.ravel_multi_index(index, arr.shape)) if arr.ndim else 0
        if arr.dtype.kind == "U":  # flip the low byte of a code point: it stays valid unicode
            low = flat * arr.itemsize + (3 if arr.dtype.byteorder == ">" else 0)
            raw[low] ^= 0x01
        else:
            raw[flat * arr.itemsize] ^= 0xFF
        assert value_hash(edited) != h
    assert value_hash(arr.reshape(-1)) != h or arr.ndim == 1
    if arr.ndim and arr.dtype.itemsize > 1:  # same bytes, another dtype
        assert value_hash(np.ascontiguousarray(arr).view(np.uint8)) != h
