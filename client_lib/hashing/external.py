"""Handlers for values that stand for data outside the process: HDF5 datasets and groups,
Zarr arrays and groups, fsspec files (by path and file stamps; a file to write by path),
fsspec filesystems (by protocol and storage options), the locks Dask hands to IO tasks
(one value: a lock never changes a result), distributed Futures (volatile: their keys
are random), and ``dask.delayed`` objects held as values (a delayed function by what it
calls; a delayed computation is volatile: the task gets the object itself). Each
library's handlers are registered the first time one of its values is hashed, so
importing the hasher imports none of them.

Only the libraries' own classes are handled here; a subclass defined elsewhere is
encoded as any other object.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import VolatileValue
from .numpy_values import encode_dtype, encode_ndarray
from .provenance import file_stamp
from .registry import HANDLERS, library_types_only

if TYPE_CHECKING:
    from .encoder import Encoder

__all__: list[str] = []


@library_types_only("h5py")
def _h5py(enc: Encoder, obj: Any) -> None:
    import h5py

    filename = obj.file.filename
    enc.write_raw(b"H5")
    enc.write_name(type(obj).__name__)
    enc.write_str(os.path.abspath(filename))
    enc.write_name(obj.name or "")  # the path inside the file
    if isinstance(obj, h5py.Dataset):
        enc.encode(obj.shape)
        encode_dtype(enc, obj.dtype)
    stamp = file_stamp(filename)
    if stamp is None:
        raise VolatileValue(f"h5py file {filename!r} cannot be stat'ed")
    enc.write_raw(stamp)


@library_types_only("zarr")
def _zarr(enc: Encoder, obj: Any) -> None:
    import zarr

    store = obj.store
    root = getattr(store, "root", None)
    enc.write_raw(b"ZA")
    enc.write_name(type(obj).__name__)
    enc.write_name(obj.path)
    if isinstance(obj, zarr.Array):
        enc.encode(obj.shape)
        enc.write_name(str(obj.dtype))
    if root is not None:  # a LocalStore: every file's size and mtime
        path = os.path.join(os.fspath(root), obj.path)
        enc.write_str(os.path.abspath(path))
        stamp = file_stamp(path)
        if stamp is None:
            raise VolatileValue(f"zarr array at {path!r} cannot be stat'ed")
        enc.write_raw(stamp)
    elif isinstance(obj, zarr.Array):  # in-memory and other stores: by content
        encode_ndarray(enc, np.asarray(obj[...]))
    else:
        raise VolatileValue(f"zarr group on {type(store).__name__} cannot be fingerprinted")


@library_types_only("fsspec")
def _fsspec_file(enc: Encoder, obj: Any) -> None:
    fs = obj.fs
    enc.write_raw(b"FS")
    _filesystem(enc, fs)
    enc.encode((obj.mode, obj.compression, obj.encoding, obj.errors, obj.newline))
    if set(obj.mode) & set("wax+"):  # a file to write: its current content is not an input
        enc.write_name(obj.path)
        return
    try:
        info = fs.info(obj.path)
    except Exception as exc:
        raise VolatileValue(f"cannot stat {obj.path!r}: {exc}") from None
    stamp = {k: info.get(k) for k in ("size", "mtime", "ETag", "etag", "LastModified",
                                       "last_modified", "md5", "created") if k in info}
    enc.write_str(obj.path)
    enc.encode({k: str(v) for k, v in stamp.items()})


def _filesystem(enc: Encoder, fs: Any) -> None:
    """An fsspec filesystem (of fsspec or of another package: s3fs, gcsfs, ...) by class,
    protocol and storage options: its own ``__dask_tokenize__`` mixes in the process id,
    so it differs in every process."""
    enc.write_raw(b"FF")
    enc.write_callable(type(fs))
    enc.encode(fs.protocol)
    enc.encode(dict(sorted(fs.storage_options.items())))


def _lock(enc: Encoder, obj: Any) -> None:
    # The locks Dask hands to IO tasks (SerializableLock, distributed.Lock, a
    # multiprocessing manager's lock: whichever the scheduler calls for) carry a random
    # name or token. A lock orders tasks, it never changes what one computes: all are one
    # value.
    enc.write_raw(b"LK")


def _future(enc: Encoder, obj: Any) -> None:
    raise VolatileValue("a distributed Future (random key) is an argument")


def _delayed_function(enc: Encoder, obj: Any) -> None:
    # ``@dask.delayed`` on a function (a method's class attribute, a global): by what it
    # calls, like the function itself; its ``__dask_tokenize__`` is its key, which
    # tokenises the function and differs from one process to the next.
    enc.write_callable(obj)


def _delayed(enc: Encoder, obj: Any) -> None:
    # A computation Dask did not traverse (``traverse=False``, inside an object): the
    # task gets the Delayed object itself, by identity, and its key may be random.
    raise VolatileValue("a dask.delayed object held as a value (not computed)")


def _register_h5py() -> None:
    import h5py

    HANDLERS.register(h5py.Dataset, h5py.Group)(_h5py)


def _register_zarr() -> None:
    import zarr

    HANDLERS.register(zarr.Array, zarr.Group)(_zarr)


def _register_fsspec() -> None:
    from fsspec import AbstractFileSystem
    from fsspec.core import OpenFile

    HANDLERS.register(OpenFile)(_fsspec_file)
    HANDLERS.register(AbstractFileSystem)(_filesystem)


def _register_distributed() -> None:
    from distributed import Future, Lock, MultiLock, Semaphore

    HANDLERS.register(Future)(_future)
    HANDLERS.register(Lock, MultiLock, Semaphore)(_lock)


def _register_dask() -> None:
    from dask.delayed import Delayed, DelayedLeaf
    from dask.utils import SerializableLock

    HANDLERS.register(SerializableLock)(_lock)
    HANDLERS.register(DelayedLeaf)(_delayed_function)
    HANDLERS.register(Delayed)(_delayed)


def _register_multiprocessing() -> None:
    from multiprocessing.managers import AcquirerProxy  # a manager's Lock()

    HANDLERS.register(AcquirerProxy)(_lock)


HANDLERS.register_lazy("h5py", _register_h5py)
HANDLERS.register_lazy("zarr", _register_zarr)
HANDLERS.register_lazy("fsspec", _register_fsspec)
HANDLERS.register_lazy("distributed", _register_distributed)
HANDLERS.register_lazy("dask", _register_dask)
HANDLERS.register_lazy("multiprocessing", _register_multiprocessing)
