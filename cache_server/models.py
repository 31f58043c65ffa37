"""JSON bodies of the HTTP API (docs/protocol.md), as pydantic models for validation and /docs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

__all__ = [
    "MAX_COMPUTE_SECONDS",
    "EntryList",
    "Event",
    "EventList",
    "Health",
    "LookupRequest",
    "LookupResponse",
    "Manifest",
    "Stats",
]


#: The largest ``X-Result-Compute-Seconds`` accepted (about 116 days): a finite bound, so that
#: ``saved_seconds`` (their sum over hits) stays a finite number.
MAX_COMPUTE_SECONDS = 1e7


class LookupRequest(BaseModel):
    # Hash format is checked by the route with one fast loop, not per item by pydantic.
    hashes: list[str]


class LookupResponse(BaseModel):
    found: list[str] = Field(description="the indexed subset, in request order, duplicates once")


class Manifest(BaseModel):
    """What the index knows about one task result."""

    hash: str
    digest: str
    kind: Literal["ndarray", "pickle"]
    storage: Literal["zarr", "blob"]
    nbytes: int
    dtype: str | None = None
    shape: list[int] | None = None
    type: str | None = None
    compute_seconds: float
    label: str
    created: float
    last_access: float = 0.0
    hits: int = 0
    pinned: bool = Field(default=False, description="pinned entries are never evicted")
    signature: str | None = Field(
        default=None, description="the client's signature (X-Result-Signature), stored opaquely"
    )


class EntryList(BaseModel):
    entries: list[Manifest]
    next_cursor: str | None


class Stats(BaseModel):
    hits: int
    misses: int
    lookups: int
    stores: int
    entries: int
    bytes: int = Field(description="sum of nbytes over indexed entries")
    hit_rate: float = Field(description="hits / (hits + misses), 0 when both are 0")
    saved_seconds: float = Field(description="compute seconds of every hit served")
    deletes: int
    corrupt: int
    evictions: int = Field(description="entries evicted to respect max_bytes")
    stored_bytes: int = Field(
        description="sum of nbytes over distinct stored objects (what max_bytes limits)"
    )
    max_bytes: int | None = Field(default=None, description="the size cap; null: none")
    pinned: int = Field(description="pinned entries")
    untrusted: int = Field(
        default=0, description="loads clients refused for a missing or wrong signature"
    )


class Event(BaseModel):
    kind: Literal["store", "hit", "delete", "corrupt", "evict", "untrusted", "lookup"]
    time: float
    hash: str | None = None
    label: str | None = None
    found: int | None = None
    missing: int | None = None


class EventList(BaseModel):
    events: list[Event]


class Health(BaseModel):
    status: Literal["ok"]
