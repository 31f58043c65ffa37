"""Direct reads: a worker that sees the server's storage (same host, or the same volume
mounted, as in the compose stack) reads an object where it lies instead of over HTTP.
docs/design/data-plane.md, "Direct reads"; docs/protocol.md, "Direct reads".

The server's entry metadata names the payload (``GET /v1/entries/{hash}/location``): a Zarr
v3 array directory, a blob file holding the digest's preimage (also as an ``s3://`` object,
read with s3fs where this process has AWS credentials), or a Parquet file. Nothing
here trusts it: the digest is computed over what was read, exactly as for a download, and
any problem (path not visible, unknown layout, digest mismatch) is a
:class:`DirectReadFailed`, after which the caller loads over HTTP.

Zarr arrays written by ``storage`` (C-order slab chunks, no compression) are read by
parallel ``readinto`` calls straight into one output buffer, chunk files being the raw
bytes of their slab (the Zarr v3 ``bytes`` codec); any other array goes through zarr
itself (decompression, edge chunks, byte order).
"""

from __future__ import annotations

import json
import math
import os
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3
import numpy as np
import xxhash

from ..core.config import setting
from ..wire.body_hash import root_of
from ..wire.codec import content_hasher, object_header

__all__ = ["DirectReadFailed", "Location", "allowed", "direct_read_mode", "local_path",
           "read_object", "slab_plan"]

_READ_THREADS = 8
#: Bytes read per call (then hashed while they are in the cache).
_PIECE_BYTES = 2**20


@dataclass(frozen=True)
class Location:
    """An entry's object as ``GET /v1/entries/{hash}/location`` describes it: ``path`` is
    where this process sees its payload (``None``: it cannot), the rest is the manifest's
    (dtype and shape in their wire form). ``body``: the body digest the entry's signature
    binds, once checked (``""``: a client without a signing key)."""

    path: Path | str | None
    storage: str
    kind: str
    dtype: str
    shape: str
    digest: str
    label: str = ""
    body: str = ""


def direct_read_mode() -> str:
    """Config ``result-cache.direct-read``: ``"auto"`` (read objects in place when this
    process sees the server's storage) or ``"never"``."""
    mode = setting("direct-read")
    if mode not in ("auto", "never"):
        raise ValueError(f"result-cache.direct-read must be 'auto' or 'never', not {mode!r}")
    return mode


def allowed() -> bool:
    """Whether this process may read in place (a bad setting: no, reported by the caller
    of ``cached_compute`` in the user's process, never by a worker's load)."""
    try:
        return direct_read_mode() == "auto"
    except ValueError:
        return False


class DirectReadFailed(Exception):
    """The object could not be read in place and verified; load it over HTTP."""


def local_path(location: str | None) -> Path | str | None:
    """Where this process reads a location: the local path of a ``file://`` one it can see;
    an ``s3://`` URL itself when this process has AWS credentials (``AWS_ACCESS_KEY_ID``,
    ``AWS_PROFILE`` or ``~/.aws/credentials``; the endpoint from ``AWS_ENDPOINT_URL``, as
    botocore reads it); else None."""
    if location and location.startswith("s3://"):
        return location if _has_aws_credentials() else None
    if not location or not location.startswith("file://"):
        return None
    path = Path(urllib.request.url2pathname(urllib.parse.urlparse(location).path))
    return path if path.exists() else None


def _has_aws_credentials() -> bool:
    return bool(os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_PROFILE")
                or Path("~/.aws/credentials").expanduser().is_file())


