"""Scheduling annotations that Dask's graph optimisation dropped, put back by task hash.

``dask.annotate(resources={"GPU": 1})`` on array layers does not survive Dask's
optimisation: fusing the annotated layers leaves a graph without annotations, so plain
``dask.compute`` schedules those tasks anywhere (docs/design/dask-facts.md, Facts about Dask
that shape the code).
The unoptimised graph still has them, and an operation hashes the same in both graphs
(fused tasks are unfused before hashing): each task of the optimised graph gets the
annotations of the unoptimised task with its hash, so its load, its store and the fused
task it runs in (by the hash of that task's output) are placed as the user asked.

Only Dask's scheduling annotations are restored, and only when the optimised graph has
none of them: a graph that kept its annotations is left as Dask made it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from .materialize import Materialized

__all__ = ["SCHEDULING", "has_scheduling", "restore"]

Key = Hashable
SCHEDULING = ("resources", "workers", "allow_other_workers", "priority", "retries")


def has_scheduling(m: Materialized) -> bool:
    """Whether the graph carries any of Dask's scheduling annotations."""
    return any(m.annotations.get(name) for name in SCHEDULING)


def restore(optimised: Materialized, hashes: Mapping[Key, str],
            unoptimised: Materialized, unoptimised_hashes: Mapping[Key, str]) -> int:
    """Annotate the keys of ``optimised`` (unfused, with their ``hashes``) like the tasks of
    ``unoptimised`` (unfused) with equal hashes; returns how many keys were annotated."""
    by_hash: dict[str, dict[str, Any]] = {}
    for key, task_hash in unoptimised_hashes.items():
        found = {n: v for n in SCHEDULING
                 if (v := unoptimised.annotation(n, key)) is not None}
        if found:
            by_hash.setdefault(task_hash, found)
    restored = 0
    for key, task_hash in hashes.items():
        found = by_hash.get(task_hash)
        if found:
            for name, value in found.items():
                optimised.annotations.setdefault(name, {})[key] = value
            restored += 1
    return restored
