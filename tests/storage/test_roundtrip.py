"""Property tests: every storable value comes back bit-exact from every backend."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import cloudpickle
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import storage._zarr
from storage import BlobStore, LocalStorage, ObjectStore, ZarrArrayStore
from storage._zarr import chunk_shape
from tests.storage.contract import encode_array, encode_pickle, task

pytestmark = pytest.mark.filterwarnings(
    "ignore::zarr.core.dtype.common.UnstableSpecificationWarning"
)

ENDIANNESS = "?"
dtypes = st.one_of(
    hnp.boolean_dtypes(),
    hnp.integer_dtypes(endianness=ENDIANNESS),
    hnp.unsigned_integer_dtypes(endianness=ENDIANNESS),
    hnp.floating_dtypes(endianness=ENDIANNESS, sizes=(16, 32, 64)),
    hnp.complex_number_dtypes(endianness=ENDIANNESS),
    hnp.datetime64_dtypes(endianness=ENDIANNESS, max_period="Y", min_period="as"),
    hnp.timedelta64_dtypes(endianness=ENDIANNESS, max_period="Y", min_period="as"),
    st.sampled_from([np.dtype("<M8"), np.dtype(">m8")]),  # unit-less
    hnp.byte_string_dtypes(max_len=6),
    hnp.unicode_string_dtypes(endianness=ENDIANNESS, max_len=4),
)
shapes = hnp.array_shapes(min_dims=0, max_dims=5, min_side=0, max_side=5)


@st.composite
def arrays(draw: st.DrawFn) -> np.ndarray:
    """Arrays of every supported dtype with arbitrary bytes (NaN payloads, trailing NULs),
    sometimes Fortran-ordered or a non-contiguous view."""
    dtype = draw(dtypes)
    shape = draw(shapes)
    raw = draw(
        st.binary(
            min_size=dtype.itemsize * math.prod(shape), max_size=dtype.itemsize * math.prod(shape)
        )
    )
    if dtype.kind == "b":  # numpy bools are the bytes 0 and 1 (others are refused)
        raw = bytes(b & 1 for b in raw)
    if dtype.kind == "U":  # code points above U+10FFFF are not characters (numpy cannot print them)
        units = np.frombuffer(raw, dtype=np.dtype("u4").newbyteorder(dtype.byteorder))
        raw = (units % 0x110000).astype(units.dtype).tobytes()
    value = np.frombuffer(raw, dtype=dtype).reshape(shape)
    layout = draw(st.sampled_from(["c", "fortran", "transposed", "strided"]))
    if layout == "fortran":
        value = np.asfortranarray(value)
    elif layout == "transposed":
        value = value.T
    elif layout == "strided" and value.ndim:
        value = np.repeat(value, 2, axis=0)[::2]
    return value


@contextmanager
def tiny_zarr_chunks() -> Iterator[None]:
    """Force many chunks per small array so chunk-boundary handling is exercised."""
    with mock.patch.object(storage._zarr, "CHUNK_TARGET_BYTES", 24):
        yield


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ObjectStore]:
    root: Path = tmp_path_factory.mktemp("roundtrip")
    return {
        "blob": BlobStore(root / "blob"),
        "zarr": ZarrArrayStore(root / "zarr"),
        "local": LocalStorage(root / "local"),
    }


def check_round_trip(store: ObjectStore, value: np.ndarray, piece: int) -> None:
    encoded = encode_array(value)
    if not store.accepts(encoded.header):
        assert value.dtype.itemsize == 0
        return
    store.put(encoded.header, encoded.chunks(piece), digest=encoded.digest, task=task())
    stored = store.get(encoded.digest)
    assert bytes(stored.body) == encoded.body
    back = stored.array()
    assert back.dtype == value.dtype and back.shape == value.shape
    assert back.tobytes() == np.ascontiguousarray(value).tobytes()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@pytest.mark.slow
@given(value=arrays(), piece=st.integers(1, 64))
def test_blob_round_trip(stores: dict[str, ObjectStore], value: np.ndarray, piece: int) -> None:
    check_round_trip(stores["blob"], value, piece)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@pytest.mark.slow
@given(value=arrays(), piece=st.integers(1, 64))
def test_zarr_round_trip(stores: dict[str, ObjectStore], value: np.ndarray, piece: int) -> None:
    with tiny_zarr_chunks():
        check_round_trip(stores["zarr"], value, piece)


@pytest.mark.parametrize(
    "dtype",
    ["<f8", ">f8", "<c16", ">i4", "|b1", "<M8[ns]", ">m8[s]", "<M8", "|S5", "<U3", ">U2", "<f2"],
)
def test_large_arrays_go_to_zarr_bit_exact(tmp_path: Path, dtype: str) -> None:
    """Arrays above the routing threshold, across several real 16 MiB chunks for float64."""
    storage_ = LocalStorage(tmp_path)
    dt = np.dtype(dtype)
    count = (40 * 2**20 if dtype == "<f8" else 2**21) // dt.itemsize // 8 * 8
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 256, count * dt.itemsize, dtype=np.uint8)
    if dt.kind == "b":
        raw &= 1
    if dt.kind == "S":
        raw[rng.random(raw.size) < 0.5] = 0  # plenty of trailing NULs
    value = np.frombuffer(raw.tobytes(), dtype=dt).reshape(-1, 8)
    encoded = encode_array(value)
    chunks = (memoryview(encoded.body)[i : i + 2**20] for i in range(0, len(encoded.body), 2**20))
    result = storage_.put(encoded.header, chunks, digest=encoded.digest, task=task())
    assert result.sidecar.storage == "zarr"
    assert bytes(storage_.get(encoded.digest).body) == encoded.body


def test_compressible_arrays_are_compressed(tmp_path: Path) -> None:
    store = ZarrArrayStore(tmp_path)
    smooth = encode_array(np.repeat(np.arange(2**14, dtype="<f8"), 64))  # 8 MiB
    store.put(smooth.header, smooth.chunks(2**20), digest=smooth.digest, task=task())
    on_disk = sum(p.stat().st_size for p in store.object_path(smooth.digest).rglob("*"))
    assert on_disk < len(smooth.body) / 10
    assert bytes(store.get(smooth.digest).body) == smooth.body


@given(
    shape=hnp.array_shapes(min_dims=0, max_dims=5, min_side=0, max_side=50),
    itemsize=st.sampled_from([1, 2, 4, 8, 16, 40]),
    target=st.integers(1, 5000),
)
def test_chunk_shape_is_a_contiguous_slab(
    shape: tuple[int, ...], itemsize: int, target: int
) -> None:
    with mock.patch.object(storage._zarr, "CHUNK_TARGET_BYTES", target):
        chunks = chunk_shape(shape, itemsize)
    assert len(chunks) == len(shape) and all(c >= 1 for c in chunks)
    assert itemsize * math.prod(chunks) <= max(target, itemsize)
    split_axes = [i for i, (c, n) in enumerate(zip(chunks, shape, strict=True)) if c < max(n, 1)]
    if split_axes:  # axes before the last split axis are 1, axes after it are whole
        split = split_axes[-1]
        assert all(c == 1 for c in chunks[:split])


class Point:
    def __init__(self, x: float, y: float) -> None:
        self.x, self.y = x, y

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)


python_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
    | st.builds(Point, st.floats(allow_nan=False), st.floats(allow_nan=False)),
    lambda children: (
        st.lists(children)
        | st.dictionaries(st.text(), children)
        | st.tuples(children, children)
        | st.frozensets(st.integers())
    ),
    max_leaves=20,
)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@pytest.mark.slow
@given(value=python_values)
def test_pickle_round_trip(stores: dict[str, ObjectStore], value: object) -> None:
    encoded = encode_pickle(value)
    store = stores["local"]
    store.put(encoded.header, encoded.chunks(7), digest=encoded.digest, task=task())
    stored = store.get(encoded.digest)
    assert stored.sidecar.storage == "blob"
    assert cloudpickle.loads(stored.body) == value
