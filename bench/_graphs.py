"""The trivial graphs of measures 2 and 3, built the same way in every process.

``fanin``: ``n`` delayed ``inc`` leaves summed by one task (a wide delayed fan-in).
``array``: ``(da.ones((s, s), chunks=10) + 1).sum()`` with ``s`` chosen so the materialised
graph has about ``n`` tasks (a chunked dask.array with a tree reduction).
"""

from __future__ import annotations

import math
from typing import Any

import dask

__all__ = ["GRAPHS", "build"]

GRAPHS = ("fanin", "array")


def inc(x: int) -> int:
    return x + 1


def total(values: list[int]) -> int:
    return sum(values)


def build(kind: str, n: int) -> Any:
    """The collection of ``kind`` with about ``n`` tasks."""
    if kind == "fanin":
        leaves = [dask.delayed(inc)(i) for i in range(n - 1)]
        return dask.delayed(total)(leaves)
    if kind == "array":
        import dask.array as da

        # ~1.34 tasks per chunk (ones+add fused per chunk, sum per chunk, tree reduction).
        side = max(10, int(round(math.sqrt(n / 1.34))) * 10)
        return (da.ones((side, side), chunks=10) + 1).sum()
    raise ValueError(f"unknown graph {kind!r}; choose from {GRAPHS}")
