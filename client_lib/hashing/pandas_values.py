"""Handlers for pandas frames, series, indexes and extension dtypes, registered the first
time a pandas value is hashed (importing the hasher never imports pandas).

Values are hashed by what they hold exactly, never through an equality that forgets
something: numpy columns by their bytes, categoricals by their codes (the categories,
with their types, are part of the dtype), masked columns (``Int64``, ``Float64``,
``boolean``) by their values and their mask, Arrow columns by their buffers
(:mod:`.arrow_values`), intervals by both ends, sparse columns by the stored values and
where they sit. Object columns are hashed by pandas' row hash when every element is a
string (or every one bytes) by their bytes, with the type of each element by position;
otherwise element by element. A frame counts with its ``flags`` and ``attrs``.

Only pandas' own classes are handled here: a subclass defined elsewhere may carry state
these handlers do not know (``_metadata``), so it is encoded as any other object; so is
an extension array of another library.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from .arrow_values import encode_arrow, path_like_strings
from .numpy_values import encode_dtype, encode_elements
from .registry import HANDLERS, library_types_only

if TYPE_CHECKING:
    from .encoder import Encoder

__all__ = ["options_in_effect"]

# Options that change only how pandas shows things, warns or how fast it computes (the
# accelerators under compute.*: dask.dataframe turns numexpr off when imported, which
# would make hashes depend on what a process imported).
_NOT_VALUES = ("display.", "styler.", "plotting.", "compute.", "mode.chained_assignment",
               "mode.performance_warnings", "mode.sim_interactive", "mode.max_threads")


def _register() -> None:
    import pandas as pd
    from pandas.core.arrays.masked import BaseMaskedArray

    HANDLERS.register(pd.DataFrame)(_frame)
    HANDLERS.register(pd.Series)(_series)
    HANDLERS.register(pd.Index)(library_types_only("pandas")(_index))
    HANDLERS.register(pd.api.extensions.ExtensionDtype)(_extension_dtype)
    HANDLERS.register(pd.api.extensions.ExtensionArray)(_extension_array)
    arrays = pd.arrays
    _ARRAYS.extend([
        (arrays.Categorical, _categorical),
        (BaseMaskedArray, _masked),
        (arrays.ArrowExtensionArray, _arrow),
        ((arrays.DatetimeArray, arrays.TimedeltaArray, arrays.PeriodArray),
         lambda enc, arr: encode_elements(enc, arr._ndarray)),
        (arrays.NumpyExtensionArray, lambda enc, arr: _numpy(enc, arr._ndarray)),
        (arrays.IntervalArray, _intervals),
        (arrays.SparseArray, _sparse),
    ])


@library_types_only("pandas")
def _frame(enc: Encoder, obj: Any) -> None:
    enc.write_raw(b"PD")
    enc.write_callable(type(obj))
    _shared_index(enc, obj.columns)
    _shared_index(enc, obj.index)
    column = getattr(obj, "_ixs", None)  # what iloc[:, i] returns, at half its cost
    for i in range(obj.shape[1]):
        _values(enc, column(i, axis=1) if column is not None else obj.iloc[:, i])
    enc.encode(dict(obj.attrs))
    _flags(enc, obj)


@library_types_only("pandas")
def _series(enc: Encoder, obj: Any) -> None:
    enc.write_raw(b"PS")
    enc.write_callable(type(obj))
    enc.encode(obj.name)
    _shared_index(enc, obj.index)
    _values(enc, obj)
    enc.encode(dict(obj.attrs))
    _flags(enc, obj)


def _flags(enc: Encoder, obj: Any) -> None:
    # allows_duplicate_labels=False makes concat, reindex, ... raise on duplicates.
    if not obj.flags.allows_duplicate_labels:
        enc.write_raw(b"!dup")


@library_types_only("pandas")
def _extension_dtype(enc: Encoder, obj: Any) -> None:
    # Defined by its _metadata fields; its __dict__ also holds lazily filled caches.
    enc.write_raw(b"PX")
    enc.write_callable(type(obj))
    enc.encode(tuple(getattr(obj, name, None) for name in type(obj)._metadata))


def _shared_index(enc: Encoder, index: Any) -> None:
    """:func:`_index`, written once per hashing pass for equal small indexes of string
    labels: every partition of a frame has its own copy of the same ``columns``, and each
    was encoded label by label through Arrow (~50 µs, most of a small partition's hash).
    The key holds everything the encoding depends on: the index and dtype classes, the
    dtype's text, and names and labels that are all ``str`` (so ``1``, ``1.0`` and
    ``True`` never meet as equal keys)."""
    import pandas as pd

    if type(index) is pd.Index and len(index) <= _MEMO_LABELS:
        labels, names = tuple(index.tolist()), tuple(index.names)
        if all(type(v) is str for v in labels) and all(
                n is None or type(n) is str for n in names):
            dtype = index.dtype
            key = ("pandas-index", type(index), type(dtype), str(dtype), repr(dtype),
                   names, labels)
            enc.write_memo(key, lambda: _index(enc, index))
            return
    _index(enc, index)


#: Indexes with more labels are hashed each time (their key would cost what it saves).
_MEMO_LABELS = 256


def _index(enc: Encoder, index: Any) -> None:
    import pandas as pd

    enc.write_raw(b"PI")
    enc.write_callable(type(index))
    enc.encode(list(index.names))
    if isinstance(index, pd.RangeIndex):
        enc.encode(range(index.start, index.stop, index.step))
    elif isinstance(index, pd.MultiIndex):
        for level in range(index.nlevels):
            _values(enc, index.get_level_values(level))
    else:
        _values(enc, index)
    enc.encode(getattr(index, "freqstr", None))


def _values(enc: Encoder, values: Any) -> None:
    """A Series' or Index's dtype, name and data, and the files its strings name."""
    import pandas as pd

    dtype = values.dtype
    if isinstance(dtype, np.dtype):
        encode_dtype(enc, dtype)
    else:  # extension dtypes: categories, ordering, timezone, storage are part of them
        enc.encode(dtype)
    if isinstance(values, pd.Series):
        enc.encode(values.name)
    if isinstance(dtype, np.dtype):
        _numpy(enc, np.asarray(values))
        return
    _array_data(enc, values.array)


def _array_data(enc: Encoder, arr: Any) -> None:
    if type(arr).__module__.partition(".")[0] == "pandas":
        for classes, encode in _ARRAYS:
            if isinstance(arr, classes):
                encode(enc, arr)
                return
    _unknown(enc, arr)


@library_types_only("pandas")
def _extension_array(enc: Encoder, arr: Any) -> None:
    """An extension array held as a value (not in a Series): its class, dtype and data."""
    enc.write_raw(b"PA")
    enc.write_callable(type(arr))
    enc.encode(arr.dtype)
    _array_data(enc, arr)


def _numpy(enc: Encoder, arr: np.ndarray) -> None:
    """A column's numpy data: bytes, or an object column as :func:`_objects` does."""
    if arr.dtype.kind == "O":
        _objects(enc, arr)
    else:
        encode_elements(enc, arr)


