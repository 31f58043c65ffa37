"""``open_cached``: a cached collection reopened lazily, nothing read until computed.
docs/design/entry-points.md, "Lazy reload".

- An array whose result is one Zarr array in the cache (the usual case for a large output)
  becomes a dask array over that Zarr store, one dask block per Zarr chunk: opening a
  10 GiB intermediate costs one request and one small file, and computing a slice reads
  only the chunks under it. Each chunk is verified when read against the digest storage
  recorded for it (``chunk_digests.json`` beside ``zarr.json``), after the entry's
  signature was checked at open; with a signing key, against the chunk's BLAKE3 digest
  from that file, whose root the signature binds (client_lib/wire/body_hash.py), so storage's
  own record need not be trusted.
- Otherwise the collection is rebuilt from load tasks, each a full verified load
  (``load_result``: direct read or HTTP, signature, digest, recorded warnings, handle
  checks) when computed: one per chunk or partition when each is cached (what
  ``cached_persist`` stores; a DataFrame's partitions are Parquet files or pickles), else
  one over the finished result (what ``cached_compute`` stores: a DataFrame of one
  partition, a small array or one on storage this process cannot see).

A collection with any output not in the cache raises :class:`NotCached`, naming the task.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import blake3
import numpy as np
import xxhash
from dask._task_spec import Task
from dask.base import is_dask_collection
from dask.core import flatten
from dask.utils import key_split

from .core.errors import CacheEntryCorrupt, CacheEntryUntrusted, ResultCacheError
from .execution.tasks import load_result
from .hashing.graph import remember_reopened
from .plan.hashed import hash_collections
from .plan.materialize import Materialized
from .plan.settings import namespace_of, resolve_cache
from .transport.client import CacheClient
from .transport.direct import Location
from .wire.body_hash import root_of

__all__ = ["NotCached", "open_cached"]

CHUNK_DIGESTS_NAME = "chunk_digests.json"  # docs/protocol.md, "Direct reads"


class NotCached(ResultCacheError, LookupError):
    """``open_cached`` found an output of the collection missing from the cache."""


def open_cached(collection: Any, *, cache: str | CacheClient | None = None,
                namespace: str | None = None, optimize_graph: bool = True) -> Any:
    """The dask collection ``collection`` would compute to, reopened from the cache
    without computing or loading anything yet (see the module docstring).

    ``cache`` and ``namespace`` as for :func:`~client_lib.cached_compute`. Raises
    :class:`NotCached` naming the first missing task when the cache does not hold the
    collection's result (or every one of its chunks or partitions), and
    :class:`~client_lib.CacheEntryUntrusted` for an entry without a valid signature for
    ``result-cache.signing-key``."""
    if not is_dask_collection(collection):
        raise TypeError(f"open_cached takes a dask collection, not {type(collection).__name__}")
    client = resolve_cache(cache)
    if client is None:
        raise ValueError("open_cached needs a cache: set result-cache.url or pass cache=")
    namespace = namespace_of(namespace)
    is_array = _is_array(collection)
    _, [(output, label)] = _outputs(collection, client, namespace, optimize_graph, True)
    place = client.locate(output) if client.lookup([output]) else None
    if is_array and place is not None and _lazy_zarr(place, client):
        # The finished array (concatenated chunks) as one Zarr array, sliced lazily.
        return _zarr_array(place, output, collection, client)
    m, parts = _outputs(collection, client, namespace, optimize_graph, False)
    found = client.lookup({h for h, _ in parts})
    missing = [(key, h, label) for key, (h, label) in zip(m.keys, parts, strict=True)
               if h not in found]
    if not missing:
        return _from_loads(collection, client, m, parts)
    if place is not None:
        return _from_output(collection, client, output, label, place)
    key, h, label = missing[0]
    raise NotCached(f"open_cached: {len(missing)} of {len(parts)} outputs of "
                    f"{_name(collection)} are not in the cache {client.url} (namespace "
                    f"{namespace!r}), e.g. the task {label!r} with key {key!r} (hash {h}), "
                    "nor is its finished result: compute it with cached_compute or "
                    "cached_persist first")


def _is_array(collection: Any) -> bool:
    import sys

    da = sys.modules.get("dask.array")
    return da is not None and isinstance(collection, da.Array)


def _name(collection: Any) -> str:
    return f"{type(collection).__name__} {getattr(collection, '_name', '')!r}".strip()


def _outputs(collection: Any, client: CacheClient, namespace: str, optimize_graph: bool,
             finalize: bool) -> tuple[Materialized, list[tuple[str, str]]]:
    """The graph ``cached_compute`` (``finalize``) or ``cached_persist`` would run, and
    (task hash, label) of each of its output keys; NotCached for a volatile one."""
    hashed = hash_collections([collection], namespace=namespace,
                              signing_key=client.signing_key, optimize_graph=optimize_graph,
                              finalize=finalize)
    m, hashes = hashed.m, hashed.hashes
    out = []
    for key in m.keys:
        task_hash = hashes.hashes.get(key)
        if task_hash is None:
            reason = hashes.volatile.get(key, "not a task of its own")
            raise NotCached(f"open_cached: output {key!r} of {_name(collection)} is never "
                            f"cached ({reason})")
        # A load of it (below) hashes as this task: what is computed on a reopened
        # collection hashes as on the collection itself (issue 27, case 10).
        remember_reopened(load_result, task_hash, hashes.digests[key])
        out.append((task_hash, hashes.labels.get(key) or key_split(key)))
    return m, out


def _from_loads(collection: Any, client: CacheClient, m: Materialized,
                parts: list[tuple[str, str]]) -> Any:
    """The collection rebuilt over one verified load task per output key (persist's
    keys: chunks or partitions), as ``cached_persist`` rebuilds it."""
    keys = list(flatten(m.nested_keys))
    graph = {key: Task(key, load_result, client, task_hash, label)
             for key, (task_hash, label) in zip(keys, parts, strict=True)}
    rebuild, extra = collection.__dask_postpersist__()
    return rebuild(graph, *extra)


def _from_output(collection: Any, client: CacheClient, task_hash: str, label: str,
                 place: Location) -> Any:
    """One chunk or partition over the cached finished result, loaded when computed."""
    if _is_xarray(collection):
        return _xarray_from_output(collection, client, task_hash, label)
    if _is_array(collection):
        import dask.array as da
        from dask import delayed

        shape = tuple(json.loads(place.shape)) if place.kind == "ndarray" else collection.shape
        return da.from_delayed(delayed(load_result, pure=True)(client, task_hash, label),
                               shape=shape, dtype=collection.dtype, meta=collection._meta)
    import dask.dataframe as dd
    from dask import delayed

    return dd.from_delayed([delayed(load_result, pure=True)(client, task_hash, label)],
                           meta=collection._meta, verify_meta=False)


def _is_xarray(collection: Any) -> bool:
    import sys

    xr = sys.modules.get("xarray")
    return xr is not None and isinstance(collection, xr.Dataset | xr.DataArray)


def _xarray_from_output(collection: Any, client: CacheClient, task_hash: str,
                        label: str) -> Any:
    """The Dataset or DataArray with each dask-backed variable (data and coordinates) a
    one-block dask array over one shared load of the cached result: computing any part
    loads it once (verified, as ``load_result`` does); coordinates held in memory, names,
    dimensions and attributes are the collection's own, which hash the same as the
    cached result's (docs/correctness.md, xarray)."""
    import dask.array as da
    from dask import delayed

    loaded = delayed(load_result, pure=True)(client, task_hash, label,
                                             dask_key_name=f"open-cached-{task_hash}")
    own = getattr(collection, "name", None) if hasattr(collection, "variable") else None

    def lazy(name: Any, variable: Any, own_data: bool = False) -> Any:
        values = delayed(_xarray_values, pure=True)(loaded, name, own_data)
        return variable.copy(data=da.from_delayed(values, shape=variable.shape,
                                                  dtype=variable.dtype,
                                                  meta=variable.data._meta))

    coords = {name: lazy(name, coord.variable) for name, coord in collection.coords.items()
              if is_dask_collection(coord.variable.data)}
    if hasattr(collection, "variable"):  # a DataArray
        reopened = collection.copy(data=lazy(own, collection.variable, True).data)
    else:
        reopened = collection.copy()
        for name, array in collection.data_vars.items():
            if is_dask_collection(array.variable.data):
                reopened[name] = lazy(name, array.variable)
    return reopened.assign_coords(coords) if coords else reopened


