"""Scenario modules for ``test_handles_and_side_effects.py`` (issue 10, items 1, 2, 13,
16 and 18), run by :mod:`tests.correctness._scenario` in fresh processes.

Each is the source of a module with ``run(compute, param)``: what a user does and then
looks at. Test-side only: nothing here imports client_lib.
"""

from __future__ import annotations

__all__ = ["BAG_SHUFFLE", "IMPURE", "OPEN_FILES", "WARNINGS", "WRITERS"]

# 1. A bag's disk shuffle: partd holds the groups in a fresh temporary directory.
BAG_SHUFFLE = '''\
import dask.bag as db


def key(x):
    return x % 3


def run(compute, start):
    bag = db.from_sequence(range(start, start + 12), npartitions=3)
    (groups,) = compute(bag.groupby(key, shuffle="disk"))
    return sorted((k, sorted(v)) for k, v in groups)
'''

# 2. Tasks that exist for their side effect: each writer writes below ``out/`` (emptied
# first) from a source that has cacheable tasks of its own, and returns what it wrote.
WRITERS = '''\
import glob
import os
import shutil

import dask
import dask.array as da
import dask.bag as db
import dask.dataframe as dd
import numpy as np
import pandas as pd
import zarr

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")


def frame():
    pdf = pd.DataFrame({"a": np.arange(12), "b": np.arange(12.0) / 4})
    ddf = dd.from_pandas(pdf, npartitions=3)
    return ddf.assign(c=ddf.a * 2)


def source():
    return da.arange(20.0, chunks=5) * 3 + 1


def texts(pattern):
    found = {}
    for path in sorted(glob.glob(os.path.join(OUT, pattern))):
        with open(path) as f:
            found[os.path.basename(path)] = f.read()
    return found


def store_numpy(compute):
    target = np.zeros(20)
    compute(da.store(source(), target, lock=False, compute=False))
    return target


def to_zarr(compute):
    path = os.path.join(OUT, "x.zarr")
    compute(da.to_zarr(source(), path, compute=False, overwrite=True))
    return zarr.open_array(path, mode="r")[...]


def to_parquet(compute):
    path = os.path.join(OUT, "t.parquet")
    compute(frame().to_parquet(path, compute=False))
    return pd.read_parquet(path).sort_values("a").reset_index(drop=True)


def to_csv(compute):
    compute(*frame().to_csv(os.path.join(OUT, "t-*.csv"), compute=False))
    return texts("t-*.csv")


def to_json(compute):
    compute(*frame().to_json(os.path.join(OUT, "json"), compute=False))
    return texts("json/*")


def to_hdf(compute):
    path = os.path.join(OUT, "t.h5")
    compute(frame().to_hdf(path, "/df", compute=False))
    return pd.read_hdf(path, "/df").sort_values("a")


def to_textfiles(compute):
    bag = db.from_sequence(["a", "b", "c", "d"], npartitions=2).map(str.upper)
    compute(*bag.to_textfiles(os.path.join(OUT, "t-*.txt"), compute=False))
    return texts("t-*.txt")


def save(x, path):  # a user's own writer: returns nothing
    np.save(path, x)


def user_writer(compute):
    path = os.path.join(OUT, "x.npy")
    compute(dask.delayed(save, pure=True)(source().sum(axis=0, keepdims=True), path))
    return np.load(path)


WRITERS = {f.__name__: f for f in (store_numpy, to_zarr, to_parquet, to_csv, to_json,
                                    to_hdf, to_textfiles, user_writer)}


def run(compute, names):
    seen = {}
    for name in names:
        shutil.rmtree(OUT, ignore_errors=True)
        os.makedirs(OUT)
        try:
            seen[name] = WRITERS[name](compute)
        except Exception as exc:  # e.g. nothing was written: reading it back fails
            seen[name] = f"{type(exc).__name__}: {exc}"
    return seen
'''

# 13. Well-known impure callables, a user's own listed in result-cache.volatile-functions,
# and a seeded generator's method (volatile too: its draws advance it, issue 27).
IMPURE = '''\
import datetime
import os
import random
import secrets
import time
import uuid

import dask
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CLOCK = os.path.join(HERE, "clock.txt")

CALLS = {
    "time.time": (time.time, ()),
    "time.time_ns": (time.time_ns, ()),
    "time.perf_counter": (time.perf_counter, ()),
    "time.monotonic": (time.monotonic, ()),
    "datetime.now": (datetime.datetime.now, ()),
    "datetime.utcnow": (datetime.datetime.utcnow, ()),
    "datetime.today": (datetime.datetime.today, ()),
    "date.today": (datetime.date.today, ()),
    "uuid.uuid1": (uuid.uuid1, ()),
    "uuid.uuid4": (uuid.uuid4, ()),
    "random.random": (random.random, ()),
    "random.randint": (random.randint, (0, 10**12)),
    "secrets.token_hex": (secrets.token_hex, ()),
    "os.urandom": (os.urandom, (16,)),
    "os.getpid": (os.getpid, ()),
    "np.random.random": (np.random.random, ()),
    "np.random.rand": (np.random.rand, (3,)),
    "np.random.randint": (np.random.randint, (0, 10**9)),
}


def read_clock():
    with open(CLOCK) as f:
        return f.read()


def run(compute, _):
    tasks = {name: dask.delayed(func, pure=False)(*args, dask_key_name=name)
             for name, (func, args) in CALLS.items()}
    tasks["listed"] = dask.delayed(read_clock, pure=True)(dask_key_name="listed")
    tasks["seeded"] = dask.delayed(np.random.default_rng(5).random, pure=True)(
        3, dask_key_name="seeded")
    (values,) = compute(tasks)
    return values
'''

# 16. A task that returns an open file (Python's own ``open`` and a user's function).
OPEN_FILES = '''\
import os

import dask

HERE = os.path.dirname(os.path.abspath(__file__))
PATH = os.path.join(HERE, "notes.txt")


def opener(path):
    return open(path)


def run(compute, _):
    files = compute(dask.delayed(open, pure=True)(PATH),
                    dask.delayed(opener, pure=True)(PATH))
    seen = []
    for f in files:
        seen.append((type(f).__module__ + "." + type(f).__qualname__, f.read()))
        f.close()
    return seen
'''

# 18. numpy warns inside tasks; what the user sees must not depend on the cache.
WARNINGS = '''\
import warnings

import dask.array as da
import numpy as np


def exprs():
    cube = np.arange(1320, dtype=float).reshape(10, 11, 12)
    return {
        "average": da.average(da.ones(4, chunks=2), weights=da.zeros(4, chunks=2)),
        "cumprod": da.cumprod(da.from_array(cube, chunks=(4, 5, 6)), axis=None,
                              method="blelloch"),
    }


def run(compute, _):
    seen = {}
    for name, x in exprs().items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            (value,) = compute(x)
        raised = sorted({(w.category.__name__, str(w.message)) for w in caught
                         if "client_lib" not in w.filename})
        seen[name] = (value, raised)
    return seen
'''
