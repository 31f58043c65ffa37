"""Structural encoding of argument values, the literal half of a task hash.

Every value is written as a tagged, length-prefixed byte string, so two values encode
equally only if they are equal in type and content. Containers are walked, sets are sorted
by their elements' encodings, buffers are hashed with xxh3_128 here (never with whatever
hash library ``dask.tokenize`` happens to find installed), and nothing depends on a memory
address, ``PYTHONHASHSEED`` or pickle bytes.

A value that cannot be encoded deterministically raises :class:`VolatileValue`; its task is
then not cached (DESIGN.md section 2).
"""

from __future__ import annotations

import datetime
import decimal
import enum
import fractions
import functools
import os
import pathlib
import struct
import types
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import xxhash

from .errors import VolatileValue

__all__ = ["ValueEncoder", "file_stamp"]

_xxh3 = xxhash.xxh3_128_digest
_pack_d = struct.Struct("<d").pack
_pack_dd = struct.Struct("<dd").pack
# Arrays and numpy scalars carry numpy's version, as every other library object carries
# its class's library version: what user code computes from them (``x * 0.1`` on float32,
# NEP 50) can change with numpy, though the code and the bytes do not.
_NUMPY = b"numpy==" + np.__version__.encode()
_INLINE_BYTES = 4096  # longer byte strings are represented by their digest
_MAX_DEPTH = 200
_PATH_CHARS = ("/", "\\")
_MAX_DIR_ENTRIES = 10_000


def file_stamp(path: str) -> bytes | None:
    """``(size, mtime_ns)`` of a file, or of every file under a directory, or ``None``.

    Used for strings that name existing paths (``read_parquet`` pieces, ``read_csv`` paths):
    editing the file changes the stamp, so tasks reading it are recomputed.
    """
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not os.path.isdir(path):
        return b"%d:%d" % (st.st_size, st.st_mtime_ns)
    parts = []
    for n, (root, dirs, files) in enumerate(os.walk(path)):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            try:
                fst = os.stat(full)
            except OSError:
                continue
            parts.append(b"%s:%d:%d" % (os.path.relpath(full, path).encode(
                "utf-8", "surrogatepass"), fst.st_size, fst.st_mtime_ns))
        if n > _MAX_DIR_ENTRIES or len(parts) > _MAX_DIR_ENTRIES:
            raise VolatileValue(f"directory {path!r} has too many entries to fingerprint")
    return _xxh3(b"\0".join(parts))


