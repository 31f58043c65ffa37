"""The trivial graphs of measures 2 and 3, built the same way in every process.

``fanin``: ``n - 1`` delayed ``inc`` leaves summed by one task (a wide delayed fan-in), keyed
like non-pure ``dask.delayed`` calls (a random token per key). It is built as a graph
directly: ``dask.delayed(total)(leaves)`` finalises its list argument through Dask's
delayed optimisation, which is quadratic (10k leaves take seconds, 100k never finish).
``array``: ``(da.ones((s, s), chunks=10) + 1).sum()`` with ``s`` chosen so the materialised
graph has about ``n`` tasks (a chunked dask.array with a tree reduction).
``groupby``: ``ddf.groupby("k").x.sum()`` over a pandas frame of ten rows per partition,
with the partition count chosen so the graph has about ``n`` tasks (a dataframe groupby's
tree reduction).
"""

from __future__ import annotations

import math
import uuid
from typing import Any

__all__ = ["GRAPHS", "build", "checksum"]

GRAPHS = ("fanin", "array", "groupby")


def inc(x: int) -> int:
    return x + 1


def total(values: list[int]) -> int:
    return sum(values)


def checksum(value: Any) -> float:
    """One number to compare two runs' results by (the groupby graph returns a Series)."""
    return float(value.sum()) if hasattr(value, "sum") else float(value)


def build(kind: str, n: int) -> Any:
    """The collection of ``kind`` with about ``n`` tasks."""
    if kind == "fanin":
        from dask._task_spec import List, Task, TaskRef
        from dask.delayed import Delayed

        leaves = [f"inc-{uuid.uuid4()}" for _ in range(n - 1)]
        graph: dict = {key: Task(key, inc, i) for i, key in enumerate(leaves)}
        out = f"total-{uuid.uuid4()}"
        graph[out] = Task(out, total, List(*(TaskRef(key) for key in leaves)))
        return Delayed(out, graph)
    if kind == "array":
        import dask.array as da

        # ~1.34 tasks per chunk (ones+add fused per chunk, sum per chunk, tree reduction).
        side = max(10, int(round(math.sqrt(n / 1.34))) * 10)
        return (da.ones((side, side), chunks=10) + 1).sum()
    if kind == "groupby":
        import dask.dataframe as dd
        import numpy as np
        import pandas as pd

        # ~4.94 tasks per partition (from_pandas + chunk fused, the tree reduction).
        parts = max(2, round(n / 4.94))
        rows = np.arange(parts * 10)
        frame = pd.DataFrame({"k": rows % 7, "x": rows.astype(float)})
        return dd.from_pandas(frame, npartitions=parts).groupby("k").x.sum()
    raise ValueError(f"unknown graph {kind!r}; choose from {GRAPHS}")
