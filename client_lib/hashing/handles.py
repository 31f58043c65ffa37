"""Handles to external mutable state: open files, partd stores, locks, connections,
sockets, executors, zarr/HDF5 objects, filesystems.
docs/correctness.md, "Tasks that are not values".

A handle is not a value: pickled, it either fails, or comes back as something else (an
open file as an ``io.StringIO``), or points at state that has moved on (a partd store in a
temporary directory of an earlier run). So a result that is (or holds) a handle is never
stored and never loaded, whatever produced it (:func:`is_handle`), and the graph hasher
treats the tasks whose function creates one specially (:func:`handle_kind`): a *scratch*
store filled and read inside the same graph (partd, a temporary directory, a lock, an
executor) is pinned with the tasks that touch it; anything else is volatile.

Library types are looked up only in modules already imported: a value of a library that
was never imported cannot be here.
"""

from __future__ import annotations

import io
import sys
import types
from typing import Any

__all__ = ["handle_kind", "is_handle"]

# (module, dotted name) of handle classes; a module not yet imported has no instances.
_HANDLE_CLASSES = (
    ("_thread", "LockType"), ("_thread", "RLock"),
    ("threading", "Condition"), ("threading", "Semaphore"), ("threading", "Event"),
    ("threading", "Barrier"),
    ("queue", "Queue"), ("queue", "SimpleQueue"),
    ("socket", "socket"), ("mmap", "mmap"), ("select", "epoll"),
    ("subprocess", "Popen"),
    ("sqlite3", "Connection"), ("sqlite3", "Cursor"),
    ("tempfile", "TemporaryDirectory"), ("tempfile", "_TemporaryFileWrapper"),
    ("tempfile", "SpooledTemporaryFile"),
    ("concurrent.futures", "Executor"), ("multiprocessing.pool", "Pool"),
    ("multiprocessing.synchronize", "SemLock"), ("multiprocessing.queues", "Queue"),
    ("multiprocessing.managers", "BaseProxy"), ("asyncio", "AbstractEventLoop"),
    ("dask.utils", "SerializableLock"),
    ("distributed", "Lock"), ("distributed", "Semaphore"), ("distributed", "Event"),
    ("distributed", "Queue"), ("distributed", "Variable"), ("distributed", "Client"),
    ("partd", "Interface"),
    ("h5py", "File"), ("h5py", "Group"), ("h5py", "Dataset"),
    ("zarr", "Array"), ("zarr", "Group"), ("zarr.abc.store", "Store"),
    ("fsspec", "AbstractFileSystem"), ("fsspec.core", "OpenFile"),
    ("pandas", "HDFStore"), ("tables", "File"), ("tables", "Node"),
)
_IN_MEMORY_FILES = (io.StringIO, io.BytesIO)
_ITERATORS = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)
_CONTAINER_ITEMS = 64  # look this far into tuples, lists and dicts (two levels)

_classes: dict[frozenset[str], tuple[type, ...]] = {}
# The classes for the sys.modules size they were found at, and the types found not to be
# handles given those classes (an ndarray is asked about once per process, not per result).
_current: tuple[int, tuple[type, ...]] = (-1, ())
_plain: set[type] = set()


def _resolve(module: str, name: str) -> type | None:
    obj: Any = sys.modules.get(module)
    for part in name.split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


def _handle_classes() -> tuple[type, ...]:
    """The handle classes of the modules imported so far (cached per set of modules, looked
    for again when a module was imported or removed)."""
    global _current
    count, found = _current
    if count == len(sys.modules):
        return found
    present = frozenset(m for m, _ in _HANDLE_CLASSES if m in sys.modules)
    found = _classes.get(present)
    if found is None:
        resolved = (_resolve(m, n) for m, n in _HANDLE_CLASSES if m in present)
        found = _classes[present] = tuple(c for c in resolved if c is not None)
    if found != _current[1]:
        _plain.clear()  # a type plain before may be a handle class's subclass now
    _current = (len(sys.modules), found)
    return found


