"""Stores and loads frames in fresh processes with given pandas options (issue 27, case
7): ``python -m tests.correctness._frame_loads MODE SPEC OUT``.

``SPEC`` is JSON: ``{"url", "namespace", "options"}``, the options set before anything
else runs. ``store`` computes :func:`frames` with ``cached_compute`` (every frame stored
as Parquet where it reads back exactly) and pickles ``{name: (task hash, storage kind,
frame)}``; ``load`` takes ``{"hashes": {name: hash}}`` in ``SPEC`` and pickles what
``CacheClient.get`` gives for each (the frame, or the error's text).
"""

from __future__ import annotations

import json
import pickle
import sys
from typing import Any

import pandas as pd

__all__ = ["frames", "main"]


def frames() -> dict[str, Any]:
    """Frames whose dtypes the loading process's options would change, built explicitly
    (their dtypes do not depend on the options of the process building them)."""
    values = [f"s{i}" if i % 9 else None for i in range(60)]
    labels = pd.Index(["s", "v"], dtype=pd.StringDtype("pyarrow", na_value=float("nan")))
    out = {}
    for name, dtype in [("string[pyarrow]", pd.StringDtype("pyarrow")),
                        ("string[python]", pd.StringDtype("python")),
                        ("str", pd.StringDtype("pyarrow", na_value=float("nan"))),
                        ("str, python storage", pd.StringDtype("python",
                                                               na_value=float("nan"))),
                        ("object", object)]:
        index = pd.Index([f"i{i}" for i in range(60)], dtype=dtype)
        frame = pd.DataFrame({"s": pd.Series(values, dtype=dtype, index=index),
                              "v": pd.Series(range(60), index=index)})
        frame.columns = labels
        out[name] = frame
    out["series"] = out["string[python]"]["s"]
    return out


def _store(spec: dict) -> dict:
    import dask

    from client_lib import CacheClient, cached_compute, task_hashes

    made = frames()
    tasks = {name: dask.delayed(lambda v: v, pure=True)(value, dask_key_name=name)
             for name, value in made.items()}
    with dask.config.set({"result-cache.parquet-min-bytes": 1}):
        (computed,) = cached_compute(tasks, cache=spec["url"], namespace=spec["namespace"],
                                     policy="all", scheduler="threads")
    hashes = task_hashes(tasks, namespace=spec["namespace"])
    client = CacheClient(spec["url"])
    return {name: (hashes[name], client.locate(hashes[name]).kind, computed[name])
            for name in made}


def _load(spec: dict) -> dict:
    from client_lib import CacheClient

    client = CacheClient(spec["url"])
    out: dict[str, Any] = {}
    for name, task_hash in spec["hashes"].items():
        try:
            out[name] = client.get(task_hash)
        except Exception as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
    return out


def main(mode: str, spec_path: str, out_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    for name, value in spec["options"].items():
        pd.set_option(name, value)
    result = _store(spec) if mode == "store" else _load(spec)
    with open(out_path, "wb") as f:
        pickle.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