def _xarray_values(result: Any, name: Any, own_data: bool) -> np.ndarray:
    """One variable's values out of a loaded Dataset or DataArray."""
    if own_data:
        return np.asarray(result.variable.values)
    return np.asarray((result.coords[name] if name in result.coords else result[name]).values)




def _lazy_zarr(place: Location, client: CacheClient) -> bool:
    # Local Zarr arrays only: an object store's (an s3:// location) load whole, verified.
    # A signing client needs the chunks' BLAKE3 digests (a file written before them: whole).
    if not (place.storage == "zarr" and isinstance(place.path, Path)
            and (place.path / CHUNK_DIGESTS_NAME).is_file()):
        return False
    return client.signing_key is None or "blake3" in json.loads(
        (place.path / CHUNK_DIGESTS_NAME).read_bytes())


def _zarr_array(place: Location, task_hash: str, like: Any, client: CacheClient) -> Any:
    """A dask array with one block per chunk of the Zarr array at ``place``."""
    import dask.array as da

    assert isinstance(place.path, Path)
    meta = json.loads((place.path / "zarr.json").read_bytes())
    recorded = json.loads((place.path / CHUNK_DIGESTS_NAME).read_bytes())
    digests = tuple(recorded["digests"])
    if place.body:  # signed: the BLAKE3 digests, trusted once their root is the signed one
        digests = tuple(recorded["blake3"])
        if root_of([bytes.fromhex(d) for d in digests]) != place.body:
            client.report_untrusted(task_hash)
            raise CacheEntryUntrusted(task_hash, "its chunks are not those its signature "
                                      "binds; not opened")
    shape = tuple(json.loads(place.shape))
    grid = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
    chunks = da.core.normalize_chunks(grid, shape)
    if len(digests) != int(np.prod([len(c) for c in chunks])) or tuple(meta["shape"]) != shape:
        raise CacheEntryCorrupt(task_hash, "chunk digests for the array's grid",
                                f"{len(digests)} digests")
    dtype = np.dtype(place.dtype)
    return da.map_blocks(
        _read_block, dtype=dtype, chunks=chunks, name=f"open-cached-{task_hash}",
        meta=np.empty((0,) * len(shape), dtype=dtype), entry=_ZarrEntry(str(place.path), task_hash),
        digests=digests, dtype_text=place.dtype, task_hash=task_hash)