class ValueEncoder:
    """Appends the encoding of values to ``self.out``.

    Not thread safe: one encoder per hashing pass. Callables are delegated to
    ``encode_callable``, modules to ``encode_module`` and graph nodes to
    ``encode_graph_node`` (all set by the owner), so this module knows nothing about
    functions, code or Dask graphs.
    """

    def __init__(self) -> None:
        self.out: list[bytes] = []
        self._stack: list[int] = []  # ids of containers being walked (cycle guard)
        self.encode_callable: Callable[[Any], None] = self._no_callable
        self.encode_graph_node: Callable[[Any], bool] = lambda obj: False
        self.encode_module: Callable[[types.ModuleType], None] = self._module_name
        self._dispatch: dict[type, Callable[[Any], None]] = {
            type(None): self._none,
            bool: self._bool,
            int: self._int,
            float: self._float,
            complex: self._complex,
            str: self._str,
            bytes: self._bytes,
            bytearray: self._bytes,
            memoryview: self._memoryview,
            tuple: self._tuple,
            list: self._list,
            dict: self._dict,
            set: self._set,
            frozenset: self._frozenset,
            types.MappingProxyType: self._mappingproxy,
            slice: self._slice,
            range: self._range,
            type(Ellipsis): self._ellipsis,
            type(NotImplemented): self._notimplemented,
            np.ndarray: self._ndarray,
            np.dtype: self._np_dtype,
        }

    # -- public -------------------------------------------------------------------------

    def digest_of(self, obj: Any) -> bytes:
        """The 16-byte digest of one value's encoding (the buffer is left as it was)."""
        saved, self.out = self.out, []
        try:
            self.encode(obj)
            return _xxh3(b"".join(self.out))
        finally:
            self.out = saved

    def encode(self, obj: Any) -> None:
        handler = self._dispatch.get(type(obj))
        if handler is not None:
            handler(obj)
        else:
            self._encode_other(obj)

    # -- scalars ------------------------------------------------------------------------

    def _none(self, obj: None) -> None:
        self.out.append(b"N")

    def _bool(self, obj: bool) -> None:
        self.out.append(b"T" if obj else b"F")

    def _int(self, obj: int) -> None:
        self.out.append(b"i%d;" % obj)

    def _float(self, obj: float) -> None:
        self.out.append(b"f" + _pack_d(obj))

    def _complex(self, obj: complex) -> None:
        self.out.append(b"c" + _pack_dd(obj.real, obj.imag))

    def _str(self, obj: str) -> None:
        data = obj.encode("utf-8", "surrogatepass")
        self.out.append(b"s%d:" % len(data))
        self.out.append(data)
        # A string that names an existing file stands for that file's content; a
        # relative name ("table.csv") for the file in the current directory.
        if 2 < len(obj) < 4096 and ("/" in obj or "\\" in obj or "." in obj):
            stamp = file_stamp(obj)
            if stamp is not None:
                if not os.path.isabs(obj):
                    self.out.append(b"@cwd" + os.getcwd().encode("utf-8", "surrogatepass"))
                self.out.append(b"@file" + stamp)

    def _bytes(self, obj: bytes | bytearray) -> None:
        self._raw(b"b", bytes(obj) if len(obj) <= _INLINE_BYTES else obj)

    def _memoryview(self, obj: memoryview) -> None:
        self._raw(b"b", obj.cast("B") if obj.contiguous else obj.tobytes())

    def _raw(self, tag: bytes, data: Any) -> None:
        if len(data) <= _INLINE_BYTES:
            self.out.append(tag + b"%d:" % len(data))
            self.out.append(bytes(data))
        else:
            self.out.append(tag + b"#%d:" % len(data) + _xxh3(data))

    def _slice(self, obj: slice) -> None:
        self.out.append(b"S")
        self._items((obj.start, obj.stop, obj.step))

    def _range(self, obj: range) -> None:
        self.out.append(b"r%d,%d,%d;" % (obj.start, obj.stop, obj.step))

    def _ellipsis(self, obj: Any) -> None:
        self.out.append(b"E")

    def _notimplemented(self, obj: Any) -> None:
        self.out.append(b"I")

    # -- containers ---------------------------------------------------------------------

    def _items(self, items: Any) -> None:
        encode = self.encode
        for item in items:
            encode(item)

    def _enter(self, obj: Any) -> bool:
        """Start walking a container; on a cycle write a back reference instead."""
        oid = id(obj)
        if oid in self._stack:
            self.out.append(b"@%d;" % self._stack.index(oid))
            return False
        if len(self._stack) >= _MAX_DEPTH:
            raise VolatileValue(f"value nested deeper than {_MAX_DEPTH} levels")
        self._stack.append(oid)
        return True

    def _tuple(self, obj: tuple) -> None:
        if not obj:
            self.out.append(b"()")
            return
        if self._enter(obj):
            self.out.append(b"(%d:" % len(obj))
            self._items(obj)
            self._stack.pop()

    def _list(self, obj: list) -> None:
        if self._enter(obj):
            self.out.append(b"[%d:" % len(obj))
            self._items(obj)
            self._stack.pop()

    def _dict(self, obj: dict, tag: bytes = b"{") -> None:
        # Insertion order is kept: code may iterate it, so order can change results.
        if self._enter(obj):
            self.out.append(tag + b"%d:" % len(obj))
            encode = self.encode
            for k, v in obj.items():
                encode(k)
                encode(v)
            self._stack.pop()

    def _mappingproxy(self, obj: types.MappingProxyType) -> None:
        self._dict(obj, b"{m")  # type: ignore[arg-type]

    def _set(self, obj: set | frozenset, tag: bytes = b"<") -> None:
        # Sorted by encoding: iteration order of a set depends on PYTHONHASHSEED.
        if self._enter(obj):
            digests = sorted(self.digest_of(item) for item in obj)
            self.out.append(tag + b"%d:" % len(digests))
            self.out.extend(digests)
            self._stack.pop()

    def _frozenset(self, obj: frozenset) -> None:
        self._set(obj, b">")

    # -- numpy --------------------------------------------------------------------------

    def _np_dtype(self, obj: np.dtype) -> None:
        self.out.append(b"d")
        if obj.fields is None and obj.subdtype is None:
            self._str(obj.str)
        else:
            self.encode(obj.descr)

    def _ndarray(self, obj: np.ndarray) -> None:
        if type(obj) is not np.ndarray:
            self._encode_reduced(obj)
            return
        self.out.append(b"A" + _NUMPY)
        self._np_dtype(obj.dtype)
        self.out.append(b"%r" % (obj.shape,))
        if obj.dtype.hasobject:
            self._list(obj.ravel(order="C").tolist())
            return
        data = np.ascontiguousarray(obj).reshape(-1).view(np.uint8)
        self._raw(b"b", data.data)

    def _np_scalar(self, obj: np.generic) -> None:
        self.out.append(b"a" + _NUMPY)
        self._np_dtype(obj.dtype)
        if obj.dtype.hasobject:
            self.encode(obj.item())
        else:
            self.out.append(np.asarray(obj).tobytes())

    # -- everything else ----------------------------------------------------------------

    def _module_name(self, obj: types.ModuleType) -> None:
        self.out.append(b"m")
        self._str(obj.__name__)

    def _no_callable(self, obj: Any) -> None:
        raise VolatileValue(f"cannot hash callable {type(obj).__qualname__}")

    def _encode_other(self, obj: Any) -> None:
        if self.encode_graph_node(obj):
            return
        if isinstance(obj, np.generic):
            self._np_scalar(obj)
            return
        for cls, method in _SPECIAL_TYPES:
            if isinstance(obj, cls):
                method(self, obj)
                return
        mod = type(obj).__module__
        handler = _LIBRARY_HANDLERS.get(mod.partition(".")[0])
        if handler is not None and handler(self, obj):
            return
        if isinstance(obj, type) or callable(obj) and not hasattr(obj, "__dask_tokenize__"):
            self.encode_callable(obj)
            return
        if hasattr(obj, "__dask_tokenize__") and not isinstance(obj, type):
            self.out.append(b"D")
            self.encode_callable(type(obj))
            self.encode(obj.__dask_tokenize__())
            return
        # Dataclasses too: their state holds fields and any attribute set later.
        self._encode_reduced(obj)

    def _encode_reduced(self, obj: Any) -> None:
        """Encode an object by what ``pickle`` would rebuild it from, walked structurally."""
        try:
            reduced = obj.__reduce_ex__(5)
        except Exception as exc:
            raise VolatileValue(
                f"{type(obj).__module__}.{type(obj).__qualname__} cannot be hashed "
                f"deterministically ({type(exc).__name__}: {exc})"
            ) from None
        if isinstance(reduced, str):  # a module-level singleton
            self.out.append(b"G")
            self.encode_callable(type(obj))
            self._str(reduced)
            return
        if not self._enter(obj):
            return
        self.out.append(b"O")
        self.encode_callable(type(obj))
        rebuild, args, *rest = reduced
        self.encode_callable(rebuild)
        self.encode(args)
        if rest and isinstance(rest[0], dict):
            rest[0] = _without_caches(type(obj), rest[0])
        for extra in rest:
            if extra is None or isinstance(extra, (dict, tuple, list)):
                self.encode(extra)
            else:  # listitems / dictitems iterators
                self.encode(list(extra))
        self._stack.pop()


