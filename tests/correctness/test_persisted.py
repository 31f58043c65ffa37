"""Persisted collections hash as what they persist (issue 27, case 9): ``cached_persist``
on a local scheduler returns values and on a cluster futures, and a later
``cached_compute(step3(p))`` must load what ``cached_compute(step3(step2))`` stored in
another process, not hash ``p``'s values anew and recompute. Every step runs in a fresh
process against a real server, on threads and on a ``LocalCluster``, for an array, a bag,
a delayed value and a dataframe, each compared with plain Dask. A bag's persisted
partitions come from another task than the one a computation on the bag runs (Dask wraps it
in ``reify`` to make a list of the iterator), so a bag misses there, correctly.
"""

from __future__ import annotations

import pytest

from tests.correctness._fresh import namespace, run_child

pytestmark = pytest.mark.slow  # fresh processes, a LocalCluster

CHILD = """
import json, sys
import dask, dask.array as da, dask.bag as db, dask.dataframe as dd, numpy as np, pandas as pd
from client_lib import cached_compute, cached_persist, last_report

url, ns, phase, where = sys.argv[1:]

def step2(b):
    return b * 2

def step3(b):
    return b + 1

def collections():
    x = da.from_array(np.arange(100.0), chunks=25).map_blocks(step2)
    bag = db.from_sequence(range(8), npartitions=4).map(step2)
    value = dask.delayed(step2)(21)
    frame = dd.from_pandas(pd.DataFrame({"a": range(40)}), npartitions=4).map_partitions(step2)
    return [x, bag, value, frame]

def downstream(x, bag, value, frame):
    return [x.map_blocks(step3).sum(), bag.map(step3).sum(), dask.delayed(step3)(value),
            frame.map_partitions(step3).a.sum()]

def main():
    options = dict(cache=url, namespace=ns, policy="all")
    if where == "threads":
        options["scheduler"] = "threads"
    out = {"same": [], "computed": 0, "loaded": 0, "volatile": 0, "persist_loaded": 0}
    # (the bag's counts are kept apart, in out["bag"])
    for i, name in enumerate(["array", "bag", "delayed", "frame"]):
        (expected,) = dask.compute(downstream(*collections())[i], scheduler="sync")
        if phase == "direct":
            (got,) = cached_compute(downstream(*collections())[i], **options)
        else:
            (persisted,) = cached_persist(collections()[i], **options)
            out["persist_loaded"] += last_report().loaded
            args = [persisted if j == i else c for j, c in enumerate(collections())]
            (got,) = cached_compute(downstream(*args)[i], **options)
        report = last_report()
        out["same"].append([name, bool(got == expected)])
        out[name] = [report.computed, report.loaded, report.volatile]
        if name == "bag":  # persist runs reify(partition), another task: see the docstring
            continue
        out["computed"] += report.computed
        out["loaded"] += report.loaded
        out["volatile"] += report.volatile
    print(json.dumps(out))

if where == "cluster":
    from distributed import Client, LocalCluster
    if __name__ == "__main__":
        with LocalCluster(n_workers=1, threads_per_worker=2, dashboard_address=None) as c, \\
                Client(c):
            main()
else:
    main()
"""


def _child(server, ns: str, phase: str, where: str) -> dict:
    return run_child(CHILD, server.url, ns, phase, where)


@pytest.mark.parametrize("where", ["threads", "cluster"])
def test_a_persisted_collection_hashes_as_what_it_persists(cache_server, where):
    ns = namespace("round3-persist")
    cold = _child(cache_server, ns, "direct", where)
    assert all(same for _, same in cold["same"]) and cold["computed"] > 0, cold
    warm = _child(cache_server, ns, "persisted", where)
    assert all(same for _, same in warm["same"]), warm
    assert warm["persist_loaded"] > 0, warm  # the persisted parts come from the cache
    # ... and what is computed on them loads what the direct run stored
    assert warm["computed"] == 0 and warm["volatile"] == 0 and warm["loaded"] > 0, str(warm)
