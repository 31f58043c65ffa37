"""pandas frames as Parquet (issue 12 part 4): exact round trips through the codec, large
frames stored as Parquet files any tool can read, and what Parquet cannot hold exactly
pickled instead. The equality corpus runs every frame through Parquet too
(tests/client/test_cached_compute.py, fresh processes, threads and LocalCluster)."""

from __future__ import annotations

import uuid

import dask
import numpy as np
import pandas as pd
import pytest

from client_lib import CacheClient, cached_compute, last_report, task_hashes
from client_lib.wire import codec
from tests._compare import assert_same
from tests.client._corpus_values import _typed_frame


@pytest.fixture(autouse=True)
def store_everything():
    """These results are cheap to compute: ``auto`` would rightly not store them (it stores
    large results only when they pay back, tests/client/test_load_speeds.py)."""
    with dask.config.set({"result-cache.policy": "all"}):
        yield


def _round_trip(value):
    enc = codec.encode(value)
    return enc.kind, codec.decode(enc.kind, enc.dtype, enc.shape, enc.body)


def _strictly_equal(actual, expected) -> None:
    assert type(actual) is type(expected)
    if isinstance(expected, pd.DataFrame):
        pd.testing.assert_frame_equal(actual, expected, check_exact=True, check_freq=True,
                                      check_index_type=True, check_column_type=True)
    else:
        pd.testing.assert_series_equal(actual, expected, check_exact=True, check_freq=True,
                                       check_index_type=True)
    assert actual.attrs == expected.attrs


EXACT = {
    "typed, MultiIndex": _typed_frame(),
    "tz-aware index": pd.DataFrame({"v": np.arange(5.0)}, index=pd.DatetimeIndex(
        pd.date_range("2024-01-01", periods=5, tz="Europe/Paris").tolist(), name="t")),
    "range index": pd.DataFrame({"v": np.arange(5)}, index=pd.RangeIndex(2, 12, 2)),
    "named columns": pd.DataFrame({"a": [1, 2]}).rename_axis("cols", axis=1),
    "series, no name": pd.Series(np.arange(4.0)),
    "series, int name": pd.Series(pd.Categorical(["a", "b"]), name=5),
    "series, tz": _typed_frame()["tz"],
    "period and interval": pd.DataFrame({"p": pd.period_range("2024", periods=3, freq="M"),
                                         "i": pd.interval_range(0, 3)}),
    "empty": pd.DataFrame({"a": pd.Series([], dtype="float64")}),
    # read back as a str column, converted back to the recorded object dtype
    "object strings with NaN": pd.DataFrame({"s": ["a", np.nan]}, dtype=object),
}

INEXACT = {
    # pandas' UTC is datetime.timezone.utc, read back as another class of zone
    "utc": pd.DataFrame({"t": pd.date_range("2024-01-01", periods=2, tz="UTC")}),
    "complex": pd.DataFrame({"c": np.arange(3) * 1j}),
    "mixed objects": pd.DataFrame({"m": [1, "a", 2.0]}),
    "index freq": pd.DataFrame({"v": [1, 2]}, index=pd.date_range("2024", periods=2,
                                                                   freq="D")),
    "tuple name": pd.Series([1, 2], name=("a", 1)),
    "range level": pd.DataFrame({"v": range(4)},
                                index=pd.MultiIndex.from_product([["a", "b"], range(2)])),
    "subclass": type("Sub", (pd.DataFrame,), {})({"a": [1]}),
}


@pytest.fixture
def every_frame_as_parquet():
    with dask.config.set({"result-cache.parquet-min-bytes": 0}):
        yield


@pytest.mark.parametrize("name", list(EXACT))
def test_frames_parquet_holds_exactly_round_trip_as_parquet(name, every_frame_as_parquet):
    value = EXACT[name]
    value.attrs = {"units": "m"} if name == "named columns" else {}
    kind, back = _round_trip(value)
    assert kind == "parquet"
    _strictly_equal(back, value)


