"""The cache's annotations on DataFrames (issue 27, case 6): dask-expr ignores
``dask.annotate``, so ``cache=False``, ``cache_ttl`` and ``cache_version`` on a frame would
be lost and a changed environment served from the cache. They are refused where the frame
is built, with an error naming the annotation and the collection, whether ``dask.dataframe``
was imported before ``client_lib`` or after it; arrays keep theirs, and other annotations
on frames stay Dask's business (its warning). Each order runs in a fresh process.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.correctness._fresh import ROOT

pytestmark = pytest.mark.slow  # fresh processes

CHILD = """
import json, os, sys, warnings
if sys.argv[1] == "frames-first":
    import dask.dataframe as dd
    from client_lib import cached_compute, task_hashes
else:
    from client_lib import cached_compute, task_hashes
    import dask.dataframe as dd
import dask, dask.array as da, pandas as pd

def reads_env(part):
    return part + int(os.environ.get("STEP", "0"))

frame = dd.from_pandas(pd.DataFrame({"a": range(10)}), npartitions=2)
seen = {}
for name, value in [("cache", False), ("cache_ttl", "5s"), ("cache_version", "1")]:
    try:
        with dask.annotate(**{name: value}):
            frame.map_partitions(reads_env)
        seen[name] = "built"
    except Exception as error:
        seen[name] = [type(error).__name__, str(error)]
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # dask-expr warns that it ignores priority
    with dask.annotate(priority=1):
        frame.map_partitions(reads_env)
with dask.annotate(cache=False):
    y = da.ones((4, 4), chunks=2).map_blocks(reads_env)
hashes = task_hashes((y + 1).sum())
seen["array volatile"] = sum(h is None for h in hashes.values())
print(json.dumps(seen))
"""


@pytest.mark.parametrize("order", ["frames-first", "client-first"])
def test_cache_annotations_on_a_dataframe_are_refused_naming_it(order):
    out = subprocess.run(
        [sys.executable, "-c", CHILD, order],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    for name, shown in [
        ("cache", "cache=False"),
        ("cache_ttl", "cache_ttl='5s'"),
        ("cache_version", "cache_version='1'"),
    ]:
        kind, message = seen[name]
        assert kind == "AnnotatedFrame", seen
        assert f"dask.annotate({shown}) on a dask DataFrame (reads_env-" in message
    assert seen["array volatile"] > 0, seen  # the array keeps its annotation