def _is_db_connection(value: Any) -> bool:
    cls = type(value)  # DB-API 2.0: every connection has cursor(), commit(), close()
    return all(callable(getattr(cls, name, None)) for name in ("cursor", "commit", "close"))


def is_handle(value: Any, depth: int = 2) -> bool:
    """Whether ``value`` is, or directly holds (in a tuple, list or dict, two levels
    deep), a handle to external mutable state."""
    cls = type(value)
    if value is None or cls in (int, float, str, bytes, bool):
        return False
    classes = _handle_classes()
    if cls in _plain:
        return False
    if isinstance(value, io.IOBase):
        return not isinstance(value, _IN_MEMORY_FILES)
    if isinstance(value, _ITERATORS + classes) or _is_db_connection(value):
        return True
    if cls not in (tuple, list, dict):
        _plain.add(cls)  # by its type alone (a container's items are looked at each time)
        return False
    if depth and type(value) in (tuple, list):
        return any(is_handle(v, depth - 1) for v in value[:_CONTAINER_ITEMS])
    if depth and type(value) is dict:
        return any(is_handle(v, depth - 1)
                   for _, v in zip(range(_CONTAINER_ITEMS), value.values(), strict=False))
    return False


# -- the functions that create handles ----------------------------------------------------

# Stores whose content the graph itself writes and reads (a disk shuffle's partd, a
# scratch directory, a lock, a pool): pinned with the tasks that touch them.
_SCRATCH = (
    ("tempfile", "mkdtemp"), ("tempfile", "TemporaryDirectory"),
    ("threading", "Lock"), ("threading", "RLock"), ("_thread", "allocate_lock"),
    ("threading", "Condition"), ("threading", "Semaphore"), ("threading", "Event"),
    ("queue", "Queue"), ("concurrent.futures", "ThreadPoolExecutor"),
    ("concurrent.futures", "ProcessPoolExecutor"), ("multiprocessing", "Pool"),
    ("dask.utils", "SerializableLock"),
)
# Handles onto state outside the graph: volatile, with everything downstream.
_EXTERNAL = (
    ("builtins", "open"), ("io", "open"), ("io", "FileIO"), ("io", "open_code"),
    ("os", "fdopen"), ("gzip", "open"), ("bz2", "open"), ("lzma", "open"),
    ("tempfile", "TemporaryFile"), ("tempfile", "NamedTemporaryFile"),
    ("tempfile", "SpooledTemporaryFile"), ("tempfile", "mkstemp"),
    ("socket", "socket"), ("socket", "create_connection"), ("socket", "socketpair"),
    ("sqlite3", "connect"), ("mmap", "mmap"), ("subprocess", "Popen"),
    ("urllib.request", "urlopen"), ("h5py", "File"), ("tables", "open_file"),
    ("pandas", "HDFStore"), ("zarr", "open"), ("zarr", "open_array"),
    ("zarr", "open_group"), ("fsspec", "filesystem"),
)


def handle_kind(func: Any) -> str | None:
    """``"scratch"`` when calling ``func`` creates a store the graph fills and reads
    itself (anything from ``partd``, temporary directories, locks, executors),
    ``"external"`` when it opens a handle onto outside state (files, sockets,
    connections, HDF5/zarr objects), ``None`` otherwise."""
    if (getattr(func, "__module__", None) or "").partition(".")[0] == "partd":
        return "scratch"
    for kind, known in (("scratch", _SCRATCH), ("external", _EXTERNAL)):
        for module, name in known:
            if module in sys.modules and getattr(sys.modules[module], name, None) is func:
                return kind
    if type(func).__name__ == "maybe_buffered_partd":  # dask.dataframe's partd factory
        return "scratch"
    if isinstance(func, type) and func not in _IN_MEMORY_FILES and (
            issubclass(func, io.IOBase) or issubclass(func, _handle_classes())):
        return "external"
    return None