def _objects(enc: Encoder, arr: np.ndarray) -> None:
    import pandas as pd

    inferred = pd.api.types.infer_dtype(arr, skipna=False)
    if inferred not in ("string", "bytes", "empty"):
        # pandas hashes mixed objects by str(): 1 and "1", None and NaN would collide.
        enc.encode(arr.tolist())
        return
    # np.str_("x") and "x" have the same characters: the type of every element counts,
    # by position.
    enc.write_name(inferred)
    types = list(map(type, arr))
    names = sorted((f"{t.__module__}.{t.__qualname__}", t) for t in set(types))
    enc.write_names(tuple(name for name, _ in names))
    if len(names) > 1:
        code = {t: i for i, (_, t) in enumerate(names)}
        enc.write_buffer(b"b", np.fromiter(map(code.__getitem__, types), dtype=np.uint8,
                                           count=len(types)).data)
    data = _as_arrow(arr, binary=inferred == "bytes")
    if data is not None:  # every string's bytes, as Arrow lays them out
        encode_arrow(enc, data)
        enc.write_listed_paths(path_like_strings(data))
    else:  # no pyarrow, or lone surrogates: pandas' row hash, 64 bits a string
        enc.write_raw(b"PH")
        encode_elements(enc, pd.util.hash_array(arr, categorize=True))
        enc.write_listed_paths(pd.unique(arr))


