"""Runs mutation cases in a fresh process (``python -m tests.correctness._child SPEC OUT``).

``SPEC`` is JSON: ``{"url": ..., "cases": [{"name", "dir", "namespace"}, ...]}``. For each
case it imports the module ``pipe`` from the case's directory, computes ``pipe.build()``
with ``cached_compute(policy="all")`` on the threaded scheduler, then computes it again
with plain ``dask.compute`` (the expected value), and pickles both with the cache report
to ``OUT``. Case modules are dropped from ``sys.modules`` between cases, so cases sharing
module names (``pipe``, ``helpers``) do not see each other.
"""

from __future__ import annotations

import json
import pickle
import sys
import traceback

import dask

from client_lib import cached_compute, last_report
from tests.correctness._projects import imported_project


def run_case(case: dict, url: str) -> dict:
    try:
        with imported_project(case["dir"]) as pipe:
            values = cached_compute(*pipe.build(), cache=url, namespace=case["namespace"],
                                    policy="all", scheduler="threads")
            report = last_report()
            expected = dask.compute(*pipe.build(), scheduler="threads")
        return {
            "value": values,
            "expected": expected,
            "report": {name: getattr(report, name) for name in (
                "tasks", "cacheable", "hits", "loaded", "culled", "computed", "stored",
                "volatile", "fallback", "retried")},
            "volatile_reasons": dict(report.volatile_reasons),
            "loaded_keys": list(report.loaded_keys),
            "computed_keys": list(report.computed_keys),
            "error": None,
        }
    except Exception:
        return {"error": traceback.format_exc()}


def main(spec_path: str, out_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    results = {case["name"]: run_case(case, spec["url"]) for case in spec["cases"]}
    with open(out_path, "wb") as f:
        pickle.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
