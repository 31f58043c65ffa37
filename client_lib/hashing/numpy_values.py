"""Handlers for numpy arrays and scalars.

Arrays and numpy scalars carry numpy's version, as every other library object carries its
class's library version: what user code computes from them (``x * 0.1`` on float32,
NEP 50) can change with numpy, though the code and the bytes do not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .registry import HANDLERS

if TYPE_CHECKING:
    from .encoder import Encoder

__all__ = ["encode_dtype", "encode_ndarray"]

_NUMPY = b"numpy==" + np.__version__.encode()


def encode_dtype(enc: Encoder, dtype: np.dtype) -> None:
    """An array's dtype: its string for plain dtypes, its fields for structured ones."""
    enc.write_raw(b"d")
    if dtype.fields is None and dtype.subdtype is None:
        enc.write_name(dtype.str)
    else:
        enc.encode(dtype.descr)


@HANDLERS.register(np.ndarray, exact=True)
def encode_ndarray(enc: Encoder, arr: np.ndarray) -> None:
    """A plain ndarray by dtype, shape and every byte in C order (memory layout does not
    matter); object arrays element by element; the files its strings name."""
    enc.write_raw(b"A" + _NUMPY)
    encode_dtype(enc, arr.dtype)
    enc.write_raw(b"%r" % (arr.shape,))
    if arr.dtype.hasobject:
        enc.encode(arr.ravel(order="C").tolist())
        return
    data = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    enc.write_buffer(b"b", data.data)
    if arr.dtype.kind in "US" and arr.size:
        enc.write_listed_paths(_path_like(arr))


def _path_like(arr: np.ndarray) -> list:
    """The distinct strings of a ``U`` or ``S`` array that could name a file (the rule of
    :func:`~.provenance.listed_file_stamps`), found with numpy's vectorised string
    functions."""
    flat = arr.reshape(-1)
    marks = ("/", "\\", ".") if arr.dtype.kind == "U" else (b"/", b"\\", b".")
    try:
        mask = np.zeros(flat.shape, dtype=bool)
        for mark in marks:
            mask |= np.strings.find(flat, mark) >= 0
        if not mask.any():
            return []
        length = np.strings.str_len(flat)
        mask &= (length > 2) & (length < 4096)
        return np.unique(flat[mask]).tolist()
    except (SystemError, ValueError, UnicodeError):  # code points no file name can hold
        return []


@HANDLERS.register(np.generic)
def _scalar(enc: Encoder, obj: np.generic) -> None:
    enc.write_raw(b"a" + _NUMPY)
    encode_dtype(enc, obj.dtype)
    if obj.dtype.hasobject:
        enc.encode(obj.item())
    else:
        enc.write_raw(np.asarray(obj).tobytes())
