"""Zarr arrays staged by outside writers (storage/_staging.py): the layout they write, and
the server's check of it.

A staged array is uncompressed, whatever the data: each chunk file holds the chunk's raw
bytes, which the writer copies out of its array at disk speed (compressing would cost the
writer's CPU, and the server's to verify). The server names the chunk files by giving the
writer the ``zarr.json`` the array will have (the storage's chunking rule, the ``bytes``
codec in the dtype's byte order); at commit it reads every chunk file once, feeding the
whole body's digest, each chunk's xxh3 (and, for a signed object, its BLAKE3), and fsyncs
each file in the background as soon as it is read; then it writes its own ``zarr.json``
and ``chunk_digests.json``.
"""

from __future__ import annotations

import json
import math
import os
from concurrent.futures import wait
from pathlib import Path

import blake3
import xxhash
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import MemoryStore

from storage._atomic import fsync_file
from storage._body import BodyCheck
from storage._staging import StagedFile, check_files, piece_buffer, read_staged
from storage._zarr import (
    _SYNCS,
    CHUNK_DIGESTS_NAME,
    _DtypePlan,
    _raw_chunks,
    _regions,
    chunk_shape,
)
from storage.errors import InvalidBody, StagingUnsupported
from storage.header import ObjectHeader

__all__ = ["adopt_staged_array", "staged_metadata"]

ZARR_JSON = "zarr.json"


def _metadata_bytes(header: ObjectHeader) -> tuple[bytes, zarr.Array]:
    """The ``zarr.json`` of an uncompressed array with this header in the storage's
    chunking, and the (empty, in-memory) array it describes."""
    assert header.shape is not None
    dtype = header.numpy_dtype
    plan = _DtypePlan.for_dtype(dtype)
    array = zarr.create_array(
        store=MemoryStore(), shape=header.shape, chunks=chunk_shape(header.shape, dtype.itemsize),
        dtype=plan.stored, compressors=None, filters=None,
        config={"write_empty_chunks": True}, zarr_format=3)
    if not _raw_chunks(array, plan.stored):
        raise StagingUnsupported(f"arrays of {dtype.str} are not stored as raw chunks")
    raw = array.metadata.to_buffer_dict(default_buffer_prototype())[ZARR_JSON].to_bytes()
    return raw, array


def staged_metadata(header: ObjectHeader) -> dict:
    """What a writer of a staged array needs: the ``zarr.json`` the object will have."""
    return json.loads(_metadata_bytes(header)[0])


def adopt_staged_array(directory: Path, header: ObjectHeader, body: BodyCheck, *,
                       strong: bool) -> None:
    """Check the staged chunk files in ``directory``, feed their bytes (in grid order, the
    body's) to ``body``, and write the array's own metadata beside them. Raises
    :class:`~storage.errors.InvalidBody` for a missing, extra, linked or short file."""
    metadata, array = _metadata_bytes(header)
    itemsize = header.numpy_dtype.itemsize
    full = itemsize * math.prod(array.chunks)
    regions = list(_regions(array.shape, array.chunks))
    keys = [array.metadata.encode_chunk_key(
        tuple(r.start // c for r, c in zip(region, array.chunks, strict=True)))
        for region in regions]
    check_files(directory, keys)
    buffer = piece_buffer()
    digests: list[str] = []
    strong_digests: list[str] = []
    syncs = []
    try:
        for key, region in zip(keys, regions, strict=True):
            size = itemsize * math.prod(r.stop - r.start for r in region)
            file = StagedFile(directory / key)
            try:
                if file.size not in (size, full):
                    raise InvalidBody(f"staged chunk {key} has {file.size} bytes, not {size}")
                chunk = xxhash.xxh3_128()
                consumers = [body.feed, chunk.update]
                if strong:
                    hasher = blake3.blake3()
                    consumers.append(hasher.update)
                read_staged(file, 0, size, buffer, *consumers)
                if file.size != full:  # an edge chunk's file is padded, as Zarr pads it
                    os.truncate(directory / key, full)
            finally:
                file.close()
            digests.append(chunk.hexdigest())
            if strong:
                strong_digests.append(hasher.hexdigest())
            syncs.append(_SYNCS.submit(fsync_file, directory / key))
        for sync in syncs:
            sync.result()  # an fsync's error fails the commit
    finally:
        wait(syncs)  # before the directory is published or removed
    (directory / ZARR_JSON).write_bytes(metadata)
    listed: dict[str, list[str]] = {"digests": digests}
    if strong:
        listed["blake3"] = strong_digests
    (directory / CHUNK_DIGESTS_NAME).write_text(json.dumps(listed))
