"""The ``auto`` policy keeps what branches reuse (client_lib/policy/modes.py): every link of
a chain that pays is stored, within the run's byte bound (client_lib/policy/budget.py); and
storing sits off the critical path, in a bounded write-behind
(client_lib/execution/store_queue.py). Through ``cached_compute`` against a real server; no
timing asserts (sleeps only make tasks cost at least what the policy needs to see)."""

from __future__ import annotations

import os
import time
import uuid

import dask
import httpx
import numpy as np
import pytest

from client_lib import cached_compute, last_report
from tests.client._corrupting_proxy import slow_store_proxy


def step(x: np.ndarray, i: int) -> np.ndarray:
    time.sleep(0.03)
    return x + i


def start() -> np.ndarray:
    time.sleep(0.03)
    return np.arange(100, dtype="float64")


def last_a(x: np.ndarray) -> float:
    return float(x.sum())


def _chain(n: int):
    x = dask.delayed(start, pure=True)()
    for i in range(n):
        x = dask.delayed(step, pure=True)(x, i)
    return x


def test_every_link_of_a_chain_that_pays_is_stored(cache_server, capsys):
    ns = uuid.uuid4().hex
    (a,) = cached_compute(dask.delayed(last_a, pure=True)(_chain(6)), cache=cache_server.url,
                          namespace=ns, scheduler="threads", explain=True)
    report = last_report()
    assert report.store_candidates == 8 and report.stored == 8  # start, 6 steps, output
    assert a == float((np.arange(100) + 15).sum())
    assert report.functions["step"] == {"stored": [6, report.functions["step"]["stored"][1]]}
    out = capsys.readouterr().out
    assert "step: stored 6 (" in out and "store wait" in out

    # A branch leaving the chain in the middle loads the link it leaves from.
    cached_compute(dask.delayed(last_a, pure=True)(dask.delayed(step, pure=True)(
        _chain(3), 99)), cache=cache_server.url, namespace=ns, scheduler="threads")
    report = last_report()
    assert (report.loaded, report.computed) == (1, 2)


def slow_part(i: int) -> np.ndarray:
    time.sleep(0.1)
    return np.full(512, float(i))


def total(*parts: np.ndarray) -> float:
    return float(sum(p.sum() for p in parts))


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["threads", "sync"])
def test_intermediates_beyond_the_byte_bound_are_not_stored(cache_server, scheduler):
    """16 results that each pay back (inputs of the run: what it read) against a bound of
    half the bytes it read: about half are stored, first come, and the report says so."""
    ns = uuid.uuid4().hex
    parts = [dask.delayed(slow_part, pure=True)(i) for i in range(16)]
    before = httpx.get(f"{cache_server.url}/v1/stats").json()["stores"]
    with dask.config.set({"result-cache.auto.max-run-bytes": 0.5,
                          "result-cache.auto.min-run-bytes": 0}):
        (value,) = cached_compute(dask.delayed(total, pure=True)(*parts),
                                  cache=cache_server.url, namespace=ns, scheduler=scheduler)
    assert value == 512 * sum(range(16))
    report = last_report()
    admitted, allowed = report.run_bytes
    intermediates = report.stored - 1  # the output is stored outside the bound
    assert 6 <= intermediates <= 9 and intermediates + report.over_budget == 16, (
        report.functions)
    assert admitted <= allowed and admitted == intermediates * 512 * 8 + 0
    assert report.functions["slow_part"]["over byte bound"][0] == report.over_budget
    stores = httpx.get(f"{cache_server.url}/v1/stats").json()["stores"]
    assert stores - before == report.stored
    assert f"{report.over_budget} over the run's byte bound" in str(report)


def slow_ones(n: int) -> np.ndarray:
    time.sleep(0.2)
    return np.ones(n)


def test_over_bound_decisions_say_so(cache_server):
    """A large intermediate that pays but does not fit: the report says why."""
    ns = uuid.uuid4().hex
    big = dask.delayed(slow_ones, pure=True)(2**18)
    with dask.config.set({"result-cache.auto.max-run-bytes": 0.0,
                          "result-cache.auto.min-run-bytes": 0}):
        cached_compute(dask.delayed(np.sum, pure=True)(big), cache=cache_server.url,
                       namespace=ns, scheduler="threads")
    report = last_report()
    (line,) = [d for d in report.store_decisions if "2.0 MiB" in d]
    assert ": not stored: over the run's byte bound: the run's intermediates 0.0 MiB" in line
    assert report.over_budget == 1 and report.stored == 1  # the output


