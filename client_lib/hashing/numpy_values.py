"""Handlers for numpy arrays, scalars and dtypes.

Arrays and numpy scalars carry numpy's version, as every other library object carries its
class's library version: what user code computes from them (``x * 0.1`` on float32,
NEP 50) can change with numpy, though the code and the bytes do not. A dtype counts with
its ``metadata``; an array with its memory order (``np.nditer`` and ``ravel(order="K")``
visit elements in it); a masked array with its hard mask; another ndarray subclass with
the attributes its instances carry, which its pickled state leaves out.

A random generator (``Generator``, ``RandomState``, a ``BitGenerator``) is not a value:
every draw advances it, so what a task draws from it depends on the draws before (a
cached result would skip one and shift the rest). Reached from a task (an argument, the
instance of a bound method, a global, a closure), it makes the task volatile. A
``SeedSequence`` (what ``dask.array.random`` passes its chunk tasks) is a value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..core.errors import VolatileValue
from .registry import HANDLERS

if TYPE_CHECKING:
    from .encoder import Encoder

__all__ = ["encode_dtype", "encode_elements", "encode_ndarray"]

_NUMPY = b"numpy==" + np.__version__.encode()


def encode_dtype(enc: Encoder, dtype: np.dtype) -> None:
    """An array's dtype: its string for plain dtypes; a sub-array's shape and base; a
    structured dtype's size, alignment, scalar type (``np.record`` or ``np.void``) and
    fields (name, offset, title and dtype each, in order: fields may overlap or be out of
    order, which ``dtype.descr`` refuses); its ``metadata`` when it has some."""
    enc.write_raw(b"d")
    if dtype.fields is None and dtype.subdtype is None:
        enc.write_name(dtype.str)
    elif dtype.fields is None:
        base, shape = dtype.subdtype
        enc.write_raw(b"sub%r" % (shape,))
        encode_dtype(enc, base)
    else:
        enc.write_raw(b"rec%d,%d,%d:" % (dtype.itemsize, dtype.isalignedstruct,
                                         len(dtype.names)))
        enc.write_name(dtype.type.__name__)
        for name in dtype.names:
            field = dtype.fields[name]  # (dtype, offset) or (dtype, offset, title)
            enc.write_name(name)
            enc.write_raw(b"@%d" % field[1])
            enc.encode(field[2] if len(field) > 2 else None)
            encode_dtype(enc, field[0])
    if dtype.metadata is not None:
        enc.write_raw(b"dm")
        enc.encode(dict(dtype.metadata))


# x87 extended precision: 10 bytes of a longdouble hold its value, the rest of its 12 or 16
# is padding numpy leaves uninitialised (the oracle campaign: a clongdouble scalar hashed
# apart in every process). Those bytes are left out of the hash.
_LONG = np.dtype(np.longdouble).itemsize
_X87 = np.finfo(np.longdouble).nmant == 63 and _LONG > 10


def _value_bytes(data: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``data`` (the uint8 view of a C-contiguous array of ``dtype``) without padding."""
    if _X87 and dtype.type in (np.longdouble, np.clongdouble) and dtype.isnative:
        return np.ascontiguousarray(data.reshape(-1, _LONG)[:, :10]).reshape(-1)
    if dtype.fields is not None and dtype.itemsize:
        used = _used_bytes(dtype)
        if not used.all():  # gaps numpy may leave uninitialised (x[["col1"]] keeps col2's)
            return np.ascontiguousarray(data.reshape(-1, dtype.itemsize)[:, used]).reshape(-1)
    return data


def _used_bytes(dtype: np.dtype) -> np.ndarray:
    """Which bytes of one item of ``dtype`` hold a value (its fields' bytes, recursively;
    not the gaps between them, alignment, or an x87 long double's padding)."""
    if dtype.fields is not None:
        used = np.zeros(dtype.itemsize, dtype=bool)
        for field in dtype.fields.values():
            inner, offset = field[0], field[1]
            used[offset:offset + inner.itemsize] |= _used_bytes(inner)
        return used
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return np.tile(_used_bytes(base), int(np.prod(shape)))
    used = np.ones(dtype.itemsize, dtype=bool)
    if _X87 and dtype.type in (np.longdouble, np.clongdouble) and dtype.isnative:
        used.reshape(-1, _LONG)[:, 10:] = False
    return used