def read_object(path: Path | str, storage: str, kind: str, dtype: str, shape: str,
                digest: str, *, strong: bool = False) -> tuple[Any, str | None]:
    """The verified body of one object at ``path`` (a buffer ``codec.decode`` takes) and,
    when ``strong`` and it was computed in the same pass, its BLAKE3 body digest
    (:mod:`client_lib.wire.body_hash`; else None: the caller computes it). Raises
    :class:`DirectReadFailed` for anything but a complete, matching object.

    A Zarr array of the server's raw layout with chunk digests is read by parallel
    threads, each chunk in pieces straight into the output array, each piece hashed while
    it is in the cache, each chunk checked against ``chunk_digests.json`` (written by the
    server from a body whose content digest it verified): one pass over the bytes. Other
    objects are checked against the content digest ``digest``."""
    hasher = content_hasher(kind, dtype, shape)
    root, verified = None, False
    try:
        if storage == "zarr":
            body, root, verified = _read_zarr(path, dtype, shape, hasher, strong)
        elif storage == "blob":
            raw = _read_url(path) if isinstance(path, str) else _read_file(path)
            prefix = object_header(kind, dtype, shape)
            if raw[: len(prefix)] != prefix:
                raise DirectReadFailed(f"{path} does not start with its header")
            body = raw[len(prefix):]
            hasher.update(body)
        elif storage == "parquet":
            body = _read_file(path)
            hasher.update(body)
        else:
            raise DirectReadFailed(f"cannot read {storage!r} objects in place")
    except DirectReadFailed:
        raise
    except Exception as exc:  # a missing chunk, a damaged file, an unknown layout
        raise DirectReadFailed(f"{path}: {type(exc).__name__}: {exc}") from None
    if not verified and hasher.hexdigest() != digest:
        raise DirectReadFailed(f"{path} does not match its digest")
    return body, root


def _read_url(url: str) -> memoryview:
    """A whole object of an object store (s3fs: one GET, the body in one buffer)."""
    import fsspec

    fs, key = fsspec.core.url_to_fs(url, use_listings_cache=False)
    return memoryview(fs.cat_file(key))


def _read_file(path: Path) -> memoryview:
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        view = memoryview(bytearray(size))
        _read_exactly(f, view)
    return view


def _read_exactly(f: Any, view: memoryview) -> None:
    filled = 0
    while filled < view.nbytes:
        n = f.readinto(view[filled:])
        if not n:
            raise DirectReadFailed(f"{f.name} ended after {filled} of {view.nbytes} bytes")
        filled += n


def _read_zarr(directory: Path, dtype_text: str, shape_text: str, hasher: Any,
               strong: bool) -> tuple[memoryview, str | None, bool]:
    """The array's C-order bytes in its true dtype, as one writable buffer; the BLAKE3 body
    digest when ``strong`` and computed here; whether the chunks were verified here
    against ``chunk_digests.json`` (where the layout allows: ``hasher`` is then left
    untouched), else the bytes were fed to ``hasher`` in order."""
    dtype = np.dtype(dtype_text)
    shape = tuple(json.loads(shape_text))
    meta = json.loads((directory / "zarr.json").read_bytes())
    out = np.empty(shape, dtype=dtype)
    flat = memoryview(out.reshape(-1).view(np.uint8))
    plan = slab_plan(meta, dtype, shape)
    listed = _chunk_digests(directory) if plan is not None else None
    if plan is not None and listed is not None and out.nbytes and len(listed[0]) == len(plan):
        digests, strong_digests = listed
        with ThreadPoolExecutor(max_workers=min(_READ_THREADS, len(plan))) as pool:
            roots = list(pool.map(
                lambda item: _read_verified_chunk(directory, flat, *item[1], item[0],
                                                  digests, strong),
                enumerate(plan)))
        if strong and strong_digests is not None:
            if [r.hex() for r in roots] != strong_digests:  # the list must be the chunks'
                raise DirectReadFailed(f"{directory}: chunk_digests.json does not match")
        return flat, root_of(roots) if strong else None, True
    if plan is not None and out.nbytes:
        with ThreadPoolExecutor(max_workers=min(_READ_THREADS, len(plan))) as pool:
            reads = pool.map(lambda item: _read_chunk(directory, flat, *item), plan)
            for (_, start, size), _ in zip(plan, reads, strict=True):
                hasher.update(flat[start:start + size])
        return flat, None, False
    if out.size:
        import zarr
        from zarr.storage import LocalStore

        stored = np.asarray(zarr.open_array(LocalStore(directory, read_only=True),
                                            mode="r")[...])
        # A same-size view when storage kept the dtype as integers (unit-less datetimes),
        # else a cast back to the true byte order.
        out[...] = (stored.view(dtype) if stored.dtype.kind != dtype.kind
                    else stored.astype(dtype, copy=False))
    hasher.update(flat)
    return flat, None, False