def block(i: int) -> np.ndarray:
    # Well above a 1.5 MiB load at any speed this process learned in earlier tests (at
    # 0.03 s, loads learned at 47 MB/s on a busy machine left every block unstored).
    time.sleep(0.1)
    return np.full(3 * 2**16, float(i))  # 1.5 MiB


@pytest.mark.slow
def test_the_write_behind_drops_what_its_buffer_cannot_hold(cache_server):
    """12 results of 1.5 MiB (4.5x a 4 MiB buffer) against a server whose every store
    takes 0.5 s: the run finishes, the buffer never held more than its bound, what it
    dropped is counted, what it kept is stored and loads."""
    ns = uuid.uuid4().hex
    with slow_store_proxy(cache_server.url, 0.5) as url, dask.config.set(
            {"result-cache.store-buffer": "4 MiB"}):
        parts = [dask.delayed(block, pure=True)(i) for i in range(12)]
        (value,) = cached_compute(dask.delayed(total, pure=True)(*parts), cache=url,
                                  namespace=ns, scheduler="threads", explain=True)
    assert value == 3 * 2**16 * sum(range(12))
    report = last_report()
    assert 0 < report.buffer_peak <= 4 * 2**20
    assert report.dropped >= 6 and report.stored + report.dropped == 13
    assert report.functions["block"]["buffer full"][0] == report.dropped
    assert "dropped (store buffer full)" in str(report)
    parts = [dask.delayed(block, pure=True)(i) for i in range(12)]
    cached_compute(dask.delayed(total, pure=True)(*parts), cache=cache_server.url,
                   namespace=ns, scheduler="threads")
    assert last_report().loaded == 1  # the output: its inputs are culled


@pytest.mark.slow
def test_a_failing_server_never_fails_the_run(cache_server):
    """Every store answered 503: the run returns its results, stores nothing, says so
    (warned once)."""
    ns = uuid.uuid4().hex
    with slow_store_proxy(cache_server.url, 0.0, status=503) as url:
        parts = [dask.delayed(block, pure=True)(i) for i in range(4)]
        (value,) = cached_compute(dask.delayed(total, pure=True)(*parts), cache=url,
                                  namespace=ns, scheduler="threads")
    assert value == 3 * 2**16 * sum(range(4))
    report = last_report()
    assert report.stored == 0 and report.functions["block"]["store failed"][0] >= 1
    assert report.fallback.startswith("cache server failed during the run, later stores "
                                      "skipped")  # one failure stops its stores


def big_block(i: int) -> np.ndarray:
    time.sleep(0.3)  # more than a default load of 16 MiB
    return np.full(2**21, float(i))  # 16 MiB


@pytest.mark.slow
def test_memory_pressure_on_a_worker_drops_pending_stores(cache_server):
    """A worker of 500 MB whose stores are held 1 s each: its queued copies would take it
    past Dask's memory target, so stores are dropped (counted as memory pressure) before
    that, and the run finishes on the worker it started with."""
    from distributed import Client, LocalCluster

    ns = uuid.uuid4().hex
    with slow_store_proxy(cache_server.url, 1.0) as url, LocalCluster(
            n_workers=1, threads_per_worker=2, memory_limit="500MB",
            dashboard_address=":0") as cluster, Client(cluster) as client:
        pid = client.run(os.getpid)
        parts = [dask.delayed(big_block, pure=True)(i) for i in range(8)]
        (value,) = cached_compute(dask.delayed(total, pure=True)(*parts), cache=url,
                                  namespace=ns, scheduler=client)
        assert client.run(os.getpid) == pid  # never restarted by its nanny
    assert value == 2**21 * sum(range(8))
    outcomes = last_report().functions["big_block"]
    assert outcomes.get("memory pressure", [0])[0] >= 1, outcomes
    assert sum(n for n, _ in outcomes.values()) == 8, outcomes