class _ZarrEntry:
    """Where a cached Zarr array lies, hashed by the task whose result it holds: its
    directory's stamp changes when another entry of the same content is stored beside it
    (issue 27, case 10), and a block's task says which result and chunk it reads."""

    __slots__ = ("path", "task_hash")

    def __init__(self, path: str, task_hash: str) -> None:
        self.path = path
        self.task_hash = task_hash

    def __reduce__(self) -> tuple:
        return (_ZarrEntry, (self.path, self.task_hash))

    def __dask_tokenize__(self) -> tuple:
        return ("open-cached-zarr", self.task_hash)


@functools.lru_cache(maxsize=64)
def _open_zarr(path: str) -> Any:
    import zarr
    from zarr.storage import LocalStore

    return zarr.open_array(LocalStore(path, read_only=True), mode="r")


def _read_block(entry: _ZarrEntry, digests: tuple[str, ...], dtype_text: str, task_hash: str,
                block_id: tuple[int, ...] = ()) -> np.ndarray:
    """One Zarr chunk in its true dtype, verified against its recorded digest."""
    array = _open_zarr(entry.path)
    region = tuple(slice(i * c, min((i + 1) * c, n))
                   for i, c, n in zip(block_id, array.chunks, array.shape, strict=True))
    stored = np.asarray(array[region])
    dtype = np.dtype(dtype_text)
    # Unit-less datetimes are kept as integers of the same size; other dtypes come back
    # in native byte order (storage/_zarr.py).
    block = np.ascontiguousarray(stored.view(dtype) if stored.dtype.kind != dtype.kind
                                 else stored.astype(dtype, copy=False))
    grid = tuple(-(-n // c) for c, n in zip(array.chunks, array.shape, strict=True))
    index = int(np.ravel_multi_index(block_id, grid)) if block_id else 0
    # Bytes as storage hashed them: numpy exports no buffer of datetimes ('M', 'm').
    data = block.reshape(-1).view(np.uint8)
    expected = digests[index]
    actual = (blake3.blake3(data).hexdigest() if len(expected) == 64
              else xxhash.xxh3_128_hexdigest(data))
    if actual != expected:
        raise CacheEntryCorrupt(task_hash, digests[index], actual)
    return block