def encode_elements(enc: Encoder, arr: np.ndarray) -> None:
    """An array by dtype, shape and every element in C order, whatever its memory layout
    (for arrays a library lays out itself: pandas' columns); object arrays element by
    element; the files its strings name."""
    enc.write_raw(b"A" + _NUMPY)
    encode_dtype(enc, arr.dtype)
    enc.write_raw(b"%r" % (arr.shape,))
    if arr.dtype.hasobject:
        enc.encode(arr.ravel(order="C").tolist())
        return
    data = _value_bytes(np.ascontiguousarray(arr).reshape(-1).view(np.uint8), arr.dtype)
    enc.write_buffer(b"b", data.data)
    if arr.dtype.kind in "US" and arr.size:
        enc.write_listed_paths(_path_like(arr))


@HANDLERS.register(np.ndarray, exact=True)
def encode_ndarray(enc: Encoder, arr: np.ndarray) -> None:
    """A plain ndarray as :func:`encode_elements` writes it, and its memory order when
    that is not C order (a strided view in C order, ``x[::2]``, hashes as its copy)."""
    if not arr.flags.c_contiguous:
        order = _memory_order(arr)
        if order:
            enc.write_raw(order)
    encode_elements(enc, arr)


def _memory_order(arr: np.ndarray) -> bytes:
    """The order ``np.nditer(arr)`` (order "K") visits the elements in: the axes ranked by
    stride (largest first, equal strides tied) and those walked backwards. Axes of length
    one are left out: they do not change the order. Empty for C order."""
    axes = [i for i, n in enumerate(arr.shape) if n > 1]
    sizes = sorted({abs(arr.strides[i]) for i in axes}, reverse=True)
    ranks = tuple(sizes.index(abs(arr.strides[i])) for i in axes)
    backwards = tuple(i for i in axes if arr.strides[i] < 0)
    if not backwards and ranks == tuple(range(len(axes))):
        return b""
    return b"L%r%r" % (ranks, backwards)


# Instance attributes that are not the value: a memmap's open mapping and file name (its
# data is hashed).
_MEMMAP_HANDLES = ("_mmap", "filename")
# MaskedArray's own attributes (the value is its data, mask, fill value and hard mask;
# whether the mask is shared and the lazily filled fill value are not).
_MASKED_ATTRS = frozenset({"_fill_value", "_hardmask", "_sharedmask", "_isfield",
                           "_baseclass", "_optinfo", "_basedict", "_mask"})


@HANDLERS.register(np.ndarray)
def _ndarray_subclass(enc: Encoder, arr: np.ndarray) -> None:
    """An ndarray subclass (``memmap``, ``matrix``, a user's): what ``pickle`` would
    rebuild it from, plus its instance attributes, which ndarray's pickled state leaves
    out."""
    enc.write_reduced(arr)
    ignored = _MEMMAP_HANDLES if isinstance(arr, np.memmap) else ()
    _instance_state(enc, arr, ignored)


@HANDLERS.register(np.ma.MaskedArray)
def _masked_array(enc: Encoder, arr: np.ma.MaskedArray) -> None:
    """A masked array by its data, its mask (``nomask`` or an array), its fill value and
    whether the mask is hard (assigning to a masked element then leaves it masked). A
    subclass defined elsewhere also by its own attributes."""
    enc.write_raw(b"MA" + _NUMPY)
    enc.write_callable(type(arr))
    enc.encode(arr.data)  # of its base class (ndarray, matrix)
    enc.encode(arr._mask)
    fill = arr._fill_value  # None until first asked for: then numpy's default
    enc.encode(np.asarray(np.ma.default_fill_value(arr) if fill is None else fill,
                          dtype=arr.dtype))
    enc.write_raw(b"h" if arr._hardmask else b"s")
    if not type(arr).__module__.startswith("numpy"):
        _instance_state(enc, arr, _MASKED_ATTRS)


def _instance_state(enc: Encoder, arr: np.ndarray, ignored: tuple | frozenset) -> None:
    state = getattr(arr, "__dict__", None)
    if state:
        enc.write_raw(b"@state")
        enc.encode({k: state[k] for k in sorted(state) if k not in ignored})


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


@HANDLERS.register(np.random.Generator, np.random.RandomState, np.random.BitGenerator)
def _generator(enc: Encoder, obj: object) -> None:
    raise VolatileValue(f"a random generator ({type(obj).__module__}."
                        f"{type(obj).__qualname__}) is advanced by every draw from it")


@HANDLERS.register(np.generic)
def _scalar(enc: Encoder, obj: np.generic) -> None:
    enc.write_raw(b"a" + _NUMPY)
    encode_dtype(enc, obj.dtype)
    if obj.dtype.hasobject:
        enc.encode(obj.item())
    else:
        data = np.ascontiguousarray(obj).reshape(-1).view(np.uint8)
        enc.write_raw(_value_bytes(data, obj.dtype).tobytes())
