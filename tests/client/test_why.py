"""``client_lib.why`` in fresh processes against a real server (docs/design/hashing.md,
"Recipes and why"): a run records its recipes; after an edit, a new process asks why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

PIPE = '''
import dask
import helpers

LITERAL = {literal}

def load(path):
    with open(path) as f:
        return len(f.read())

def step_1(n):
    return n + 1

def step_2(x):
    return x * 2{edit}

def step_3(x, k):
    return helpers.scale(x) + k

def build():
    raw = dask.delayed(load)({path!r})
    one = dask.delayed(step_1)(raw)
    two = dask.delayed(step_2)(one)
    return [dask.delayed(step_3)(two, LITERAL)]
'''
HELPERS = "FACTOR = {factor}\n\ndef scale(x):\n    return x * FACTOR\n"


def _write(directory: Path, *, literal: int = 5, edit: str = "", factor: int = 3) -> None:
    data = directory / "data.csv"
    (directory / "pipe.py").write_text(PIPE.format(literal=literal, edit=edit,
                                                  path=str(data)))
    (directory / "helpers.py").write_text(HELPERS.format(factor=factor))


def _run_child(directory: Path, url: str, namespace: str, mode: str) -> Any:
    out = subprocess.run([sys.executable, "-m", "tests.client._why_child", str(directory), url,
                          namespace, mode], cwd=ROOT, check=True, timeout=300,
                         capture_output=True, text=True,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    if mode == "run":
        return None
    return json.loads(next(x for x in out.stdout.splitlines() if x.startswith("JSON"))[4:])


def _child(directory: Path, url: str, namespace: str, mode: str) -> dict:
    found = _run_child(directory, url, namespace, mode) or {}
    found["by_label"] = {r["label"]: r for r in found.get("records", [])}
    return found


@pytest.mark.slow
def test_why_names_the_edited_function_file_argument_and_helper(cache_server, tmp_path):
    ns = f"why-{uuid.uuid4().hex}"
    directory = tmp_path / "project"
    directory.mkdir()
    (directory / "data.csv").write_text("a,b\n1,2\n")
    _write(directory)
    url = cache_server.url
    _child(directory, url, ns, "run")

    unchanged = _child(directory, url, ns, "why")
    assert {r["status"] for r in unchanged["records"]} == {"cached"}

    _write(directory, edit=" + 1")  # step_2's body
    found = _child(directory, url, ns, "why")["by_label"]
    assert found["load"]["status"] == found["step_1"]["status"] == "cached"
    assert found["step_2"]["status"] == "compute"
    assert found["step_2"]["reason"] == "code of step_2 changed"
    assert found["step_3"]["reason"] == "depends on step_2, which changed"
    assert found["step_3"]["changes"][0]["kind"] == "dependency"

    _write(directory)
    os.utime(directory / "data.csv", ns=(1, 10**18))
    found = _child(directory, url, ns, "why")
    assert found["by_label"]["load"]["reason"] == "input file data.csv changed (mtime)"
    assert found["by_label"]["step_3"]["reason"] == "depends on load, which changed"
    assert "input file data.csv changed (mtime): 4 tasks recompute" in found["text"]

    os.utime(directory / "data.csv", ns=(1, 10**18))
    _child(directory, url, ns, "run")  # the edited file recorded: back to all cached
    _write(directory, literal=6)
    found = _child(directory, url, ns, "why")["by_label"]
    assert found["step_3"]["reason"] == "argument 1 changed"
    assert found["step_2"]["status"] == "cached"

    _write(directory, factor=4)
    found = _child(directory, url, ns, "why")["by_label"]
    reason = found["step_3"]["reason"]
    assert reason.startswith("code of step_3 changed (") and "helper helpers.scale" in reason
    assert "helpers.FACTOR" in reason


COLLECTIONS = '''
import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import xarray as xr

def adjust(block):
    return block + {edit}

def call(x):
    return x * {edit}

def build():
    array = da.from_array(np.arange(16.0).reshape(4, 4), chunks=2).map_blocks(adjust)
    frame = dd.from_pandas(pd.DataFrame({{"x": np.arange(8.0)}}), npartitions=2)
    data = xr.DataArray(da.from_array(np.arange(8.0), chunks=4), dims="t")
    return [array.sum(), frame.map_partitions(adjust).x.sum(), adjust(data).sum()]

def submit(url, namespace):
    from distributed import Client, LocalCluster
    from client_lib import CachedClient
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster, \\
            Client(cluster) as client:
        cached = CachedClient(client, cache=url, namespace=namespace, policy="all")
        assert cached.submit(call, 3).result() == 3 * {edit}
        assert [f.result() for f in cached.map(call, range(3))] == [0, {edit}, 2 * {edit}]

def why_groups():  # the submit and the map, as the delayed calls they are
    return [[dask.delayed(call)(3)], [dask.delayed(call)(i) for i in range(3)]]
'''


@pytest.mark.slow
def test_why_explains_arrays_dataframes_xarray_and_cached_client_calls(cache_server, tmp_path):
    ns = f"why-{uuid.uuid4().hex}"
    directory = tmp_path / "collections"
    directory.mkdir()
    (directory / "pipe.py").write_text(COLLECTIONS.format(edit=1))
    url = cache_server.url
    _child(directory, url, ns, "run")
    (directory / "pipe.py").write_text(COLLECTIONS.format(edit=2))
    built, submitted, mapped = _run_child(directory, url, ns, "why")
    reasons = {(r["label"], r["reason"]) for r in built["records"]}
    assert ("adjust", "code of adjust changed") in reasons  # the array's blocks
    assert ("apply_and_enforce", "code of adjust changed (argument _func)") in reasons  # frame
    assert ("add", "argument 1 changed") in reasons  # xarray: adjust ran on the dask array
    assert ("zeros_like", "cached") in reasons  # untouched by the edit
    upstream = {r["reason"] for r in built["records"] if r["reason"].startswith("depends")}
    assert upstream == {"depends on adjust, which changed", "depends on add, which changed"}
    assert "code of adjust changed (argument _func): 7 tasks recompute" in built["text"]
    for answer, n in ((submitted, 1), (mapped, 3)):
        assert [r["reason"] for r in answer["records"]] == ["code of call changed"] * n
