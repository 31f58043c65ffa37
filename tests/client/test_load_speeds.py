"""The load speeds the ``auto`` policy learns (issue 12 part 6): per kind and size class,
from real loads, and the decisions ``explain=True`` prints."""

from __future__ import annotations

import time
import uuid

import dask
import numpy as np
import pytest

from client_lib import cached_compute, last_report
from client_lib.policy.speeds import LOAD_SPEEDS, LoadSpeeds

MIB = 2**20


def test_estimates_by_kind_and_size_class() -> None:
    speeds = LoadSpeeds()
    assert speeds.estimate("ndarray", 100 * MIB) is None  # nothing learned: the default
    speeds.record("ndarray", 100 * MIB, 0.1)
    speeds.record("ndarray", 200 * MIB, 0.3)
    speeds.record("ndarray", 300 * MIB, 0.3)
    seconds, samples = speeds.estimate("ndarray", 1000 * MIB)
    assert samples == 3 and seconds == pytest.approx(1.0)  # median 1 ms per MiB
    assert speeds.estimate("pickle", 100 * MIB) is None  # another kind
    assert speeds.estimate("ndarray", 10 * MIB) is None  # another size class
    speeds.record("pickle", 10, 0.002)
    assert speeds.estimate("pickle", 500) == (0.002, 1)  # small: the time, not per byte


def zeros(n: int) -> np.ndarray:
    return np.zeros(n)  # instant, whatever its size: never worth a load


def slow_zeros(n: int) -> np.ndarray:
    time.sleep(1.0)
    return np.zeros(n) + 1.0


def test_large_results_are_stored_only_when_they_pay_and_explain_says_why(cache_server,
                                                                          capsys):
    LOAD_SPEEDS.clear()
    ns = uuid.uuid4().hex
    n = 4 * MIB  # 32 MiB: ~0.2 s to load at the default 0.15 GB/s
    cheap = dask.delayed(zeros, pure=True)(n, dask_key_name="cheap")
    dear = dask.delayed(slow_zeros, pure=True)(n, dask_key_name="dear")
    cached_compute(cheap, dear, cache=cache_server.url, namespace=ns, explain=True,
                   scheduler="threads")
    report = last_report()
    assert report.stored == 1
    decisions = sorted(report.store_decisions)
    assert decisions[0].startswith("slow_zeros (32.0 MiB): stored: recompute ")
    assert decisions[1].startswith("zeros (32.0 MiB): not stored: recompute ")
    assert all("(default 0.15 GB/s, no ndarray load of this size yet)" in d
               for d in decisions)
    assert "large result zeros (32.0 MiB): not stored" in capsys.readouterr().out

    # The stored one loads back; that load teaches this process its real speed.
    cached_compute(cheap, dear, cache=cache_server.url, namespace=ns, scheduler="threads")
    assert last_report().loaded == 1 and LOAD_SPEEDS.estimate("ndarray", n * 8) is not None
    cached_compute(dask.delayed(zeros, pure=True)(n + 1), cache=cache_server.url,
                   namespace=ns, scheduler="threads")
    (decision,) = last_report().store_decisions
    assert "(learned from 1 recent ndarray load(s))" in decision


def test_a_cheap_large_intermediate_is_explained_too(cache_server):
    """An intermediate cheaper than any load is skipped before its size is measured; an
    array still says why. (Any load costs at least 1 s here: on a loaded machine even
    ``np.zeros`` can take longer than the default 5 ms latency.)"""
    ns = uuid.uuid4().hex
    total = dask.delayed(np.sum, pure=True)(dask.delayed(zeros, pure=True)(2 * MIB))
    with dask.config.set({"result-cache.auto.latency": 1.0}):
        cached_compute(total, cache=cache_server.url, namespace=ns, scheduler="threads")
    (line,) = [d for d in last_report().store_decisions if d.startswith("zeros")]
    assert line.startswith("zeros (16.0 MiB): not stored: recompute ")
    assert line.endswith("s costs less than any load")


@pytest.mark.slow
def test_decisions_of_local_cluster_workers_reach_the_report(cache_server):
    from distributed import Client, LocalCluster

    ns = uuid.uuid4().hex
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        cached_compute(dask.delayed(zeros, pure=True)(2 * MIB), cache=cache_server.url,
                       namespace=ns, scheduler=client)
    (decision,) = last_report().store_decisions
    assert decision.startswith("zeros (16.0 MiB): not stored: recompute ")