def _as_arrow(arr: np.ndarray, binary: bool) -> Any:
    """An object array of strings (or bytes) as an Arrow array, or None."""
    try:
        import pyarrow as pa
    except ImportError:
        return None
    try:
        return pa.array(arr, type=pa.large_binary() if binary else pa.large_string(),
                        from_pandas=False)
    except (UnicodeError, pa.ArrowException):
        return None


# -- extension arrays: their data exactly (their dtype is written already) ----------------

_ARRAYS: list[tuple[Any, Any]] = []  # (classes, encoder), filled by _register


def _categorical(enc: Encoder, arr: Any) -> None:
    encode_elements(enc, arr.codes)  # the categories, with their types, are the dtype's


def _masked(enc: Encoder, arr: Any) -> None:
    """``Int64``, ``Float64``, ``boolean``: values and mask; what sits under the mask is
    never read, and left out (so equal arrays built in other ways hash equal)."""
    data, mask = arr._data, arr._mask
    if mask.any():
        data = data.copy()
        data[mask] = 0
    encode_elements(enc, data)
    encode_elements(enc, mask)


def _arrow(enc: Encoder, arr: Any) -> None:
    import pandas as pd

    encode_arrow(enc, arr._pa_array)
    if pd.api.types.is_string_dtype(arr.dtype):
        enc.write_listed_paths(path_like_strings(arr._pa_array))


def _intervals(enc: Encoder, arr: Any) -> None:
    _values(enc, arr.left)
    _values(enc, arr.right)


def _sparse(enc: Encoder, arr: Any) -> None:
    enc.write_raw(b"%d:" % len(arr))
    enc.write_name(arr.kind)
    encode_elements(enc, arr.sp_index.indices)
    encode_elements(enc, arr.sp_values)


def _unknown(enc: Encoder, arr: Any) -> None:
    enc.write_raw(b"PE")
    enc.encode(arr)  # another library's extension array: by its pickled state


def options_in_effect() -> tuple:
    """pandas' options that differ from their defaults and can change what pandas code
    computes (``future.infer_string``, ``mode.string_storage``, ``io.*`` readers),
    as sorted ``(name, repr(value))`` pairs; empty without pandas imported or with the
    defaults, so those processes agree. Global state every task in the process reads,
    so part of every task hash (:class:`~.graph.GraphHasher`)."""
    # Only a pandas that finished importing is read, and nothing is imported here: another
    # thread (the recipe poster) importing pandas' modules while the user's thread is
    # still importing pandas made that import fail (a partially initialised module).
    # Options cannot differ from their defaults before pandas' import has finished.
    pandas = sys.modules.get("pandas")
    if pandas is None or getattr(getattr(pandas, "__spec__", None), "_initializing", False):
        return ()
    config = sys.modules.get("pandas._config.config")
    _get_root = getattr(config, "_get_root", None)
    _registered_options = getattr(config, "_registered_options", None)
    if _get_root is None or _registered_options is None:  # kept elsewhere: not seen
        return ()
    found = []
    for name, option in _registered_options.items():
        if name.startswith(_NOT_VALUES) or name.endswith(".writer"):
            continue
        root, leaf = _get_root(name)
        value = root.get(leaf, option.defval)
        if value != option.defval:
            found.append((name, repr(value)))
    return tuple(sorted(found))


HANDLERS.register_lazy("pandas", _register)
