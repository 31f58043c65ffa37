"""A pytest plugin that runs another project's tests (Dask's) with every ``dask.compute``
going through ``cached_compute``: ``pytest -p tests.oracle.plugin ...``, configured by
the environment (:mod:`tests.oracle.run` sets it):

- ``ORACLE_MODE``: ``dask`` (nothing patched: the baseline) or ``cached``;
- ``ORACLE_URL``: the cache server; ``ORACLE_CAMPAIGN``: the namespace prefix (each test
  computes in a namespace of its own, ``<campaign>/<test id>``, the same in every pass);
- ``ORACLE_POLICY``: what to store (default ``all``);
- ``ORACLE_OUT``: a JSON-lines file: one line per test outcome, and in ``cached`` mode
  one line per computation (the cache report's counts, and the task hashes of what it
  computed and of everything it could have loaded, with their labels).

``dask.base.compute`` and ``dask.compute`` are replaced before the tests are collected,
so ``x.compute()``, ``dask.compute(...)`` and the modules that import ``compute`` later
(``dask.array``, ``dask.dataframe``) all go through the cache; a computation inside
another (``cached_compute`` calling back into Dask) goes to Dask directly. Each test
starts with numpy's and ``random``'s global generators seeded from its id, and
``np.random.default_rng()``, ``da.random.default_rng()`` and ``da.random.RandomState()``
without a seed get one from its id and a count, so a test that draws its data at random
builds the same data in every pass (a different hash in the warm pass then means a hash
that is not stable).
"""

from __future__ import annotations

import json
import os
import random
import threading
import zlib
from collections import Counter
from typing import Any

import pytest

__all__: list[str] = []

_state = threading.local()
_current: dict[str, Any] = {"test": None, "calls": 0, "draws": 0}
_lock = threading.Lock()


def _write(record: dict) -> None:
    path = os.environ.get("ORACLE_OUT")
    if path:
        with _lock, open(path, "a") as f:
            f.write(json.dumps(record, default=str) + "\n")


def _cached_compute(original: Any) -> Any:
    from dask.utils import key_split

    from client_lib import cached_compute, last_report, task_hashes

    url = os.environ["ORACLE_URL"]
    policy = os.environ.get("ORACLE_POLICY", "all")
    campaign = os.environ.get("ORACLE_CAMPAIGN", "oracle")

    def compute(*args: Any, **kwargs: Any) -> Any:
        test = _current["test"]
        if test is None or getattr(_state, "inside", False):
            return original(*args, **kwargs)
        namespace = f"{campaign}/{test}"
        _state.inside = True
        try:
            result = cached_compute(*args, cache=url, namespace=namespace, policy=policy,
                                    **kwargs)
            report = last_report()
            options = {k: kwargs[k] for k in ("traverse", "optimize_graph") if k in kwargs}
            try:
                hashes = task_hashes(*args, namespace=namespace, **options)
            except Exception as exc:  # recorded, never the test's failure
                hashes, problem = {}, f"{type(exc).__name__}: {exc}"
            else:
                problem = None
            computed = set(map(str, report.computed_keys))
            with _lock:
                _current["calls"] += 1
                call = _current["calls"]
            _write({
                "test": test, "call": call, "tasks": report.tasks,
                "cacheable": report.cacheable, "hits": report.hits, "loaded": report.loaded,
                "computed": report.computed, "stored": report.stored,
                "volatile": report.volatile, "fallback": report.fallback,
                "reasons": dict(Counter(report.volatile_reasons).most_common(5)),
                "hashes": {h: key_split(k) for k, h in hashes.items() if h is not None},
                "computed_hashes": sorted(h for k, h in hashes.items()
                                          if h is not None and str(k) in computed),
                "hash_problem": problem,
            })
            return result
        finally:
            _state.inside = False

    compute.__wrapped__ = original
    return compute


def _next_seed() -> int:
    with _lock:
        _current["draws"] += 1
        return zlib.crc32(f"{_current['test']}:{_current['draws']}".encode())


def _seeded(original: Any) -> Any:
    def default_rng(seed: Any = None, *args: Any, **kwargs: Any) -> Any:
        return original(_next_seed() if seed is None else seed, *args, **kwargs)

    default_rng.__wrapped__ = original
    return default_rng


def _seeded_class(original: type) -> type:
    """``da.random.RandomState()`` without a seed seeds itself from the OS (not from
    numpy's global generator): every pass would build other data."""

    class Seeded(original):  # type: ignore[valid-type,misc]
        def __init__(self, seed: Any = None, *args: Any, **kwargs: Any) -> None:
            super().__init__(_next_seed() if seed is None else seed, *args, **kwargs)

    Seeded.__name__, Seeded.__qualname__ = original.__name__, original.__qualname__
    Seeded.__module__ = original.__module__
    return Seeded


def pytest_configure(config: pytest.Config) -> None:
    import dask.array.random
    import numpy as np

    np.random.default_rng = _seeded(np.random.default_rng)
    dask.array.random.default_rng = _seeded(dask.array.random.default_rng)
    dask.array.random.RandomState = _seeded_class(dask.array.random.RandomState)
    if os.environ.get("ORACLE_MODE", "dask") != "cached":
        return
    import dask
    import dask.base

    patched = _cached_compute(dask.base.compute)
    dask.base.compute = patched
    dask.compute = patched


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Any:
    import numpy as np

    seed = zlib.crc32(item.nodeid.encode())
    np.random.seed(seed)
    random.seed(seed)
    _current["test"], _current["calls"], _current["draws"] = item.nodeid, 0, 0
    try:
        yield
    finally:
        _current["test"] = None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    outcome = report.outcome
    if hasattr(report, "wasxfail"):
        outcome = "xfailed" if report.skipped else "xpassed"
    if report.when == "call" or outcome in ("failed", "skipped") or hasattr(report,
                                                                           "wasxfail"):
        _write({"outcome": outcome, "test": report.nodeid, "when": report.when,
                "message": (str(report.longrepr)[-2000:] if report.failed else None)})
