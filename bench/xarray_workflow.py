"""Measure 10, an xarray workflow (issue 18): a year of hourly temperatures on a grid in a
NetCDF file, opened with ``chunks=``: the anomaly against the mean, smoothed over a day
(``rolling``), daily maxima (``coarsen``), averaged by month (``groupby``).

- ``cold``: ``cached_compute`` with an empty cache (a new namespace each run; default
  ``"auto"`` policy) against ``dask.compute`` of the same expression, in this process;
  ``cold_outputs`` the same with ``policy="outputs"`` (only the result is stored: the
  cost of hashing, lookup and rewrite without the policy's intermediate stores).
- ``warm``: a fresh process builds the expression and runs ``cached_compute`` (it loads the
  output) against a fresh process running ``dask.compute``; the time around the call, as
  in ``warm_run.py`` (the process's whole wall time is reported beside it).

Targets: cold <= 1.2x, warm <= 0.5x (those of cold_overhead.py and warm_run.py).

    python bench/xarray_workflow.py [--repeat 3] [--hours 8760] [--grid 64] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from _harness import Ratio, cache_server, finish, parse_args, run_python


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hours", type=int, default=8760)
    parser.add_argument("--grid", type=int, default=64)
    parser.add_argument("--child", choices=["cached", "dask"], help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--namespace", help=argparse.SUPPRESS)


def write_input(path: Path, hours: int, grid: int) -> int:
    import numpy as np
    import pandas as pd
    import xarray as xr

    rng = np.random.default_rng(0)
    time_ = pd.date_range("2001-01-01", periods=hours, freq="h")
    season = 10 * np.sin(2 * np.pi * np.arange(hours) / 8760)[:, None, None]
    values = (280 + season + rng.standard_normal((hours, grid, grid))).astype("f4")
    ds = xr.Dataset({"temp": (("time", "y", "x"), values)},
                    coords={"time": time_, "y": np.arange(grid), "x": np.arange(grid)})
    ds.to_netcdf(path, engine="h5netcdf")
    return values.nbytes


def workflow(path: str):
    import xarray as xr

    ds = xr.open_dataset(path, engine="h5netcdf", chunks={"time": 24 * 73})
    anomaly = ds.temp - ds.temp.mean("time")
    daily = anomaly.rolling(time=24, center=True).mean().coarsen(time=24).max()
    return daily.groupby("time.month").mean()


def child(args: argparse.Namespace) -> None:
    """One fresh-process run; prints JSON with the seconds around the compute call."""
    import dask
    import dask.threaded  # noqa: F401  (imports are process start, not the compute call)

    from client_lib import cached_compute, last_report

    expr = workflow(args.path)
    start = time.perf_counter()
    info = {}
    if args.child == "cached":
        (value,) = cached_compute(expr, cache=args.cache, namespace=args.namespace,
                                  scheduler="threads")
        report = last_report()
        info = {"loaded": report.loaded, "computed": report.computed,
                "fallback": report.fallback}
    else:
        (value,) = dask.compute(expr, scheduler="threads")
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "total": float(value.sum()), **info}))


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], repeat=3, extra=_options)
    if args.child:
        child(args)
        return
    import dask
    import httpx
    import numpy as np

    from client_lib import cached_compute, last_report

    hours, grid = (240, 8) if args.smoke else (args.hours, args.grid)
    with tempfile.TemporaryDirectory(prefix="rc-bench-xarray-") as tmp, \
            cache_server() as server:
        path = str(Path(tmp) / "temperatures.nc")
        nbytes = write_input(Path(path), hours, grid)
        runs: dict[str, list[float]] = {k: [] for k in (
            "dask", "cold", "cold_outputs", "warm", "warm_dask", "warm_process",
            "warm_dask_process")}
        stored, stored_bytes = [], []
        for _ in range(args.repeat):
            start = time.perf_counter()
            (expected,) = dask.compute(workflow(path), scheduler="threads")
            runs["dask"].append(time.perf_counter() - start)
            start = time.perf_counter()
            cached_compute(workflow(path), cache=server.url, namespace=uuid.uuid4().hex,
                           scheduler="threads", policy="outputs")
            runs["cold_outputs"].append(time.perf_counter() - start)
            namespace = uuid.uuid4().hex
            before = httpx.get(f"{server.url}/v1/stats").json()["stored_bytes"]
            start = time.perf_counter()
            (cold,) = cached_compute(workflow(path), cache=server.url, namespace=namespace,
                                     scheduler="threads")
            runs["cold"].append(time.perf_counter() - start)
            stored.append(last_report().stored)
            stored_bytes.append(httpx.get(f"{server.url}/v1/stats").json()["stored_bytes"]
                                - before)
            np.testing.assert_allclose(cold.values, expected.values)
            common = ["bench/xarray_workflow.py", "--path", path]
            warm, wall = run_python(*common, "--child", "cached", "--cache", server.url,
                                    "--namespace", namespace)
            if warm["loaded"] < 1 or warm["computed"] != 0 or warm["fallback"]:
                raise RuntimeError(f"warm run did not load the cached output: {warm}")
            runs["warm"].append(warm["seconds"])
            runs["warm_process"].append(wall)
            plain, wall = run_python(*common, "--child", "dask")
            assert abs(plain["total"] - warm["total"]) <= 1e-6 * abs(plain["total"])
            runs["warm_dask"].append(plain["seconds"])
            runs["warm_dask_process"].append(wall)
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(f"input {nbytes / 2**20:.0f} MiB ({hours} h x {grid} x {grid} float32), "
          f"output {expected.nbytes / 2**20:.1f} MiB; stored per cold run: {stored} "
          f"results, {[round(b / 2**20) for b in stored_bytes]} MiB")
    print(f"cold: cached {med['cold']:.3f} s (policy outputs: {med['cold_outputs']:.3f} s)  "
          f"dask {med['dask']:.3f} s")
    print(f"warm: cached {med['warm']:.3f} s  dask {med['warm_dask']:.3f} s  (whole process: "
          f"{med['warm_process']:.2f} s vs {med['warm_dask_process']:.2f} s)")
    ratios = [Ratio("cold_vs_dask", med["cold"] / med["dask"], 1.2),
              Ratio("cold_outputs_vs_dask", med["cold_outputs"] / med["dask"], 1.2),
              Ratio("warm_vs_dask", med["warm"] / med["warm_dask"], 0.5)]
    finish("xarray_workflow", ratios, args, seconds=med, runs=runs, input_bytes=nbytes,
           stored=stored, stored_bytes=stored_bytes)


if __name__ == "__main__":
    main()
