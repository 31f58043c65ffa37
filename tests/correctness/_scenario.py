"""Runs one scenario in a fresh process: ``python -m tests.correctness._scenario SPEC OUT``.

A scenario is a module (in a directory of its own) with a function ``run(compute, param)``
that builds a computation, hands it to ``compute`` (a drop-in for ``dask.compute``) and
returns what a user would look at afterwards: the values, a target array it wrote into,
the files it wrote, the warnings it saw. The child runs it twice, once with
``cached_compute`` (``policy="all"``, threaded scheduler, against the server in ``SPEC``)
and, unless ``SPEC["dask"]`` is false, once with plain ``dask.compute``, and pickles both
observations with the cache report of the ``cached_compute`` calls to ``OUT``.

``SPEC`` is JSON: ``{"url", "namespace", "dir", "module", "param", "dask", "config"}``;
``config`` is set with ``dask.config.set`` around both runs.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import pickle
import sys
import traceback
from typing import Any

import dask

from client_lib import cached_compute, last_report

__all__ = ["REPORT_FIELDS", "main", "run_scenario"]

REPORT_FIELDS = ("tasks", "cacheable", "hits", "loaded", "culled", "computed", "stored",
                 "volatile", "fallback", "retried")


def _report() -> dict[str, Any]:
    report = last_report()
    return {
        **{name: getattr(report, name) for name in REPORT_FIELDS},
        "volatile_reasons": dict(report.volatile_reasons),
        "loaded_keys": [str(k) for k in report.loaded_keys],
        "computed_keys": [str(k) for k in report.computed_keys],
    }


def run_scenario(spec: dict) -> dict[str, Any]:
    sys.path.insert(0, spec["dir"])
    reports: list[dict[str, Any]] = []

    def cached(*args: Any, **kwargs: Any) -> tuple:
        kwargs.setdefault("scheduler", "threads")
        try:
            return cached_compute(*args, cache=spec["url"], namespace=spec["namespace"],
                                  policy="all", **kwargs)
        finally:
            reports.append(_report())

    try:
        module = importlib.import_module(spec["module"])
        with dask.config.set(spec.get("config") or {}):
            value = module.run(cached, spec.get("param"))
            expected = None
            if spec.get("dask", True):
                expected = module.run(functools.partial(dask.compute, scheduler="threads"),
                                      spec.get("param"))
        return {"value": value, "expected": expected, "reports": reports, "error": None,
                "pid": os.getpid()}
    except Exception:
        return {"error": traceback.format_exc(), "reports": reports}


def main(spec_path: str, out_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    result = run_scenario(spec)
    with open(out_path, "wb") as f:
        pickle.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
