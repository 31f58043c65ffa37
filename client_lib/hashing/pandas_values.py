"""Handlers for pandas frames, series, indexes and extension dtypes, registered the first
time a pandas value is hashed (importing the hasher never imports pandas).

Only pandas' own classes are handled here: a subclass defined elsewhere may carry state
these handlers do not know (``_metadata``), so it is encoded as any other object.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .numpy_values import encode_dtype, encode_ndarray
from .registry import HANDLERS, library_types_only

if TYPE_CHECKING:
    from .encoder import Encoder

__all__: list[str] = []


def _register() -> None:
    import pandas as pd

    HANDLERS.register(pd.DataFrame)(_frame)
    HANDLERS.register(pd.Series)(_series)
    HANDLERS.register(pd.Index)(library_types_only("pandas")(_index))
    HANDLERS.register(pd.api.extensions.ExtensionDtype)(_extension_dtype)


@library_types_only("pandas")
def _frame(enc: Encoder, obj: Any) -> None:
    enc.write_raw(b"PD")
    enc.write_callable(type(obj))
    _index(enc, obj.columns)
    _index(enc, obj.index)
    for i in range(obj.shape[1]):
        _values(enc, obj.iloc[:, i])
    enc.encode(dict(obj.attrs))


@library_types_only("pandas")
def _series(enc: Encoder, obj: Any) -> None:
    enc.write_raw(b"PS")
    enc.write_callable(type(obj))
    enc.encode(obj.name)
    _index(enc, obj.index)
    _values(enc, obj)
    enc.encode(dict(obj.attrs))


@library_types_only("pandas")
def _extension_dtype(enc: Encoder, obj: Any) -> None:
    # Defined by its _metadata fields; its __dict__ also holds lazily filled caches.
    enc.write_raw(b"PX")
    enc.write_callable(type(obj))
    enc.encode(tuple(getattr(obj, name, None) for name in type(obj)._metadata))


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
    import pandas as pd

    dtype = values.dtype
    if isinstance(dtype, np.dtype):
        encode_dtype(enc, dtype)
    else:  # extension dtypes: categories, ordering, timezone, storage are part of them
        enc.encode(dtype)
    if isinstance(values, pd.Series):
        enc.encode(values.name)
    if isinstance(dtype, np.dtype) and dtype.kind in "biufcmM":
        encode_ndarray(enc, np.asarray(values))
        return
    if isinstance(dtype, np.dtype) and dtype.kind == "O":
        inferred = pd.api.types.infer_dtype(values, skipna=False)
        if inferred not in ("string", "bytes", "empty"):
            # pandas hashes mixed objects by str(): 1 and "1", None and NaN would collide.
            enc.encode(list(values))
            return
        # pandas' hash encodes b"x" and "x" alike: the element types are part of it.
        enc.write_name(inferred)
        enc.write_names(tuple(sorted(f"{t.__module__}.{t.__qualname__}"
                                     for t in set(map(type, np.asarray(values))))))
    try:
        # pandas' own hash: deterministic (fixed siphash key), handles extension dtypes.
        hashed = pd.util.hash_pandas_object(values, index=False, categorize=True)
    except Exception:
        enc.encode(list(values))
        return
    encode_ndarray(enc, np.asarray(hashed))
    if getattr(dtype, "kind", None) == "O" or pd.api.types.is_string_dtype(dtype):
        enc.write_listed_paths(values.unique())  # pandas' own (arrow's for str columns)


HANDLERS.register_lazy("pandas", _register)
