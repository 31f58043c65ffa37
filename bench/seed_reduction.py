"""The seed data-reduction workload (issue 12 part 5): an HDF5 dataset (~2 GB by default)
read with ``da.from_array``, normalised with ``map_blocks``, reduced per block, turned into
delayed objects with ``to_delayed`` and combined by a late step. Process A computes it with
``cached_compute`` (cold cache); process B, fresh, after the late step was edited, computes
it again with ``cached_compute``; process C recomputes B's version with plain
``dask.compute``. Each in its own interpreter, like sessions on different days.

Ratios: B against C (the point of the cache: lower is better, target <= 0.25) and A against
C (separate processes, each its first run: no target). The cold cost is judged in process
D: ``--repeat`` interleaved pairs of plain ``dask.compute`` and a cold ``cached_compute``
(default ``auto`` policy, a new namespace each) of A's workload, after one untimed plain
run; the ratio of the medians, target <= 1.10 (issue 24). The HDF5 file is read from the
page cache in all of them (it was just written): C is a fast recompute.

    python bench/seed_reduction.py [--gb 2] [--repeat 5] [--smoke]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

COLUMNS = 1000
BLOCK_ROWS = 12_500  # 100 MB blocks of float64


def normalise(block: np.ndarray) -> np.ndarray:
    return (block - block.mean(axis=0)) / (block.std(axis=0) + 1e-9)


def block_stats(block: np.ndarray) -> np.ndarray:
    """Per block: column minimum, maximum and mean absolute value."""
    return np.stack([block.min(axis=0), block.max(axis=0), np.abs(block).mean(axis=0)])


def late_step_v1(parts: list) -> dict:
    stats = np.concatenate(parts)
    return {"min": float(stats[0::3].min()), "max": float(stats[1::3].max())}


def late_step_v2(parts: list) -> dict:  # the edit: one more figure
    stats = np.concatenate(parts)
    return {"min": float(stats[0::3].min()), "max": float(stats[1::3].max()),
            "mean_abs": float(stats[2::3].mean())}


def workload(path: str, version: int):
    import dask
    import dask.array as da
    import h5py

    dataset = h5py.File(path, "r")["data"]
    x = da.from_array(dataset, chunks=(BLOCK_ROWS, COLUMNS), lock=True)
    reduced = x.map_blocks(normalise, dtype="f8").map_blocks(
        block_stats, chunks=((3,) * x.numblocks[0], (COLUMNS,)), dtype="f8")
    parts = list(reduced.to_delayed().ravel())
    late = late_step_v1 if version == 1 else late_step_v2
    return dask.delayed(late, pure=True)(parts)


def cold_pairs(path: str, url: str, pairs: int) -> dict:
    """Process D: interleaved plain and cold cached runs of A's workload."""
    import statistics
    import uuid

    import dask

    from client_lib import cached_compute, last_report

    dask.compute(workload(path, 1), scheduler="threads")  # imports, page cache
    plain, cold, stored = [], [], []
    for _ in range(pairs):
        start = time.perf_counter()
        dask.compute(workload(path, 1), scheduler="threads")
        plain.append(time.perf_counter() - start)
        start = time.perf_counter()
        cached_compute(workload(path, 1), cache=url, namespace=uuid.uuid4().hex,
                       scheduler="threads")
        cold.append(time.perf_counter() - start)
        stored.append(last_report().stored)
    return {"plain": plain, "cold": cold, "stored": stored,
            "ratio": statistics.median(cold) / statistics.median(plain)}


def child(mode: str, path: str, url: str, pairs: str = "1") -> None:
    """One session: ``a`` (v1, cached), ``b`` (v2, cached), ``c`` (v2, plain) or ``d``
    (:func:`cold_pairs`)."""
    import dask
    import dask.array  # noqa: F401  (imports are not part of the figure)
    import h5py  # noqa: F401

    from client_lib import cached_compute, last_report

    if mode == "d":
        print(json.dumps(cold_pairs(path, url, int(pairs))))
        return
    start = time.perf_counter()
    value = workload(path, 1 if mode == "a" else 2)
    if mode == "c":
        (result,) = dask.compute(value, scheduler="threads")
        report = {}
    else:
        (result,) = cached_compute(value, cache=url, scheduler="threads")
        r = last_report()
        report = {"tasks": r.tasks, "loaded": r.loaded, "computed": r.computed,
                  "culled": r.culled, "stored": r.stored, "loaded_labels": sorted(
                      {str(k[0] if isinstance(k, tuple) else k).rsplit("-", 1)[0]
                       for k in r.loaded_keys})}
    print(json.dumps({"seconds": time.perf_counter() - start, "result": result, **report}))


def write_dataset(path: Path, gb: float) -> int:
    import h5py

    rows = max(BLOCK_ROWS // 50, int(gb * 1e9) // (8 * COLUMNS))
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        data = f.create_dataset("data", shape=(rows, COLUMNS), dtype="f8")
        for start in range(0, rows, BLOCK_ROWS):
            stop = min(rows, start + BLOCK_ROWS)
            data[start:stop] = rng.standard_normal((stop - start, COLUMNS)) * 3 + 1
    return rows


def main() -> None:
    from _harness import Ratio, cache_server, finish, parse_args, run_python

    args = parse_args(__doc__.split("\n\n")[0], repeat=5, extra=lambda p: p.add_argument(
        "--gb", type=float, default=2.0, help="size of the HDF5 dataset in GB"))
    gb = 0.02 if args.smoke else args.gb
    with tempfile.TemporaryDirectory(prefix="rc-bench-seed-", dir=os.getcwd()) as tmp:
        path = Path(tmp) / "seed.h5"
        rows = write_dataset(path, gb)
        print(f"dataset {rows} x {COLUMNS} float64 ({rows * COLUMNS * 8 / 1e9:.2f} GB), "
              f"{-(-rows // BLOCK_ROWS)} blocks")
        with cache_server(data_dir=tmp) as server:
            runs = {}
            for mode in ("a", "b", "c"):
                out, wall = run_python(__file__, "--child", mode, str(path), server.url)
                out["wall_with_start"] = wall
                runs[mode] = out
                print(f"{mode}: {out['seconds']:.2f} s in the process ({wall:.2f} s with "
                      f"start-up) " + ", ".join(f"{k} {out[k]}" for k in (
                          "tasks", "loaded", "computed", "culled", "stored") if k in out))
            runs["d"], _ = run_python(__file__, "--child", "d", str(path), server.url,
                                      str(args.repeat))
            d = runs["d"]
            print(f"d: {len(d['plain'])} interleaved pairs, plain {min(d['plain']):.2f}-"
                  f"{max(d['plain']):.2f} s, cold cached {min(d['cold']):.2f}-"
                  f"{max(d['cold']):.2f} s, stored {d['stored']}")
            print(f"B loaded: {', '.join(runs['b']['loaded_labels'])}")
            if runs["b"]["result"] != runs["c"]["result"]:
                raise RuntimeError("B's cached result differs from plain dask.compute")
    ratios = [
        Ratio("seed_b_edited_vs_plain", runs["b"]["seconds"] / runs["c"]["seconds"], 0.25),
        Ratio("seed_a_cold_vs_plain", runs["a"]["seconds"] / runs["c"]["seconds"], None),
        Ratio("seed_cold_pairs_vs_plain", runs["d"]["ratio"], 1.10),
    ]
    finish("seed_reduction", ratios, args, gb=gb, rows=rows, runs=runs)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        child(*sys.argv[2:6])
    else:
        main()
