"""Collections from ``open_cached`` hash as the tasks they reopen (issue 27, case 10): a
computation on a reopened collection was volatile (its load tasks hold a ``CacheClient``)
or hashed by the directory stamp of a Zarr entry, so it recomputed in every process. Each
step runs in a fresh process against a real server: the collection is stored, then
computed on reopened in two more processes, the last of which computes nothing; a
collection reopened from its persisted chunks hashes as the collection itself, so the first
computation on it already loads what the same computation on the original stored.
"""

from __future__ import annotations

import pytest

from tests.correctness._fresh import namespace, run_child

pytestmark = pytest.mark.slow  # fresh processes

CHILD = """
import json, sys
import dask, dask.array as da, dask.dataframe as dd, numpy as np, pandas as pd
from client_lib import cached_compute, cached_persist, last_report, open_cached

url, ns, phase = sys.argv[1:]
options = dict(cache=url, namespace=ns, policy="all", scheduler="threads")

def step(b):
    return b * 2

SOURCES = {
    "small array": lambda: da.from_array(np.arange(100.0), chunks=25).map_blocks(step),
    "zarr array": lambda: da.from_array(np.arange(300_000.0), chunks=100_000).map_blocks(step),
    "persisted array": lambda: da.from_array(np.arange(60.0), chunks=20).map_blocks(step),
    "frame": lambda: dd.from_pandas(pd.DataFrame({"a": range(40)}),
                                    npartitions=4).map_partitions(step),
}
# Only the finished results stored: reopened as one load of it.
SOURCES["small array (outputs)"] = lambda: SOURCES["small array"]() + 0.5
SOURCES["frame (outputs)"] = lambda: SOURCES["frame"]() + 3

def downstream(c):
    return (c + 1).sum() if hasattr(c, "chunks") else (c.a + 1).sum()

out = {}
for name, make in SOURCES.items():
    (expected,) = dask.compute(downstream(make()), scheduler="sync")
    if phase == "store":
        if name == "persisted array":
            cached_persist(make(), **options)
            cached_compute(downstream(make()), **options)
        else:
            policy = "outputs" if name.endswith("(outputs)") else "all"
            cached_compute(make(), **{**options, "policy": policy})
        continue
    (got,) = cached_compute(downstream(open_cached(make(), cache=url, namespace=ns)),
                            **options)
    report = last_report()
    out[name] = {"same": bool(got == expected), "computed": report.computed,
                 "volatile": report.volatile, "loaded": report.loaded}
print(json.dumps(out))
"""


def _child(server, ns: str, phase: str) -> dict:
    return run_child(CHILD, server.url, ns, phase)


def test_a_reopened_collection_hashes_as_the_task_it_reopens(cache_server):
    ns = namespace("round3-reopen")
    _child(cache_server, ns, "store")
    first = _child(cache_server, ns, "reopen")
    second = _child(cache_server, ns, "reopen")
    for name, seen in first.items():
        assert seen["same"] and seen["volatile"] == 0, (name, first)
        assert second[name]["same"], (name, second)
        assert second[name]["computed"] == 0 and second[name]["loaded"] > 0, (name, second)
    # reopened from its persisted chunks: as the array itself, stored by the first process
    assert first["persisted array"]["computed"] == 0, first
