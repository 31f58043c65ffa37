"""What an object is, and the content digest that names it (docs/protocol.md, "Values on the wire").

An object is an encoded body plus a small header: its ``kind`` (``ndarray``, ``pickle`` or
``parquet``, a pandas frame as one Parquet file) and,
for arrays, numpy's ``dtype.str`` and the shape. The content digest is ``xxh3_128`` over
``f"{kind}\\n{dtype}\\n{shape}\\n"`` followed by the body, so metadata is part of an object's
identity and equal results are stored once.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import xxhash

from storage.errors import InvalidHeader

__all__ = [
    "ARRAY_DTYPE_KINDS",
    "DIGEST_PATTERN",
    "Kind",
    "OPAQUE_KINDS",
    "ObjectHeader",
    "content_digest",
    "is_digest",
    "shape_text",
]

Kind = Literal["ndarray", "pickle", "parquet"]
#: Kinds without dtype and shape: the body is all there is.
OPAQUE_KINDS = frozenset({"pickle", "parquet"})
#: numpy dtype kinds that travel as raw C-order bytes (no fields, no object dtype).
ARRAY_DTYPE_KINDS = frozenset("biufcmMSU")
DIGEST_PATTERN = r"^[0-9a-f]{32}$"
_HEX = frozenset("0123456789abcdef")


def is_digest(text: str) -> bool:
    """True when ``text`` is 32 lowercase hex characters (a task hash or a content digest)."""
    return len(text) == 32 and _HEX.issuperset(text)


def shape_text(shape: Iterable[int]) -> str:
    """The canonical wire form of a shape: a JSON list without spaces (``[3,4]``, ``[]``)."""
    return json.dumps([int(n) for n in shape], separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class ObjectHeader:
    """Kind, dtype and shape of an encoded object, validated and in canonical form.

    For ``pickle`` and ``parquet`` objects ``dtype`` is ``""`` and ``shape`` is ``None``.
    Build instances with :meth:`pickle`, :meth:`parquet`, :meth:`array` or
    :meth:`from_wire`; the constructor does not validate.
    """

    kind: Kind
    dtype: str = ""
    shape: tuple[int, ...] | None = None

    @classmethod
    def pickle(cls) -> ObjectHeader:
        return cls("pickle")

    @classmethod
    def parquet(cls) -> ObjectHeader:
        return cls("parquet")

    @classmethod
    def array(cls, dtype: np.dtype | str, shape: Iterable[int]) -> ObjectHeader:
        """Header of a numpy array; raises :class:`InvalidHeader` for unsupported dtypes."""
        dt = np.dtype(dtype)
        _check_array_dtype(dt)
        dims = tuple(int(n) for n in shape)
        if any(n < 0 for n in dims):
            raise InvalidHeader(f"negative dimension in shape {list(dims)}")
        return cls("ndarray", dt.str, dims)

    @classmethod
    def from_wire(cls, kind: str, dtype: str | None, shape: str | None) -> ObjectHeader:
        """Parse the ``X-Result-Kind/Dtype/Shape`` header values.

        Array dtype and shape must already be canonical (``dtype.str``, JSON list without
        spaces), because the digest is computed over the text as sent. Raises
        :class:`InvalidHeader` with a readable message otherwise.
        """
        if kind in OPAQUE_KINDS:
            return cls(kind)  # type: ignore[arg-type]
        if kind != "ndarray":
            raise InvalidHeader(f"kind must be 'ndarray', 'pickle' or 'parquet', not {kind!r}")
        if not dtype:
            raise InvalidHeader("an ndarray needs a dtype (X-Result-Dtype)")
        if shape is None:
            raise InvalidHeader("an ndarray needs a shape (X-Result-Shape)")
        try:
            dt = np.dtype(dtype)
        except (TypeError, ValueError) as exc:
            raise InvalidHeader(f"not a numpy dtype: {dtype!r}") from exc
        if dt.str != dtype:
            raise InvalidHeader(f"dtype {dtype!r} is not canonical, send {dt.str!r}")
        try:
            dims = json.loads(shape)
        except ValueError as exc:
            raise InvalidHeader(f"shape is not a JSON list: {shape!r}") from exc
        if not isinstance(dims, list) or not all(
            type(n) is int and n >= 0
            for n in dims  # bool is not a dimension
        ):
            raise InvalidHeader(f"shape must be a list of non-negative integers: {shape!r}")
        header = cls.array(dt, dims)
        if header.shape_text != shape:
            raise InvalidHeader(f"shape {shape!r} is not canonical, send {header.shape_text!r}")
        return header

    @property
    def is_array(self) -> bool:
        return self.kind == "ndarray"

    @property
    def numpy_dtype(self) -> np.dtype:
        if not self.is_array:
            raise InvalidHeader(f"a {self.kind} object has no dtype")
        return np.dtype(self.dtype)

    @property
    def shape_text(self) -> str:
        """The wire form of the shape, ``""`` for pickles."""
        return "" if self.shape is None else shape_text(self.shape)

    @property
    def expected_nbytes(self) -> int | None:
        """Body length an array must have; ``None`` for pickles (any length)."""
        if self.shape is None:
            return None
        return self.numpy_dtype.itemsize * math.prod(self.shape)

    def digest_prefix(self) -> bytes:
        """The bytes hashed before the body: ``kind\\ndtype\\nshape\\n``."""
        return f"{self.kind}\n{self.dtype}\n{self.shape_text}\n".encode("ascii")


def content_digest(header: ObjectHeader, body: bytes | memoryview) -> str:
    """The content digest of a whole body held in memory (see the module docstring)."""
    hasher = xxhash.xxh3_128(header.digest_prefix())
    hasher.update(body)
    return hasher.hexdigest()


def _check_array_dtype(dt: np.dtype) -> None:
    if dt.kind not in ARRAY_DTYPE_KINDS:
        raise InvalidHeader(f"dtype {dt.str!r} (kind {dt.kind!r}) cannot travel as ndarray")
    if dt.fields is not None or dt.subdtype is not None:
        raise InvalidHeader(f"structured or subarray dtype {dt!r} cannot travel as ndarray")
