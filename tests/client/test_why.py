"""``client_lib.why`` in fresh processes against a real server (docs/design/hashing.md,
"Recipes and why"): a run records its recipes; after an edit, a new process asks why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

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


def _child(directory: Path, url: str, namespace: str, mode: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "tests.client._why_child", str(directory), url,
                          namespace, mode], cwd=ROOT, check=True, timeout=300,
                         capture_output=True, text=True,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    if mode == "run":
        return {}
    line = next(x for x in out.stdout.splitlines() if x.startswith("JSON"))
    found = json.loads(line[4:])
    found["by_label"] = {r["label"]: r for r in found["records"]}
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
