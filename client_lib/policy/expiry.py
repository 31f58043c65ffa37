"""Entry lifetimes: ``dask.annotate(cache_ttl="7d")`` per task, config ``result-cache.ttl``
for every entry a run stores. An expired entry is a miss (the server answers as if it
were absent and removes it); see docs/protocol.md, "PUT /v1/objects/{hash}" (Expiry)."""

from __future__ import annotations

from typing import Any

from dask.utils import parse_timedelta

from ..core.config import setting
from ..wire.bounds import MAX_TTL_SECONDS

__all__ = ["default_ttl", "parse_ttl"]



def parse_ttl(value: Any, where: str = "cache_ttl") -> float | None:
    """Seconds from ``"7d"``, ``"12h"``, ``3600``...; ``None`` means no expiry. Raises
    ``ValueError`` with ``where`` in the message for anything else."""
    if value is None:
        return None
    try:
        seconds = float(parse_timedelta(value, "s"))
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"{where}: {value!r} is not a duration (e.g. '7d', '12h', "
                         f"3600): {exc}") from None
    if not 0 < seconds <= MAX_TTL_SECONDS:
        raise ValueError(f"{where}: {value!r} must be more than 0 s and at most ten years")
    return seconds


def default_ttl() -> float | None:
    """The lifetime of entries stored without a ``cache_ttl`` annotation."""
    return parse_ttl(setting("ttl"), "result-cache.ttl")