def _without_caches(cls: type, state: dict) -> dict:
    """An object's state minus lazily filled caches (``functools.cached_property``
    values), which depend on what was accessed, not on what the object is."""
    cached = [name for name in state if isinstance(getattr(cls, name, None),
                                                   functools.cached_property)]
    if not cached:
        return state
    return {k: v for k, v in state.items() if k not in cached}


def _enc_enum(enc: ValueEncoder, obj: enum.Enum) -> None:
    enc.out.append(b"e")
    enc.encode_callable(type(obj))
    enc._str(obj.name)
    enc.encode(obj._value_)  # the class fingerprint walks members only by name


def _enc_module(enc: ValueEncoder, obj: types.ModuleType) -> None:
    enc.encode_module(obj)  # the owner knows libraries from user code


def _enc_path(enc: ValueEncoder, obj: pathlib.PurePath) -> None:
    enc.out.append(b"p")
    enc.encode_callable(type(obj))
    enc._str(str(obj))
    stamp = file_stamp(str(obj))
    if stamp is not None:
        enc.out.append(b"@file" + stamp)


def _enc_by_str(enc: ValueEncoder, obj: Any) -> None:
    # Types whose str() is their complete, canonical value.
    enc.out.append(b"x")
    enc.encode_callable(type(obj))
    enc._str(str(obj))


