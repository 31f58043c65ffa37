"""One run of a branch-reuse workload in a fresh process (``python -m
tests.client._reuse_child SPEC``): the rows of issue 24's table, as a new user in a new
session would meet them, with the default ``auto`` policy. ``SPEC`` is JSON: ``url``,
``namespace``, ``case``, ``scheduler`` (``threads`` or ``cluster``: a two-worker
``LocalCluster``); the last line printed is JSON: the value and the run report's counts."""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
import time

import dask
import numpy as np

from client_lib import cached_compute, last_report

BLOCKS, ROWS, COLS = 16, 128, 1024  # 1 MiB blocks (the bench's are 8 MiB)


def f(block: np.ndarray) -> np.ndarray:
    time.sleep(0.1)
    return block * 2.0 + 1.0


def s(x: float, i: int) -> float:
    time.sleep(0.5)
    return x * 3 + i


def _array_branch(case: str):
    import dask.array as da

    x = da.random.default_rng(24).random((BLOCKS * ROWS, COLS), chunks=(ROWS, COLS))
    y = x.map_blocks(f, dtype="f8")
    return [y.mean(axis=0).sum()] if case == "array-a" else [(y ** 2).sum()]


def _chain(case: str):
    delayed = dask.delayed(s, pure=True)
    s2 = delayed(delayed(1.0, 1), 2)
    if case == "chain-a":
        return [delayed(delayed(s2, 3), 4)]  # s1 -> s2 -> s3 -> s4a
    return [delayed(delayed(s2, 30), 40)]  # s2 -> s3b -> s4b


def add(*values: int) -> int:
    return sum(values)


def _two_modules(case: str):
    cheap, slow = importlib.import_module("cheap"), importlib.import_module("slow")

    def total(work, n):  # intermediates: the outputs would be stored whatever they cost
        return dask.delayed(add, pure=True)(*(dask.delayed(work, pure=True)(i)
                                              for i in range(n)))

    if case == "costs-a":  # both in one process: cheap.work's cost must not price slow.work
        return [total(cheap.work, 300), total(slow.work, 100)]
    return [total(slow.work, 80)]  # another sum: only the parts can load


def main(spec: dict) -> dict:
    case = spec["case"]
    runs = (_array_branch(case) if case.startswith("array") else
            _chain(case) if case.startswith("chain") else _two_modules(case))
    with contextlib.ExitStack() as stack:
        scheduler = "threads"
        if spec["scheduler"] == "cluster":
            from distributed import Client, LocalCluster

            cluster = stack.enter_context(LocalCluster(n_workers=2, threads_per_worker=1,
                                                       dashboard_address=":0"))
            scheduler = stack.enter_context(Client(cluster))
        out: dict = {"runs": []}
        for graph in runs:
            (value,) = cached_compute(graph, cache=spec["url"], namespace=spec["namespace"],
                                      scheduler=scheduler)
            report = last_report()
            out["runs"].append({
                "value": value,
                "loaded": report.loaded, "computed": report.computed,
                "stored": report.stored, "unwrapped": report.unwrapped,
                "computed_labels": sorted(str(k).split("-")[0] for k in report.computed_keys),
                "functions": report.functions})
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1])), default=float))
