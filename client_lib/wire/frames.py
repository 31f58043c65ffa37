"""pandas frames and series as Parquet (docs/protocol.md, "Values on the wire").

A large ``DataFrame`` or ``Series`` is stored as one Parquet file written by pyarrow:
columnar, compressed, readable by any tool, and reopened lazily as a dask DataFrame
(``client_lib.open_cached``). Parquet cannot hold everything pandas can (complex numbers,
mixed object columns, a ``DatetimeIndex``'s ``freq``, object columns of strings under
pandas' string inference, ...), so an encoding is used only when it reads back *exactly*:
the frame decoded from the Parquet bytes must have the same value digest as the original
(the task hash's own notion of equality: type, every cell, dtypes, index, names, attrs).
Otherwise the caller pickles the value; a lossy copy is never stored.

What pyarrow rebuilds also depends on the *loading* process's pandas options (a
``string[pyarrow]`` column comes back as ``string[python]`` under
``mode.string_storage="python"``, a ``str`` column as ``object`` under
``future.infer_string=False``). So the file also records the stored frame's dtypes (of
every column, index level and column level) and its value digest; a load that differs
is converted back to them and must then have that digest again, or it is refused (the
task is recomputed, never served with other dtypes).

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
        digest = value_digest(value)
        meta.update(digest=digest.hex(), dtypes=_dtypes(frame))
        table = pa.Table.from_pandas(frame, preserve_index=None)
        metadata = dict(table.schema.metadata or {})
        metadata[_META_KEY] = json.dumps(meta).encode("utf-8")
        sink = pa.BufferOutputStream()
        pq.write_table(table.replace_schema_metadata(metadata), sink)
        body = sink.getvalue().to_pybytes()
        back = decode_frame(body)
        if type(back) is not type(value) or value_digest(back) != digest:
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
    stored = meta.get("dtypes")
    restored = stored is not None and _dtypes(frame) != stored
    if restored:
        frame = _with_dtypes(frame, stored)
    value = frame
    if meta.get("series"):
        value = frame[SERIES_COLUMN]
        value.name = meta.get("name")
    if restored and value_digest(value).hex() != meta.get("digest"):
        raise ValueError("the frame read back under this process's pandas options differs "
                         "from the stored one, and cannot be converted back exactly")
    return value


# -- dtypes that the loading process's pandas options change ------------------------------


def _describe(dtype: Any) -> list:
    """A dtype as JSON: exactly for string dtypes (storage, missing-value marker), by its
    name otherwise (compared, never rebuilt)."""
    import pandas as pd

    if isinstance(dtype, pd.StringDtype):
        return ["string", dtype.storage, dtype.na_value is not pd.NA]
    return [str(dtype)]


def _dtypes(frame: Any) -> dict[str, list]:
    return {axis: [_describe(dtype) for dtype in dtypes] for axis, dtypes in (
        ("columns", list(frame.dtypes)),
        ("index", _level_dtypes(frame.index)),
        ("labels", _level_dtypes(frame.columns)))}


def _level_dtypes(index: Any) -> list:
    return [level.dtype for level in index.levels] if hasattr(index, "levels") else [
        index.dtype]


def _rebuilt(described: list) -> Any:
    """The dtype :func:`_describe` described, for string and object dtypes; else None."""
    import numpy as np
    import pandas as pd

    if described[0] == "string":
        _, storage, nan = described
        return pd.StringDtype(storage, na_value=np.nan if nan else pd.NA)
    return np.dtype(object) if described == ["object"] else None


def _with_dtypes(frame: Any, stored: dict[str, list]) -> Any:
    """``frame`` with the columns and index levels whose dtypes differ from ``stored``
    converted to them, where they are string or object dtypes (others stay as read)."""
    import pandas as pd

    def converted(values: Any, described: list) -> Any:
        dtype = _rebuilt(described)
        return values if dtype is None or _describe(values.dtype) == described else (
            values.astype(dtype))

    def index(idx: Any, described: list[list]) -> Any:
        if len(described) != (idx.nlevels if hasattr(idx, "levels") else 1):
            return idx
        if not isinstance(idx, pd.MultiIndex):
            return converted(idx, described[0])
        return pd.MultiIndex.from_arrays(
            [converted(idx.get_level_values(i), d) for i, d in enumerate(described)],
            names=idx.names)

    frame = frame.copy(deep=False)
    for i, described in enumerate(stored.get("columns", [])[:frame.shape[1]]):
        column = frame.iloc[:, i]
        fixed = converted(column, described)
        if fixed is not column:
            frame.isetitem(i, fixed)
    frame.index = index(frame.index, stored.get("index", []))
    frame.columns = index(frame.columns, stored.get("labels", []))
    return frame
