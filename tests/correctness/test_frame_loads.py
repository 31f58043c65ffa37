"""A frame stored as Parquet loads with the stored frame's exact dtypes whatever the
loading process's pandas options (issue 27, case 7): pyarrow rebuilds string columns
by those options (``mode.string_storage``, ``future.infer_string``). Frames are stored
in one fresh process against a real server and loaded in fresh processes with other
options (and loaded again by the storing process's options)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import uuid
from pathlib import Path

import pandas as pd
import pytest

from tests._compare import assert_same
from tests.correctness._fresh import namespace, run_scenario
from tests.correctness._round3_scenarios import PANDAS_OPTIONS

pytestmark = pytest.mark.slow  # fresh processes

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = [{}, {"mode.string_storage": "python"}, {"future.infer_string": False},
           {"mode.string_storage": "python", "future.infer_string": False}]


def _child(mode: str, directory: Path, spec: dict) -> dict:
    run = uuid.uuid4().hex
    spec_path, out = directory / f"{run}.json", directory / f"{run}.pkl"
    spec_path.write_text(json.dumps(spec))
    subprocess.run([sys.executable, "-W", "ignore::FutureWarning", "-m",
                    "tests.correctness._frame_loads", mode, str(spec_path), str(out)],
                   cwd=ROOT, check=True, timeout=300,
                   env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    return pickle.loads(out.read_bytes())


def _assert_identical(actual, expected, what: str) -> None:
    check = (pd.testing.assert_series_equal if isinstance(expected, pd.Series)
             else pd.testing.assert_frame_equal)
    check(actual, expected, check_exact=True, obj=what)
    pairs = [(actual.index, expected.index)]
    if isinstance(expected, pd.DataFrame):
        pairs += [(actual.columns, expected.columns), *zip(actual.dtypes, expected.dtypes,
                                                                 strict=True)]
    else:
        pairs.append((actual.dtype, expected.dtype))
    for mine, theirs in pairs:  # the storage is part of a string dtype's identity
        mine, theirs = getattr(mine, "dtype", mine), getattr(theirs, "dtype", theirs)
        assert repr(mine) == repr(theirs), (what, mine, theirs)


@pytest.mark.parametrize("stored_with", OPTIONS[:2], ids=["defaults", "python-storage"])
def test_parquet_loads_give_the_stored_dtypes_under_any_options(cache_server, tmp_path,
                                                                stored_with):
    spec = {"url": cache_server.url, "namespace": f"frames-{uuid.uuid4().hex}",
            "options": stored_with}
    stored = _child("store", tmp_path, spec)
    assert [n for n, (_, kind, _) in stored.items() if kind == "parquet"], stored
    hashes = {name: task_hash for name, (task_hash, _, _) in stored.items()}
    for options in OPTIONS:
        loaded = _child("load", tmp_path, {**spec, "options": options, "hashes": hashes})
        for name, (_, kind, expected) in stored.items():
            assert not isinstance(loaded[name], str), (options, name, loaded[name])
            _assert_identical(loaded[name], expected, f"{name} ({kind}) under {options}")


def test_a_task_computed_under_other_pandas_options_is_another_task(cache_server, tmp_path):
    """What a task builds with pandas depends on pandas' options (``str`` or ``object``
    columns): a run under other options than the one that stored the result must not
    load it."""
    ns = namespace("round3")
    for options in ({}, *OPTIONS[1:], {}):
        result = run_scenario(cache_server, tmp_path / "options", "options", PANDAS_OPTIONS,
                              options, namespace=ns)
        assert_same(result["value"], result["expected"], f"under {options}")
    (report,) = result["reports"]
    assert report["loaded"] >= 1 and report["computed"] == 0, report  # defaults again