def _enc_datetime(enc: ValueEncoder, obj: Any) -> None:
    enc.out.append(b"t")
    enc.encode_callable(type(obj))
    enc._str(obj.isoformat())
    enc.encode(getattr(obj, "fold", 0))


def _enc_timedelta(enc: ValueEncoder, obj: datetime.timedelta) -> None:
    enc.out.append(b"t%d,%d,%d;" % (obj.days, obj.seconds, obj.microseconds))


def _enc_code(enc: ValueEncoder, obj: types.CodeType) -> None:
    raise VolatileValue("bare code objects are not hashed")


_SPECIAL_TYPES: list[tuple[type, Callable[[ValueEncoder, Any], None]]] = [
    (enum.Enum, _enc_enum),
    (types.ModuleType, _enc_module),
    (pathlib.PurePath, _enc_path),
    (uuid.UUID, _enc_by_str),
    (decimal.Decimal, _enc_by_str),
    (fractions.Fraction, _enc_by_str),
    (datetime.datetime, _enc_datetime),
    (datetime.date, _enc_datetime),
    (datetime.time, _enc_datetime),
    (datetime.timedelta, _enc_timedelta),
    (types.CodeType, _enc_code),
]


# -- third-party types, imported only when a value of theirs shows up ---------------------


def _enc_pandas(enc: ValueEncoder, obj: Any) -> bool:
    import pandas as pd

    if isinstance(obj, pd.DataFrame):
        enc.out.append(b"PD")
        enc.encode_callable(type(obj))
        _enc_pandas_index(enc, obj.columns)
        _enc_pandas_index(enc, obj.index)
        for i in range(obj.shape[1]):
            _enc_pandas_values(enc, obj.iloc[:, i])
        enc.encode(dict(obj.attrs))
        return True
    if isinstance(obj, pd.Series):
        enc.out.append(b"PS")
        enc.encode_callable(type(obj))
        enc.encode(obj.name)
        _enc_pandas_index(enc, obj.index)
        _enc_pandas_values(enc, obj)
        enc.encode(dict(obj.attrs))
        return True
    if isinstance(obj, pd.Index):
        _enc_pandas_index(enc, obj)
        return True
    if isinstance(obj, pd.api.extensions.ExtensionDtype):
        # Defined by its _metadata fields; its __dict__ also holds lazily filled caches.
        enc.out.append(b"PX")
        enc.encode_callable(type(obj))
        enc.encode(tuple(getattr(obj, name, None) for name in type(obj)._metadata))
        return True
    return False


def _enc_pandas_index(enc: ValueEncoder, index: Any) -> None:
    import pandas as pd

    enc.out.append(b"PI")
    enc.encode_callable(type(index))
    enc.encode(list(index.names))
    if isinstance(index, pd.RangeIndex):
        enc.encode(range(index.start, index.stop, index.step))
    elif isinstance(index, pd.MultiIndex):
        for level in range(index.nlevels):
            _enc_pandas_values(enc, index.get_level_values(level))
    else:
        _enc_pandas_values(enc, index)
    freq = getattr(index, "freqstr", None)
    enc.encode(freq)