def _chunk_digests(directory: Path) -> tuple[list[str], list[str] | None] | None:
    """The chunk digests the server listed (xxh3, and BLAKE3 where it kept them), or None
    for an object written before they existed."""
    try:
        listed = json.loads((directory / "chunk_digests.json").read_bytes())
    except FileNotFoundError:
        return None
    strong = listed.get("blake3")
    return list(listed["digests"]), None if strong is None else list(strong)


def _read_verified_chunk(directory: Path, flat: memoryview, key: str, start: int, size: int,
                         index: int, digests: list[str], strong: bool) -> bytes:
    """Read one chunk into ``flat`` in pieces, hashing each while it is in the cache;
    raise unless it matches its listed digest. Its BLAKE3 (empty without ``strong``)."""
    chunk = xxhash.xxh3_128()
    strong_hasher = blake3.blake3() if strong else None
    with open(directory / key, "rb", buffering=0) as f:
        position, end = start, start + size
        while position < end:
            n = f.readinto(flat[position:min(end, position + _PIECE_BYTES)])
            if not n:
                raise DirectReadFailed(f"{f.name} ended after {position - start} of "
                                       f"{size} bytes")
            piece = flat[position:position + n]
            chunk.update(piece)
            if strong_hasher is not None:
                strong_hasher.update(piece)
            position += n
    if chunk.hexdigest() != digests[index]:
        raise DirectReadFailed(f"chunk {key} of {directory} does not match its digest")
    return strong_hasher.digest() if strong_hasher is not None else b""


def _read_chunk(directory: Path, flat: memoryview, key: str, start: int, size: int) -> None:
    with open(directory / key, "rb", buffering=0) as f:
        _read_exactly(f, flat[start:start + size])


def slab_plan(meta: dict, dtype: np.dtype, shape: tuple[int, ...]
               ) -> list[tuple[str, int, int]] | None:
    """(chunk file, offset, bytes) of every chunk when the array's chunk files are its
    raw bytes in C order (``storage``'s layout without compression), else None."""
    codecs = meta.get("codecs") or []
    if (dtype.kind not in "biufcmM" or [c.get("name") for c in codecs] != ["bytes"]
            or meta.get("storage_transformers")):
        return None
    if dtype.itemsize > 1:
        little = dtype.byteorder == "<" or (dtype.byteorder == "=" and np.little_endian)
        endian = (codecs[0].get("configuration") or {}).get("endian")
        if endian != ("little" if little else "big"):
            return None
    grid = meta.get("chunk_grid", {}).get("configuration", {}).get("chunk_shape")
    encoding = meta.get("chunk_key_encoding", {})
    separator = (encoding.get("configuration") or {}).get("separator", "/")
    if (encoding.get("name") != "default" or grid is None or len(grid) != len(shape)
            or list(meta.get("shape", [])) != list(shape)):
        return None
    # C-order slabs: leading axes 1, one split axis, trailing axes whole.
    split = max((i for i, (c, n) in enumerate(zip(grid, shape, strict=True)) if c < n),
                default=len(shape))
    if split < len(shape) and any(c != 1 for c in grid[:split]) or any(
            c != n for c, n in zip(grid[split + 1:], shape[split + 1:], strict=True)):
        return None
    if split == len(shape):  # one chunk: the whole array
        return [(separator.join(["c", *("0" * len(shape))]), 0,
                 dtype.itemsize * math.prod(shape))]
    inner = dtype.itemsize * math.prod(shape[split + 1:])
    plan = []
    offset = 0
    counts = [math.ceil(n / c) for n, c in zip(shape, grid, strict=True)]
    for index in np.ndindex(*counts):
        size = min(grid[split], shape[split] - index[split] * grid[split]) * inner
        plan.append((separator.join(["c", *map(str, index)]), offset, size))
        offset += size
    return plan
