"""Encoding values as docs/protocol.md says, independently of the server's own code."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from urllib.parse import quote

import cloudpickle
import httpx
import numpy as np
import xxhash


def new_hash() -> str:
    return secrets.token_hex(16)


@dataclass
class Encoded:
    kind: str
    body: bytes
    dtype: str = ""
    shape: str = ""
    digest: str = field(init=False)

    def __post_init__(self) -> None:
        prefix = f"{self.kind}\n{self.dtype}\n{self.shape}\n".encode("ascii")
        self.digest = xxhash.xxh3_128_hexdigest(prefix + self.body)

    def headers(self, label: str = "step", compute_seconds: float = 1.5) -> dict[str, str]:
        headers = {
            "X-Result-Kind": self.kind,
            "X-Result-Digest": self.digest,
            "X-Result-Compute-Seconds": repr(compute_seconds),
            "X-Result-Label": quote(label, safe=""),
        }
        if self.kind == "ndarray":
            headers["X-Result-Dtype"] = self.dtype
            headers["X-Result-Shape"] = self.shape
        return headers


def encode_array(value: np.ndarray) -> Encoded:
    shape = json.dumps(list(value.shape), separators=(",", ":"))
    return Encoded("ndarray", np.ascontiguousarray(value).tobytes(), value.dtype.str, shape)


def encode_pickle(value: object) -> Encoded:
    return Encoded("pickle", cloudpickle.dumps(value, protocol=5))


def pieces(body: bytes, size: int = 2**20) -> Iterator[bytes]:
    """A streamed (chunked) upload body."""
    for start in range(0, len(body), size):
        yield body[start : start + size]


def put(
    client: httpx.Client,
    task_hash: str,
    encoded: Encoded,
    *,
    label: str = "step",
    compute_seconds: float = 1.5,
    stream: bool = False,
    overrides: Mapping[str, str | None] | None = None,
) -> httpx.Response:
    """PUT ``encoded``; ``overrides`` replaces (or with None removes) headers by short name:
    ``{"dtype": "float64", "label": None}``."""
    headers = encoded.headers(label, compute_seconds)
    for name, value in (overrides or {}).items():
        key = "X-Result-" + name.replace("_", "-").title()
        if value is None:
            headers.pop(key, None)
        else:
            headers[key] = value
    content = pieces(encoded.body) if stream else encoded.body
    return client.put(f"/v1/objects/{task_hash}", content=content, headers=headers)


def batch_body(items: list[tuple[str, Encoded]], *, label: str = "step",
               compute_seconds: float = 1.5, overrides: Mapping[str, object] | None = None
               ) -> bytes:
    """A ``POST /v1/objects/batch`` body (docs/protocol.md, "Batched stores");
    ``overrides`` changes every item's header fields."""
    parts = []
    for task_hash, encoded in items:
        meta: dict[str, object] = {"hash": task_hash, "kind": encoded.kind,
                                   "digest": encoded.digest, "nbytes": len(encoded.body),
                                   "compute_seconds": compute_seconds, "label": label}
        if encoded.kind == "ndarray":
            meta["dtype"], meta["shape"] = encoded.dtype, encoded.shape
        meta.update(overrides or {})
        header = json.dumps(meta).encode()
        parts += [len(header).to_bytes(4, "big"), header, encoded.body]
    return b"".join(parts)