@pytest.mark.parametrize("name", list(INEXACT))
def test_what_parquet_cannot_hold_exactly_is_pickled(name, every_frame_as_parquet):
    value = INEXACT[name]
    kind, back = _round_trip(value)
    assert kind == "pickle"
    _strictly_equal(back, value)


def test_small_frames_stay_pickles():
    kind, back = _round_trip(_typed_frame())
    assert kind == "pickle"
    _strictly_equal(back, _typed_frame())


def _large_frame(seed: int) -> pd.DataFrame:
    n = 60_000  # ~1.5 MiB: above the default threshold (1 MiB)
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "when": pd.date_range("2024-01-01", periods=n, freq="s", tz="Europe/Paris"),
        "cat": pd.Categorical.from_codes(rng.integers(0, 3, n), categories=["x", "y", "z"]),
        "count": pd.array(rng.integers(0, 9, n), dtype="Int64"),
        "value": rng.random(n),
    })


def _scaled(frame: pd.DataFrame, factor: float) -> pd.DataFrame:
    return frame.assign(value=frame["value"] * factor)


def test_large_frame_is_a_parquet_file_on_the_server(cache_server):
    namespace = f"frames-{uuid.uuid4().hex}"
    expected = _scaled(_large_frame(1), 2.0)
    task = dask.delayed(_scaled, pure=True)(_large_frame(1), 2.0, dask_key_name="scaled")
    (cold,) = cached_compute(task, cache=cache_server.url, namespace=namespace)
    _strictly_equal(cold, expected)

    task_hash = task_hashes(task, namespace=namespace)["scaled"]
    entry = CacheClient(cache_server.url).entry(task_hash)
    assert (entry["kind"], entry["storage"]) == ("parquet", "parquet")
    # Readable where it lies by any Parquet reader (here pandas through pyarrow).
    (path,) = (cache_server.data_dir / "objects" / "parquet").glob(f"*/{entry['digest']}/*.parquet")
    assert_same(pd.read_parquet(path), expected)

    (warm,) = cached_compute(task, cache=cache_server.url, namespace=namespace)
    _strictly_equal(warm, expected)


@pytest.mark.slow
def test_corrupt_parquet_file_is_a_miss_and_recomputed(fresh_server):
    server = fresh_server()
    namespace = f"frames-{uuid.uuid4().hex}"
    task = dask.delayed(_scaled, pure=True)(_large_frame(2), 3.0, dask_key_name="scaled")
    cached_compute(task, cache=server.url, namespace=namespace)
    (path,) = (server.data_dir / "objects" / "parquet").glob("*/*/data.parquet")
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    (again,) = cached_compute(task, cache=server.url, namespace=namespace)
    _strictly_equal(again, _scaled(_large_frame(2), 3.0))
    assert last_report().retried == [task_hashes(task, namespace=namespace)["scaled"]]


def test_a_frame_read_back_otherwise_than_recorded_is_refused():
    """A Parquet result records its frame's dtypes and value digest (issue 27, case 7): a
    load under other pandas options is converted back to those dtypes, and one that still
    differs from the stored frame is refused (``load_result`` then recomputes)."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from client_lib.core.errors import CacheProtocolError
    from client_lib.wire.frames import decode_frame, encode_frame

    frame = pd.DataFrame({"s": pd.Series(["a", None] * 50, dtype="str")})
    body = encode_frame(frame)
    _strictly_equal(decode_frame(body), frame)
    table = pq.read_table(pa.BufferReader(body))
    meta = dict(table.schema.metadata)
    ours = json.loads(meta[b"dask-result-cache"])
    ours["dtypes"]["columns"] = [["object"]]  # as if stored from an object column
    meta[b"dask-result-cache"] = json.dumps(ours).encode()
    sink = pa.BufferOutputStream()
    pq.write_table(table.replace_schema_metadata(meta), sink)
    with pytest.raises(CacheProtocolError, match="cannot be converted back exactly"):
        codec.decode("parquet", "", "", sink.getvalue().to_pybytes())