def _enc_pandas_values(enc: ValueEncoder, values: Any) -> None:
    import pandas as pd

    dtype = values.dtype
    if isinstance(dtype, np.dtype):
        enc._np_dtype(dtype)
    else:  # extension dtypes: categories, ordering, timezone, storage are part of them
        enc.encode(dtype)
    if isinstance(values, pd.Series):
        enc.encode(values.name)
    if isinstance(dtype, np.dtype) and dtype.kind in "biufcmM":
        enc._ndarray(np.asarray(values))
        return
    if isinstance(dtype, np.dtype) and dtype.kind == "O" and pd.api.types.infer_dtype(
            values, skipna=False) not in ("string", "bytes", "empty"):
        # pandas hashes mixed objects by str(): 1 and "1", None and NaN would collide.
        enc._list(list(values))
        return
    try:
        # pandas' own hash: deterministic (fixed siphash key), handles extension dtypes.
        hashed = pd.util.hash_pandas_object(values, index=False, categorize=True)
    except Exception:
        enc._list(list(values))
        return
    enc._ndarray(np.asarray(hashed))


def _enc_h5py(enc: ValueEncoder, obj: Any) -> bool:
    import h5py

    if isinstance(obj, (h5py.Dataset, h5py.Group)):
        filename = obj.file.filename
        enc.out.append(b"H5")
        enc._str(type(obj).__name__)
        enc._str(os.path.abspath(filename))
        enc._str(obj.name or "")
        if isinstance(obj, h5py.Dataset):
            enc.encode(obj.shape)
            enc._np_dtype(obj.dtype)
        stamp = file_stamp(filename)
        if stamp is None:
            raise VolatileValue(f"h5py file {filename!r} cannot be stat'ed")
        enc.out.append(stamp)
        return True
    return False


def _enc_zarr(enc: ValueEncoder, obj: Any) -> bool:
    import zarr

    if not isinstance(obj, (zarr.Array, zarr.Group)):
        return False
    store = obj.store
    root = getattr(store, "root", None)
    enc.out.append(b"ZA")
    enc._str(type(obj).__name__)
    enc._str(obj.path)
    if isinstance(obj, zarr.Array):
        enc.encode(obj.shape)
        enc._str(str(obj.dtype))
    if root is not None:  # a LocalStore: every file's size and mtime
        path = os.path.join(os.fspath(root), obj.path)
        enc._str(os.path.abspath(path))
        stamp = file_stamp(path)
        if stamp is None:
            raise VolatileValue(f"zarr array at {path!r} cannot be stat'ed")
        enc.out.append(stamp)
    elif isinstance(obj, zarr.Array):  # in-memory and other stores: by content
        enc._ndarray(np.asarray(obj[...]))
    else:
        raise VolatileValue(f"zarr group on {type(store).__name__} cannot be fingerprinted")
    return True


def _enc_fsspec(enc: ValueEncoder, obj: Any) -> bool:
    from fsspec.core import OpenFile

    if not isinstance(obj, OpenFile):
        return False
    fs = obj.fs
    try:
        info = fs.info(obj.path)
    except Exception as exc:
        raise VolatileValue(f"cannot stat {obj.path!r}: {exc}") from None
    stamp = {k: info.get(k) for k in ("size", "mtime", "ETag", "etag", "LastModified",
                                       "last_modified", "md5", "created") if k in info}
    enc.out.append(b"FS")
    enc.encode(fs.protocol)
    enc._str(obj.path)
    enc.encode({k: str(v) for k, v in stamp.items()})
    enc.encode((obj.mode, obj.compression, obj.encoding, obj.errors, obj.newline))
    return True


def _enc_dask(enc: ValueEncoder, obj: Any) -> bool:
    if type(obj).__name__ == "Future" and hasattr(obj, "key") and hasattr(obj, "client"):
        raise VolatileValue("a distributed Future (random key) is an argument")
    return False


_LIBRARY_HANDLERS: dict[str, Callable[[ValueEncoder, Any], bool]] = {
    "pandas": _enc_pandas,
    "h5py": _enc_h5py,
    "zarr": _enc_zarr,
    "fsspec": _enc_fsspec,
    "distributed": _enc_dask,
}
