"""Zarr backend: each array object is one Zarr v3 array directory, readable lazily later.

Chunking and compression are decided here and nowhere else. Measured on this machine
(2 cores; 512 MiB float64, region writes plus fsync of every file, then a hot read):

============  ==================  ==================  ==================
chunk size    random, no codec    random, lz4 (1.1x)  smooth, lz4 (148x)
============  ==================  ==================  ==================
4 MiB         0.40 / 0.83 GB/s    0.47 / 1.15 GB/s    1.42 / 1.35 GB/s
16 MiB        1.16 / 1.41 GB/s    0.62 / 1.54 GB/s    2.30 / 2.09 GB/s
32 MiB        1.16 / 1.78 GB/s    0.66 / 1.08 GB/s    2.62 / 1.28 GB/s
64 MiB        1.35 / 1.50 GB/s    0.53 / 0.80 GB/s    2.61 / 1.16 GB/s
============  ==================  ==================  ==================

(write+fsync / read.) Hence:

- Chunks of about 16 MiB (``CHUNK_TARGET_BYTES``): small chunks pay per-file overhead, large
  ones read slower, and 16 MiB bounds the memory one streaming write holds.
- Chunks are C-order contiguous slabs (``(1, ..., 1, k, full, ..., full)``), so the chunk grid
  in C order is the body in order: a streamed upload is written chunk by chunk as it arrives.
- Blosc lz4 + byte shuffle only when a sample of the first chunk compresses by at least
  ``MIN_COMPRESSION_RATIO`` (1.3x): incompressible data written through lz4 is half as fast
  (0.62 against 1.16 GB/s), compressible data gains both speed and space. zstd runs below disk
  speed here (0.3-0.6 GB/s, BENCHMARKS.md, "Storage and transport facts").
- ``write_empty_chunks=True``: Zarr's default emptiness check costs ~0.8 s/GiB.

dtype fidelity: Zarr stores numeric, bool, datetime64/timedelta64 with a unit, and fixed-width
``S``/``U`` natively (trailing NULs survive), but returns big-endian data in native byte order;
we convert back on read. Unit-less datetime64/timedelta64 has no valid Zarr fill value, so it is
stored as same-itemsize unsigned integers and viewed back; the sidecar keeps the true dtype.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import warnings
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import blake3
import numcodecs
import numpy as np
import xxhash
import zarr
from zarr.codecs import BloscCodec, BytesCodec
from zarr.storage import LocalStore

from storage._atomic import fsync_file
from storage._body import BodyCheck
from storage._directory import DirectoryStore, Payload, Pieces
from storage.base import FileRange, Sidecar
from storage.errors import CorruptObject, ObjectNotFound
from storage.header import ObjectHeader

try:  # zarr marks fixed-width strings as not yet covered by a stable v3 spec; we accept that.
    from zarr.core.dtype.common import UnstableSpecificationWarning

    warnings.filterwarnings("ignore", category=UnstableSpecificationWarning)
except ImportError:  # pragma: no cover - other zarr 3.x layouts
    pass

__all__ = [
    "CHUNK_DIGESTS_NAME",
    "CHUNK_TARGET_BYTES",
    "MIN_COMPRESSION_RATIO",
    "ZarrArrayStore",
    "chunk_shape",
]

CHUNK_TARGET_BYTES = 16 * 2**20
#: Beside ``zarr.json``: the xxh3-128 (hex) of every chunk's bytes as they arrived (the
#: true dtype, C order), chunks in C order of the grid (``digests``), and their BLAKE3
#: (``blake3``, 64 hex each; only for objects stored with a signature, the only ones whose
#: readers check them). A lazy reader verifies each chunk it reads against them
#: (``client_lib.open_cached``): a signing client checks the BLAKE3 list against the body
#: digest its signature binds (docs/protocol.md, "Signed results"); the object's digest
#: covers the whole body.
CHUNK_DIGESTS_NAME = "chunk_digests.json"
MIN_COMPRESSION_RATIO = 1.3
_SAMPLE_WINDOW = 256 * 2**10
_SAMPLE_WINDOWS = 3


def chunk_shape(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The largest C-order contiguous chunk of at most ``CHUNK_TARGET_BYTES`` (at least 1 item).

    The trailing axes are whole, one axis is split, the leading axes are 1.
    """
    chunks = [max(n, 1) for n in shape]
    inner = itemsize
    for axis in range(len(shape) - 1, -1, -1):
        if inner * chunks[axis] <= CHUNK_TARGET_BYTES:
            inner *= chunks[axis]
            continue
        chunks[axis] = max(1, CHUNK_TARGET_BYTES // inner)
        for leading in range(axis):
            chunks[leading] = 1
        break
    return tuple(chunks)


@dataclass(frozen=True)
class _DtypePlan:
    """How a true dtype is kept in Zarr: natively, or as a same-itemsize integer view."""

    stored: np.dtype
    as_view: bool

    @classmethod
    def for_dtype(cls, dtype: np.dtype) -> _DtypePlan:
        if dtype.kind in "mM" and np.datetime_data(dtype)[0] == "generic":
            return cls(np.dtype(f"<u{dtype.itemsize}"), as_view=True)
        return cls(dtype, as_view=False)

    def restore(self, stored: np.ndarray, dtype: np.dtype) -> np.ndarray:
        if self.as_view:
            return stored.view(dtype)
        # Zarr hands back native byte order; astype between byte orders is a pure byteswap.
        return stored.astype(dtype, copy=False)


class ZarrArrayStore(DirectoryStore):
    """Arrays (non-empty itemsize) as Zarr v3 arrays; the object directory is the array root.

    :meth:`open_array` opens one lazily (e.g. for ``dask.array.from_zarr``), without digest
    verification: use :meth:`get` when the value must be proven intact.
    """

    name = "zarr"

    def accepts(self, header: ObjectHeader) -> bool:
        # An element larger than a chunk would make a chunk (and the memory to write it)
        # as large as the element: such arrays are blobs, which stream to the file.
        return header.is_array and 0 < header.numpy_dtype.itemsize <= CHUNK_TARGET_BYTES

    def open_array(self, digest: str) -> zarr.Array:
        """The stored array, read-only and unverified, in its stored dtype.

        When the sidecar's dtype differs from the array's (big-endian, unit-less datetime),
        view or cast the data read from it accordingly.
        """
        directory = self.object_path(digest)
        if not directory.is_dir():
            raise ObjectNotFound(digest)
        return zarr.open_array(LocalStore(directory, read_only=True), mode="r")

    def _open_payload(self, directory: Path, header: ObjectHeader, *,
                      strong: bool = True) -> Payload:
        return _ZarrPayload(directory, header, strong)

    def _body_files(self, directory: Path, sidecar: Sidecar) -> list[FileRange] | None:
        """The chunk files in grid order (the body's), when they hold the raw bytes."""
        try:
            array = zarr.open_array(LocalStore(directory, read_only=True), mode="r")
        except FileNotFoundError:
            raise
        except Exception as exc:
            raise _read_error(directory, sidecar, exc) from exc
        header = sidecar.header
        if array.shape != header.shape or not _raw_chunks(
                array, _DtypePlan.for_dtype(header.numpy_dtype).stored):
            return None
        itemsize = header.numpy_dtype.itemsize
        ranges = []
        for region in _regions(array.shape, array.chunks):
            key = array.metadata.encode_chunk_key(
                tuple(r.start // c for r, c in zip(region, array.chunks, strict=True)))
            ranges.append(FileRange(str(directory / key), 0,
                                    itemsize * math.prod(r.stop - r.start for r in region)))
        return ranges

    # (storage/_zarr_staged.py imports this module: imported when first needed)
    def _staged_layout(self, header: ObjectHeader) -> dict | None:
        from storage._zarr_staged import staged_metadata

        return staged_metadata(header)

    def _adopt_staged(self, directory: Path, header: ObjectHeader, body: BodyCheck, *,
                      strong: bool) -> None:
        from storage._zarr_staged import adopt_staged_array

        adopt_staged_array(directory, header, body, strong=strong)

    def _read_pieces(self, directory: Path, sidecar: Sidecar) -> Pieces:
        """One piece per chunk, in C order (the body's order), each checked against its
        chunk digest when the object has them (objects written before they existed are
        checked by the reader's whole digest)."""
        header = sidecar.header
        try:
            array = zarr.open_array(LocalStore(directory, read_only=True), mode="r")
            digests = _chunk_digests(directory)
        except Exception as exc:
            raise _read_error(directory, sidecar, exc) from exc
        if array.shape != header.shape:
            raise CorruptObject(f"Zarr array {sidecar.digest} has shape {array.shape}")
        regions = list(_regions(array.shape, array.chunks))
        if digests is not None and len(digests) != len(regions):
            raise CorruptObject(f"Zarr array {sidecar.digest} lists {len(digests)} chunk "
                                f"digests for {len(regions)} chunks")
        plan = _DtypePlan.for_dtype(header.numpy_dtype)
        itemsize = header.numpy_dtype.itemsize
        # Chunk files that are the body's own bytes are read as they lie: no decoding, no
        # copy, one buffer per chunk (checked against its digest like any other piece).
        raw = digests is not None and _raw_chunks(array, plan.stored)

        def read_chunk(region: tuple[slice, ...]) -> memoryview:
            if raw:
                key = array.metadata.encode_chunk_key(
                    tuple(r.start // c for r, c in zip(region, array.chunks, strict=True)))
                size = itemsize * math.prod(r.stop - r.start for r in region)
                return _read_prefix(directory / key, size)
            block = plan.restore(np.asarray(array[region]), header.numpy_dtype)
            return np.ascontiguousarray(block).reshape(-1).view(np.uint8).data

        def pieces() -> Iterator[memoryview]:
            for i, region in enumerate(regions):
                try:
                    piece = read_chunk(region)
                except Exception as exc:  # a damaged chunk fails in many ways
                    raise _read_error(directory, sidecar, exc) from exc
                if digests is not None and xxhash.xxh3_128_hexdigest(piece) != digests[i]:
                    raise CorruptObject(f"chunk {i} of Zarr array {sidecar.digest} does not "
                                        "match its digest")
                yield piece

        return Pieces(pieces(), itemsize * math.prod(array.chunks), verified=digests is not None)


def _raw_chunks(array: zarr.Array, stored: np.dtype) -> bool:
    """Whether each chunk file starts with the chunk's bytes in ``stored``'s byte order
    (no compression or filter; the bytes codec's order is the dtype's own)."""
    codecs = array.metadata.codecs
    if len(codecs) != 1 or not isinstance(codecs[0], BytesCodec):
        return False
    endian = codecs[0].endian
    if stored.itemsize == 1 or endian is None:
        return stored.itemsize == 1
    order = "little" if stored.byteorder == "<" or (
        stored.byteorder == "=" and np.little_endian) else "big"
    return endian.value == order


def _read_prefix(path: Path, size: int) -> memoryview:
    """The first ``size`` bytes of a file, into a fresh buffer (an edge chunk's file is
    padded to the whole chunk)."""
    view = memoryview(bytearray(size))
    with open(path, "rb", buffering=0) as f:
        filled = 0
        while filled < size:
            n = f.readinto(view[filled:])
            if not n:
                raise CorruptObject(f"{path} ended after {filled} of {size} bytes")
            filled += n
    return view


def _chunk_digests(directory: Path) -> list[str] | None:
    try:
        return list(json.loads((directory / CHUNK_DIGESTS_NAME).read_bytes())["digests"])
    except FileNotFoundError:
        if not directory.is_dir():
            raise
        return None


def _read_error(directory: Path, sidecar: Sidecar, exc: Exception) -> Exception:
    if not directory.is_dir():
        return FileNotFoundError(directory)
    return CorruptObject(f"unreadable Zarr array {sidecar.digest}: {exc!r}")


def _create(
    directory: Path,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    dtype: np.dtype,
    sample: memoryview | bytes,
) -> zarr.Array:
    return zarr.create_array(
        store=LocalStore(directory),
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        compressors=_compressors(dtype, sample),
        filters=None,
        config={"write_empty_chunks": True},
        zarr_format=3,
    )


def _compressors(dtype: np.dtype, sample: memoryview | bytes) -> list[BloscCodec] | None:
    """Blosc lz4 + shuffle if a sample of the first chunk compresses by >= 1.3x, else none."""
    view = memoryview(sample).cast("B")
    if not view.nbytes:
        return None
    typesize = 4 if dtype.kind == "U" else 1 if dtype.kind == "S" else dtype.itemsize
    shuffle = numcodecs.Blosc.SHUFFLE if typesize > 1 else numcodecs.Blosc.NOSHUFFLE
    codec = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=shuffle, typesize=typesize)
    step = max(view.nbytes // _SAMPLE_WINDOWS, 1)
    raw = packed = 0
    for start in range(0, view.nbytes, step)[:_SAMPLE_WINDOWS]:
        window = view[start : start + _SAMPLE_WINDOW]
        raw += window.nbytes
        packed += len(codec.encode(window))
    if raw < MIN_COMPRESSION_RATIO * packed:
        return None
    return [
        BloscCodec(
            cname="lz4",
            clevel=5,
            shuffle="shuffle" if typesize > 1 else "noshuffle",
            typesize=typesize,
        )
    ]


def _regions(shape: tuple[int, ...], chunks: tuple[int, ...]) -> Iterator[tuple[slice, ...]]:
    """The chunk regions in C order: with C-order contiguous chunks, the body's order."""
    grid = [range(0, n, c) for n, c in zip(shape, chunks, strict=True)]
    for corner in itertools.product(*grid):
        yield tuple(
            slice(start, min(start + c, n))
            for start, c, n in zip(corner, chunks, shape, strict=True)
        )


class _ZarrPayload(Payload):
    """Writes each chunk as soon as its bytes are in. The array is created with the first
    chunk, whose sample decides the compression: that chunk is gathered in one buffer of at
    most a chunk (allocated when the first byte arrives, never from the declared size
    alone), unless one piece covers it. After it, chunks without a codec go straight from
    the pieces to their files, hashed as they pass (no buffer, no copy); compressed chunks
    are gathered and written through Zarr. Every chunk file is fsynced in the background
    (``_SYNCS``) once written, so the disk works while the next chunks arrive; ``finish``
    waits for those fsyncs (the writer's commit still fsyncs the whole tree before the
    rename, which costs little for files already clean)."""

    def __init__(self, directory: Path, header: ObjectHeader, strong: bool) -> None:
        assert header.shape is not None
        dtype = header.numpy_dtype
        self._directory = directory
        self._strong_digests = strong  # BLAKE3 per chunk: only signed objects' readers use it
        self._shape = header.shape
        self._stored = _DtypePlan.for_dtype(dtype).stored
        self._itemsize = dtype.itemsize
        self._chunks = chunk_shape(self._shape, dtype.itemsize)
        self._regions = _regions(self._shape, self._chunks)
        self._array: zarr.Array | None = None
        self._buffer: bytearray | None = None
        self._filled = 0
        self._digests: list[str] = []
        self._blake3: list[str] = []
        self._raw = False  # chunk files written as they are (decided with the array)
        self._file: BinaryIO | None = None  # the raw chunk file being written
        self._hasher: xxhash.xxh3_128 | None = None  # ... and its running chunk digest
        self._strong: blake3.blake3 | None = None  # ... and its BLAKE3
        self._syncs: list[Future[None]] = []
        self._next_region()

    def _next_region(self) -> None:
        self._region = next(self._regions, None)
        self._dims = () if self._region is None else tuple(
            s.stop - s.start for s in self._region)
        self._size = self._itemsize * math.prod(self._dims)

    def write(self, view: memoryview) -> None:
        while view.nbytes and self._region is not None:
            need = self._size - self._filled
            take = min(need, view.nbytes)
            if self._raw:
                self._append_raw(view[:take])
            elif not self._filled and take == need:
                self._store(view[:need])
            else:
                if self._buffer is None:
                    self._buffer = bytearray(self._itemsize * math.prod(self._chunks))
                self._buffer[self._filled:self._filled + take] = view[:take]
                self._filled += take
                if self._filled == self._size:
                    self._filled = 0
                    self._store(memoryview(self._buffer)[:self._size])
            view = view[take:]

    def _store(self, piece: memoryview) -> None:
        """One whole chunk (the first, or any compressed one)."""
        assert self._region is not None
        if self._array is None:
            self._array = _create(self._directory, self._shape, self._chunks, self._stored, piece)
            if _raw_chunks(self._array, self._stored):
                self._raw = True
                self._buffer = None
                self._append_raw(piece)
                return
        self._digests.append(xxhash.xxh3_128_hexdigest(piece))
        if self._strong_digests:
            self._blake3.append(blake3.blake3(piece).hexdigest())
        self._array[self._region] = np.frombuffer(piece, dtype=self._stored).reshape(
            self._dims)
        self._syncs.append(_SYNCS.submit(fsync_file, self._chunk_path()))
        self._next_region()

    def _chunk_path(self) -> Path:
        assert self._array is not None and self._region is not None
        return self._directory / self._array.metadata.encode_chunk_key(tuple(
            r.start // c for r, c in zip(self._region, self._chunks, strict=True)))

    def _append_raw(self, piece: memoryview) -> None:
        """Without a codec a chunk file is the chunk's bytes: written from the pieces as
        they come (Zarr would copy them on the way). An edge chunk's file is padded to the
        whole chunk, as Zarr pads it (the padding is never read back as data)."""
        if self._file is None:
            path = self._chunk_path()
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "wb", buffering=0)  # noqa: SIM115 - closed below
            self._hasher = xxhash.xxh3_128()
            self._strong = blake3.blake3() if self._strong_digests else None
        assert self._hasher is not None
        self._hasher.update(piece)
        if self._strong is not None:
            self._strong.update(piece)
        view = piece
        while view:
            view = view[self._file.write(view):]
        self._filled += piece.nbytes
        if self._filled < self._size:
            return
        self._file.truncate(self._itemsize * math.prod(self._chunks))
        self._digests.append(self._hasher.hexdigest())
        if self._strong is not None:
            self._blake3.append(self._strong.hexdigest())
        self._syncs.append(_SYNCS.submit(_sync_and_close, self._file))
        self._file, self._hasher, self._strong, self._filled = None, None, None, 0
        self._next_region()

    def finish(self) -> None:
        # An empty array has no chunk; a short body is refused by the digest check.
        if self._array is None:
            _create(self._directory, self._shape, self._chunks, self._stored, b"")
        self._buffer = None
        self._close_file()
        syncs, self._syncs = self._syncs, []
        for sync in syncs:
            sync.result()  # an fsync's error fails the write
        listed: dict[str, list[str]] = {"digests": self._digests}
        if self._strong_digests:
            listed["blake3"] = self._blake3
        (self._directory / CHUNK_DIGESTS_NAME).write_text(json.dumps(listed))

    def close(self) -> None:
        self._buffer = None
        self._close_file()
        syncs, self._syncs = self._syncs, []
        wait(syncs)  # before the directory goes

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


#: fsyncs of written chunk files, overlapping the rest of the upload (the disk, not the CPU,
#: is what they wait for).
_SYNCS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="chunk-fsync")


def _sync_and_close(file: BinaryIO) -> None:
    try:
        os.fsync(file.fileno())
    finally:
        file.close()
