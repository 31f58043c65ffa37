"""The parent's side of :mod:`tests.correctness._scenario`: write a scenario module, run
it in a fresh process against a cache server, and read back what it observed."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

__all__ = ["namespace", "run_child", "run_scenario"]

ROOT = Path(__file__).resolve().parents[2]


def run_scenario(server: Any, directory: Path, module: str, source: str, param: Any = None, *,
                 namespace: str, config: dict | None = None, compare: bool = True,
                 env: dict | None = None) -> dict:
    """Run ``module`` (written to ``directory``) in a fresh process; see ``_scenario``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{module}.py").write_text(source)
    run_id = uuid.uuid4().hex
    spec_path, out = directory / f"{run_id}.json", directory / f"{run_id}.pkl"
    spec_path.write_text(json.dumps({
        "url": server.url, "namespace": namespace, "dir": str(directory), "module": module,
        "param": param, "dask": compare, "config": config or {}}))
    subprocess.run([sys.executable, "-m", "tests.correctness._scenario", str(spec_path),
                    str(out)], cwd=ROOT, check=True, timeout=600,
                   env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **(env or {})})
    result = pickle.loads(out.read_bytes())
    assert result["error"] is None, result["error"]
    return result


def namespace(prefix: str = "round2") -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def run_child(source: str, *args: str) -> dict:
    """Run ``python -c source args`` in a fresh process; the JSON of its last output line."""
    done = subprocess.run([sys.executable, "-c", source, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
