"""Arrow data as pandas holds it (``ArrowDtype`` columns, ``string[pyarrow]``, ``str``),
by exact, canonical buffers: which rows are null, then the values with every null slot
zeroed (so NaN is not null, ``-0.0`` is not ``0.0``, and what sits under a null never
counts), whatever the chunking. Fixed-width types (integers, floats, times, dates,
durations, booleans) by their bits; strings and binaries by their lengths and bytes;
other types (lists, structs, maps, decimals, dictionaries) value by value.

pyarrow is imported only by the pandas handlers that meet Arrow data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .numpy_values import encode_elements

if TYPE_CHECKING:
    from .encoder import Encoder

__all__ = ["encode_arrow", "path_like_strings"]


def encode_arrow(enc: Encoder, data: Any) -> None:
    """A ``pyarrow.ChunkedArray`` (or ``Array``) by its type, nulls and values."""
    import pyarrow as pa
    import pyarrow.types as pt

    arr = data.combine_chunks() if isinstance(data, pa.ChunkedArray) else data
    ints = {8: pa.int8(), 16: pa.int16(), 32: pa.int32(), 64: pa.int64()}
    kind = arr.type
    enc.write_raw(b"AR%d:" % len(arr))
    enc.write_name(str(kind))
    if arr.null_count:
        encode_elements(enc, arr.is_null().to_numpy(zero_copy_only=False))
    if pt.is_boolean(kind):
        encode_elements(enc, arr.fill_null(False).to_numpy(zero_copy_only=False))
    elif (pt.is_integer(kind) or pt.is_floating(kind) or pt.is_temporal(kind)) and (
            getattr(kind, "bit_width", None) in ints) and not pt.is_interval(kind):
        bits = arr.view(ints[kind.bit_width])  # NaN payloads and signs as they are
        encode_elements(enc, (bits.fill_null(0) if arr.null_count else bits).to_numpy())
    elif pt.is_string(kind) or pt.is_binary(kind) or pt.is_large_string(kind) or (
            pt.is_large_binary(kind)):
        _variable_width(enc, arr.fill_null(b"" if pt.is_binary(kind) or pt.is_large_binary(
            kind) else "") if arr.null_count else arr, kind)
    else:
        enc.write_raw(b"AL")
        enc.encode(arr.to_pylist())


def _variable_width(enc: Encoder, arr: Any, kind: Any) -> None:
    """Strings and binaries: the length of each value and their bytes, one after the
    other (an array sliced out of a larger one has offsets that do not start at 0)."""
    import pyarrow.types as pt

    _, offsets, data = arr.buffers()
    wide = pt.is_large_string(kind) or pt.is_large_binary(kind)
    itemsize = 8 if wide else 4
    ends = np.frombuffer(offsets, dtype=np.int64 if wide else np.int32, count=len(arr) + 1,
                         offset=arr.offset * itemsize)
    encode_elements(enc, np.diff(ends))
    first, last = int(ends[0]), int(ends[-1])
    enc.write_buffer(b"b", memoryview(data)[first:last] if data is not None else b"")


def path_like_strings(data: Any) -> list:
    """The distinct strings of a string array that could name a file (the rule of
    :func:`~.provenance.listed_file_stamps`), found by Arrow's vectorised kernels."""
    import pyarrow.compute as pc
    import pyarrow.types as pt

    if not (pt.is_string(data.type) or pt.is_large_string(data.type)):
        return pc.unique(data).to_pylist()
    candidate = pc.and_(pc.match_substring_regex(data, r"[/\\.]"),
                        pc.greater(pc.utf8_length(data), 2))
    return pc.unique(pc.filter(data, candidate)).to_pylist()
