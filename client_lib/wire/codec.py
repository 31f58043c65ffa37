"""Values on the wire (docs/protocol.md): arrays as raw bytes plus dtype/shape, large pandas
frames as Parquet (:mod:`.frames`, when they read back exactly), everything else as
cloudpickle bytes, each with its content digest.

Encoding never copies a C-contiguous array: the body is a sequence of ~1 MiB memoryview
slices over the array's own buffer, so an upload streams straight from the result.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import cloudpickle
import numpy as np
import xxhash

from ..core.config import setting
from ..core.errors import CacheProtocolError
from .frames import PARQUET_KIND, decode_frame, encode_frame, frame_nbytes, is_frame

__all__ = ["CHUNK_BYTES", "Encoded", "array_nbytes", "content_hasher", "object_header",
           "decode", "encode", "kind_of"]

CHUNK_BYTES = 1 << 20
_ARRAY_KINDS = frozenset("biufcmMSU")


@dataclass
class Encoded:
    """An encoded value: metadata for the headers and the body as one buffer."""

    kind: str  # "ndarray" | "pickle" | "parquet"
    dtype: str
    shape: str
    type_name: str
    body: memoryview
    digest: str

    @property
    def nbytes(self) -> int:
        return self.body.nbytes

    def chunks(self, size: int = CHUNK_BYTES) -> Iterator[memoryview]:
        body = self.body
        for start in range(0, len(body), size):
            yield body[start:start + size]


def object_header(kind: str, dtype: str, shape: str) -> bytes:
    """The metadata header the content digest starts with (and a blob file with it)."""
    return f"{kind}\n{dtype}\n{shape}\n".encode("ascii")


def content_hasher(kind: str, dtype: str, shape: str) -> xxhash.xxh3_128:
    """The content digest as the protocol defines it, xxh3_128 over the metadata header
    and then the body: fed the header here, to be updated with the body's bytes."""
    return xxhash.xxh3_128(object_header(kind, dtype, shape))


def _is_wire_array(value: Any) -> bool:
    """Plain ndarrays of a fixed-width, non-object dtype travel as raw bytes."""
    return (type(value) is np.ndarray and value.dtype.kind in _ARRAY_KINDS
            and value.dtype.fields is None and value.dtype.subdtype is None)


def _parquet_sized(value: Any, nbytes: int | None) -> bool:
    """A frame large enough to try Parquet. ``nbytes``: its size, as the caller already
    measured it (``dask.sizeof``): a DataFrame's ``memory_usage`` costs ~1 ms, and a
    store measured each result's size three times (2.5 s of a 2k-task groupby's 8.2 s)."""
    if not is_frame(value):
        return False
    return (frame_nbytes(value) if nbytes is None else nbytes) >= _parquet_min_bytes()


def kind_of(value: Any, nbytes: int | None = None) -> str:
    """The kind ``encode`` would most likely give ``value``, without encoding it (a frame
    that Parquet cannot hold exactly is pickled after all); ``nbytes`` as for encode."""
    if _is_wire_array(value):
        return "ndarray"
    if _parquet_sized(value, nbytes):
        return PARQUET_KIND
    return "pickle"


def encode(value: Any, nbytes: int | None = None) -> Encoded:
    """``value`` as it travels: raw bytes of a plain array, Parquet of a large frame that
    round-trips exactly, else a pickle. ``nbytes``: the value's size if the caller has it
    (a hint: only whether a frame is worth trying as Parquet depends on it)."""
    type_name = f"{type(value).__module__}.{type(value).__qualname__}"
    if _is_wire_array(value):
        # (np.ascontiguousarray would turn a 0-d array into a 1-d one)
        arr = value if value.flags.c_contiguous else np.array(value, order="C")
        body = memoryview(arr.reshape(-1).view(np.uint8))
        dtype, shape = arr.dtype.str, json.dumps(list(arr.shape), separators=(",", ":"))
        kind = "ndarray"
    elif _parquet_sized(value, nbytes) and (parquet := encode_frame(value)) is not None:
        body = memoryview(parquet)
        kind, dtype, shape = PARQUET_KIND, "", ""
    else:
        body = memoryview(cloudpickle.dumps(value, protocol=5))
        kind, dtype, shape = "pickle", "", ""
    digest = content_hasher(kind, dtype, shape)
    digest.update(body)
    return Encoded(kind, dtype, shape, type_name, body, digest.hexdigest())


def array_nbytes(dtype: str, shape: str) -> int:
    """The body size that an array's wire dtype and shape imply."""
    try:
        return np.dtype(dtype).itemsize * math.prod(int(n) for n in json.loads(shape))
    except (ValueError, TypeError) as exc:
        raise CacheProtocolError(f"bad array metadata {dtype!r} {shape!r}: {exc}") from None


def decode(kind: str, dtype: str, shape: str, body: Any) -> Any:
    """Rebuild a value from its body (a writable buffer for arrays: no copy). A body that
    does not decode (bad array metadata, a pickle naming a module or class this process
    lacks) is :class:`CacheProtocolError`: the load fails, the task is recomputed."""
    if kind == "ndarray":
        try:
            dims = tuple(int(n) for n in json.loads(shape))
            arr = np.frombuffer(body, dtype=np.dtype(dtype))
            return arr.reshape(dims)
        except (ValueError, TypeError) as exc:
            raise CacheProtocolError(f"bad array metadata {dtype!r} {shape!r}: {exc}") from None
    if kind == "pickle":
        try:
            return cloudpickle.loads(body)
        except Exception as exc:  # its class moved or went away since it was stored: a miss
            raise CacheProtocolError(f"cannot unpickle the result: {type(exc).__name__}: "
                                     f"{exc}") from None
    if kind == PARQUET_KIND:
        try:
            return decode_frame(body)
        except Exception as exc:  # no pyarrow here, or a file pyarrow cannot read
            raise CacheProtocolError(f"cannot read a Parquet result: {exc!r}") from None
    raise CacheProtocolError(f"unknown value kind {kind!r}")


def _parquet_min_bytes() -> int:
    """Frames at least this large (in memory) are offered to Parquet: config
    ``result-cache.parquet-min-bytes``, by default the size from which the server keeps
    arrays in Zarr (storage.ZARR_MIN_BYTES)."""
    return int(setting("parquet-min-bytes"))
