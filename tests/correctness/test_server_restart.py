"""Hits survive a server restart: same data directory, embedded Redis, a new port.

The task hashes do not depend on the server (its URL, its process) and the entries
written before the restart are found and loaded after it, in a fresh client process.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import uuid
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests._compare import assert_same

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ENTRIES = ["delayed_pure_tree", "delayed_chain", "array_mean_axis",
           "array_large_chunks", "array_h5py", "dataframe_groupby", "bag_frequencies"]


def _run(url: str, namespace: str, out: Path, h5: Path) -> dict:
    subprocess.run([sys.executable, "-m", "tests.client._corpus", url, namespace, str(out),
                    "--scheduler", "threads", "--h5", str(h5), "--only", *ENTRIES],
                   cwd=ROOT, check=True, timeout=300)
    return pickle.loads(out.read_bytes())


def test_entries_are_hits_after_a_server_restart(fresh_server, tmp_path):
    h5 = tmp_path / "corpus.h5"
    with h5py.File(h5, "w") as f:
        f["data"] = np.arange(200.0).reshape(20, 10)
    data = tmp_path / "cache-data"
    namespace = f"restart-{uuid.uuid4().hex}"
    first = fresh_server(embedded=True, data_dir=data)
    cold = _run(first.url, namespace, tmp_path / "cold.pkl", h5)
    first.stop()
    second = fresh_server(embedded=True, data_dir=data)
    assert second.url != first.url or second.pid != first.pid
    warm = _run(second.url, namespace, tmp_path / "warm.pkl", h5)
    assert set(warm) == set(ENTRIES)
    for name, (value, report) in warm.items():
        assert cold[name][1]["loaded"] == 0 and cold[name][1]["computed"] > 0, name
        assert report["fallback"] is None, (name, report)
        assert report["computed"] == 0 and report["loaded"] >= 1, (name, report)
        assert report["hits"] >= report["loaded"], (name, report)
        assert_same(value, cold[name][0], name)
