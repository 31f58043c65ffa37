"""pandas frames and series as Parquet (docs/protocol.md, "Values on the wire").

A large ``DataFrame`` or ``Series`` is stored as one Parquet file written by pyarrow:
columnar, compressed, readable by any tool, and reopened lazily as a dask DataFrame
(``client_lib.open_cached``). Parquet cannot hold everything pandas can (complex numbers,
mixed object columns, a ``DatetimeIndex``'s ``freq``, object columns of strings under
pandas' string inference, ...), so an encoding is used only when it reads back *exactly*:
the frame decoded from the Parquet bytes must have the same value digest as the original
(the task hash's own notion of equality: type, every cell, dtypes, index, names, attrs).
Otherwise the caller pickles the value; a lossy copy is never stored.

pyarrow is imported only when a frame is encoded or decoded; without it frames are pickled.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ..core.errors import VolatileValue
from ..hashing import value_digest

__all__ = ["PARQUET_KIND", "SERIES_COLUMN", "decode_frame", "encode_frame", "frame_nbytes",
           "is_frame"]

PARQUET_KIND = "parquet"
#: The column a Series is stored as; its own name travels in the file's metadata.
SERIES_COLUMN = "__series__"
_META_KEY = b"dask-result-cache"


def is_frame(value: Any) -> bool:
    """Whether ``value`` is exactly a pandas DataFrame or Series (subclasses may carry
    state Parquet does not know)."""
    pd = sys.modules.get("pandas")
    return pd is not None and type(value) in (pd.DataFrame, pd.Series)


def frame_nbytes(value: Any) -> int:
    """The frame's in-memory size, shallow (``deep=True`` walks every object cell)."""
    usage = value.memory_usage(index=True, deep=False)
    return int(usage.sum() if hasattr(usage, "sum") else usage)


def encode_frame(value: Any) -> bytes | None:
    """The Parquet bytes of a DataFrame or Series that decode back to an equal value, or
    ``None`` when Parquet cannot hold it exactly (the caller then pickles it)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None
    try:
        if type(value).__name__ == "Series":
            meta = {"series": True, "name": value.name}
            frame = value.to_frame(name=SERIES_COLUMN)
        else:
            meta, frame = {"series": False}, value
        table = pa.Table.from_pandas(frame, preserve_index=None)
        metadata = dict(table.schema.metadata or {})
        metadata[_META_KEY] = json.dumps(meta).encode("utf-8")
        sink = pa.BufferOutputStream()
        pq.write_table(table.replace_schema_metadata(metadata), sink)
        body = sink.getvalue().to_pybytes()
        back = decode_frame(body)
        if type(back) is not type(value) or value_digest(back) != value_digest(value):
            return None
        _assert_same_structure(back, value)
    except (VolatileValue, TypeError, ValueError, AssertionError, pa.ArrowException):
        return None
    return body


def _assert_same_structure(actual: Any, expected: Any) -> None:
    """What the value digest does not see: the classes of index and column levels (a
    ``RangeIndex`` level read back as an ``Index``), flags. ``AssertionError`` if any
    differs."""
    import pandas as pd

    check = (pd.testing.assert_frame_equal if type(expected) is pd.DataFrame
             else pd.testing.assert_series_equal)
    extra = {"check_column_type": True} if type(expected) is pd.DataFrame else {}
    check(actual, expected, check_exact=True, check_index_type=True, check_freq=True,
          check_flags=True, **extra)
    for axis in ("index", "columns") if type(expected) is pd.DataFrame else ("index",):
        mine, theirs = getattr(actual, axis), getattr(expected, axis)
        if isinstance(theirs, pd.MultiIndex):
            assert [type(x) for x in mine.levels] == [type(x) for x in theirs.levels]


def decode_frame(body: Any) -> Any:
    """The DataFrame or Series held by Parquet bytes :func:`encode_frame` wrote."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(pa.BufferReader(pa.py_buffer(body)))
    meta = json.loads((table.schema.metadata or {}).get(_META_KEY, b"{}"))
    frame = table.to_pandas()
    if not meta.get("series"):
        return frame
    series = frame[SERIES_COLUMN]
    series.name = meta.get("name")
    return series
