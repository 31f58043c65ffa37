"""The raw-disk baseline of every throughput benchmark (issue 25): the best this machine does
with the same array, in the same process and the same run.

- **Store:** ``np.save`` of the array into a file beside the server's data directory, then
  ``fsync`` (what a durable store costs at the least).
- **Load:** a *hot* ``np.load`` of that file into a fresh array: one untimed load first
  (the file in the page cache, and the result's memory touched once), then the timed ones,
  each into a new array (as every load of the cache builds one).

Why the warm-up matters on these machines: the first touch of memory the process never
used costs 3-4 CPU-seconds per GiB (the hypervisor backs guest pages lazily), and a read
after other work may find the page cache evicted. A baseline that pays either runs at
0.7 GB/s instead of 5-7 GB/s and makes every ratio against it look met; the service's
figures are taken after the same warm-up (:func:`hot_seconds`).

The shared disk's speed also swings (0.6-2.5 GB/s for ``np.save`` + fsync within minutes),
so benchmarks alternate: :meth:`RawDisk.save` right before each timed store,
:meth:`RawDisk.load` right before each timed load, each ratio a ratio of medians of
neighbours.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DiskBaseline", "RawDisk", "disk_baseline", "hot_seconds", "timed"]


@dataclass
class DiskBaseline:
    """Median seconds of ``np.save`` + fsync (``save``) and of a hot ``np.load``
    (``load``) of one array; ``runs`` holds every timing."""

    nbytes: int
    save: float
    load: float
    runs: dict[str, list[float]] = field(default_factory=dict)

    def gb_per_s(self, seconds: float) -> float:
        return self.nbytes / 1e9 / seconds

    def line(self) -> str:
        return (f"np.save+fsync {self.gb_per_s(self.save):.2f} GB/s, "
                f"hot np.load {self.gb_per_s(self.load):.2f} GB/s")

    def to_json(self) -> dict[str, Any]:
        return {"nbytes": self.nbytes, "seconds": {"save": self.save, "load": self.load},
                "gb_per_s": {"save": self.gb_per_s(self.save),
                             "load": self.gb_per_s(self.load)},
                "runs": self.runs}


def timed(run: Callable[[], Any]) -> float:
    """Wall seconds of one ``run()``; its result is dropped before this returns."""
    start = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - start
    del result
    return seconds


def hot_seconds(run: Callable[[], Any], repeat: int) -> tuple[float, list[float]]:
    """Median wall seconds of ``run()`` over ``repeat`` runs after one untimed run (page
    cache filled, memory touched, imports and connections made)."""
    timed(run)
    times = [timed(run) for _ in range(repeat)]
    return statistics.median(times), times


def save_fsync(path: Path, value: np.ndarray) -> None:
    """``np.save`` then ``fsync``: the file is durable when this returns."""
    with open(path, "wb") as f:
        np.save(f, value)
        f.flush()
        os.fsync(f.fileno())


class RawDisk:
    """The baseline taken one run at a time, beside the service's runs: :meth:`save`
    (``np.save`` + fsync of ``value``, the file kept for the loads) and :meth:`load` (a
    hot ``np.load``; the first call warms up untimed). :meth:`baseline` sums them up;
    :meth:`close` removes the file."""

    def __init__(self, value: np.ndarray, directory: str | os.PathLike[str]) -> None:
        self.value = value
        self.path = Path(directory) / f"baseline-{os.getpid()}.npy"
        self.runs: dict[str, list[float]] = {"save": [], "load": []}
        self._warm = False
        self.path.unlink(missing_ok=True)
        save_fsync(self.path, value)  # warm-up: the file system, the memory

    def save(self) -> float:
        self.path.unlink(missing_ok=True)
        seconds = timed(lambda: save_fsync(self.path, self.value))
        self.runs["save"].append(seconds)
        return seconds

    def load(self) -> float:
        if not self._warm:
            timed(lambda: np.load(self.path))
            self._warm = True
        seconds = timed(lambda: np.load(self.path))
        self.runs["load"].append(seconds)
        return seconds

    def baseline(self) -> DiskBaseline:
        return DiskBaseline(self.value.nbytes, statistics.median(self.runs["save"]),
                            statistics.median(self.runs["load"]), self.runs)

    def close(self) -> None:
        self.path.unlink(missing_ok=True)


def disk_baseline(value: np.ndarray, directory: str | os.PathLike[str],
                  repeat: int) -> DiskBaseline:
    """Measure the baseline for ``value`` in ``directory`` (on the disk the server's data
    directory is on); the file is removed afterwards."""
    path = Path(directory) / f"baseline-{os.getpid()}.npy"
    try:
        saves = []
        for i in range(repeat + 1):  # the first save is a warm-up (file system, memory)
            path.unlink(missing_ok=True)
            seconds = timed(lambda: save_fsync(path, value))
            if i:
                saves.append(seconds)
        load, loads = hot_seconds(lambda: np.load(path), repeat)
    finally:
        path.unlink(missing_ok=True)
    return DiskBaseline(value.nbytes, statistics.median(saves), load,
                        {"save": saves, "load": loads})
