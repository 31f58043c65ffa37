"""Scenario modules for issue 27 (cases 5 and 7), run by :mod:`tests.correctness._scenario`
in fresh processes. Each is the source of a module with ``run(compute, param)``: what a
user does and then looks at. Test-side only: nothing here imports client_lib.
"""

from __future__ import annotations

__all__ = ["GENERATORS", "PANDAS_OPTIONS", "STORE_TARGETS"]

# 5. Tasks that draw from a random generator advance it: two computations in a row draw
# two different values in plain Dask, on every run. Every generator is made inside
# ``run``, so the cached run and Dask's start from the same state.
GENERATORS = '''\
import random

import dask
import dask.array as da
import numpy as np

RNG = None


def draw(state):
    return state.random_sample(2)


def noisy(x):
    return x + RNG.random()


def twice(compute, make):
    return [compute(make())[0] for _ in range(2)]


def run(compute, _):
    global RNG
    rng = np.random.default_rng(7)
    state = np.random.RandomState(7)
    stdlib = random.Random(7)
    RNG = np.random.default_rng(3)
    choice = da.random.default_rng(5).choice(100, 6, chunks=3)
    pair = compute(dask.delayed(draw, pure=False)(state), dask.delayed(draw, pure=False)(state))
    return {
        "Generator method": twice(compute, lambda: dask.delayed(rng.random)(3)),
        "RandomState argument, pure=False": sorted(p.tolist() for p in pair),
        "random.Random method": twice(compute, lambda: dask.delayed(stdlib.random)()),
        "generator global of the task": twice(compute, lambda: dask.delayed(noisy)(1.0)),
        "BitGenerator in da.random.choice": twice(compute, lambda: choice),
    }
'''

# 7. pandas' options change what pandas code computes: the same task builds a ``str``
# column by default, an ``object`` one under ``future.infer_string=False``, a
# python-backed one under ``mode.string_storage="python"``.
PANDAS_OPTIONS = '''\
import dask
import pandas as pd



def frame():
    return pd.DataFrame({"s": ["a", None, "c"], "t": pd.array(["x", None, "z"])})


def run(compute, options):
    previous = {name: pd.get_option(name) for name in options}
    for name, setting in options.items():
        pd.set_option(name, setting)
    try:
        (value,) = compute(dask.delayed(frame, pure=True)())
    finally:
        for name, setting in previous.items():
            pd.set_option(name, setting)
    return value, [repr(dtype) for dtype in value.dtypes], repr(value.columns.dtype)
'''

# The target a store writes into, made by a task: the store must write into the object
# that task makes, never into a loaded copy (the oracle campaign: Dask's
# test_store_delayed_target).
STORE_TARGETS = '''\
import dask
import dask.array as da
import numpy as np

TARGETS = {}


def make_target(name):
    TARGETS[name] = np.zeros(6)
    return TARGETS[name]


def run(compute, _):
    seen = []
    for scale in (1, 1, 2):  # the same store twice, then another
        TARGETS.clear()
        source = da.arange(6.0, chunks=3) * scale
        compute(da.store(source, dask.delayed(make_target)("t"), lock=False, compute=False))
        seen.append(TARGETS["t"].tolist())
    return seen
'''
