"""Handlers for xarray's data structures and file managers, registered the first time an
xarray value is hashed (importing the hasher never imports xarray).

- ``Dataset``, ``DataArray``, ``Variable`` (coordinates included): by dimensions, data,
  attributes, encoding and, for datasets and arrays, coordinate names, indexes and name.
  Their own ``__dask_tokenize__`` goes through ``dask.tokenize`` (whose buffer hash depends
  on which hash package is installed, docs/design/dask-facts.md, Facts about Dask that shape
  the code); here numpy data goes through our handler, so a coordinate edit changes the
  hash like any array edit, and strings in coordinates that name files stand for those
  files. Dask-backed data counts as a dask array held as a value does: where a Dataset
  stands in the graph as a template (the finalisation task's bound ``_dask_postcompute``)
  its chunks are tasks of the graph, and the array counts by their task hashes and its
  layout, never by its name (``GraphHasher._collection``).
- File managers: ``open_dataset(..., chunks=...)`` puts the backend's lazily indexed array
  into the graph, holding the manager that reopens the file on every worker. Its pickled
  state carries a random ``manager_id`` (a key into xarray's process-wide file cache) and
  a lock; neither says what the file holds. A manager is its opener, the opener's
  arguments (a file name among them stands for the file: path, size, modification time),
  mode and keyword arguments. Zarr-backed datasets hold ``zarr.Array`` objects
  (:mod:`.external`).

Only xarray's own classes are handled; a subclass defined elsewhere is encoded as any
other object.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .registry import HANDLERS, library_types_only

if TYPE_CHECKING:
    from .encoder import Encoder

__all__: list[str] = []


def _by_name(mapping: Any) -> list[tuple[Any, Any]]:
    """A mapping's items in name order: xarray fills some of its dictionaries (indexes,
    the variables ``map_blocks`` returns) from sets, in an order that differs between
    processes, and equality (``identical``) ignores that order."""
    return sorted(mapping.items(), key=lambda item: repr(item[0]))


def _write(enc: Encoder, tag: bytes, obj: Any, *parts: Any) -> None:
    """``obj`` as its tag, its class and ``parts`` (a callable among them by its code)."""
    enc.write_raw(tag)
    enc.write_callable(type(obj))
    for part in parts:
        enc.encode(part)


@library_types_only("xarray")
def _variable(enc: Encoder, var: Any) -> None:
    data = var._data
    if type(data).__name__ == "PandasIndexingAdapter":  # an index variable's pandas index
        data = (data.array, str(data.dtype))
    _write(enc, b"XV", var, tuple(var.dims), data, dict(var.attrs), dict(var.encoding))


@library_types_only("xarray")
def _dataset(enc: Encoder, ds: Any) -> None:
    _write(enc, b"XD", ds, _by_name(ds._variables), sorted(map(repr, ds._coord_names)),
           _by_name(ds._indexes), dict(ds.attrs), dict(ds.encoding))


@library_types_only("xarray")
def _data_array(enc: Encoder, arr: Any) -> None:
    _write(enc, b"XA", arr, arr._name, arr._variable, _by_name(arr._coords),
           _by_name(arr._indexes))


@library_types_only("xarray")
def _pandas_index(enc: Encoder, index: Any) -> None:
    levels = getattr(index, "level_coords_dtype", None) or {}  # a PandasMultiIndex's
    _write(enc, b"XI", index, index.index, index.dim, str(index.coord_dtype),
           {str(name): str(dtype) for name, dtype in levels.items()})


@library_types_only("xarray")
def _file_manager(enc: Encoder, obj: Any) -> None:
    _write(enc, b"XF", obj, obj._opener, tuple(obj._args), obj._mode, dict(obj._kwargs))


def _lock(enc: Encoder, obj: Any) -> None:
    enc.write_raw(b"LK")  # a random token; a lock never changes a result (.external)


def _register() -> None:
    import xarray as xr
    from xarray.backends.file_manager import CachingFileManager, PickleableFileManager
    from xarray.backends.locks import SerializableLock
    from xarray.core.indexes import PandasIndex

    HANDLERS.register(xr.Variable)(_variable)
    HANDLERS.register(xr.Dataset)(_dataset)
    HANDLERS.register(xr.DataArray)(_data_array)
    HANDLERS.register(PandasIndex)(_pandas_index)
    HANDLERS.register(CachingFileManager, PickleableFileManager)(_file_manager)
    HANDLERS.register(SerializableLock)(_lock)


HANDLERS.register_lazy("xarray", _register)
