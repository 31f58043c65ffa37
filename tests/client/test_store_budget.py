"""The ``auto`` policy weighs the run (client_lib/policy/budget.py): links of a chain are not
stored when a later step may be, and the intermediates a run stores fit its store budget.
Through ``cached_compute`` against a real server; no timing asserts (sleeps only make
tasks cost at least what the policy needs to see)."""

from __future__ import annotations

import time
import uuid

import dask
import httpx
import numpy as np
import pytest

from client_lib import cached_compute, last_report


def step(x: np.ndarray, i: int) -> np.ndarray:
    time.sleep(0.03)
    return x + i


def start() -> np.ndarray:
    time.sleep(0.03)
    return np.arange(100, dtype="float64")


def last_a(x: np.ndarray) -> float:
    return float(x.sum())


def last_b(x: np.ndarray) -> float:
    return float(x.mean())


def _chain(n: int):
    x = dask.delayed(start, pure=True)()
    for i in range(n):
        x = dask.delayed(step, pure=True)(x, i)
    return x


def test_a_chain_stores_its_last_step_not_every_link(cache_server):
    ns = uuid.uuid4().hex
    chain = _chain(6)  # start -> step x 6 -> last_a (the output)
    (a,) = cached_compute(dask.delayed(last_a, pure=True)(chain), cache=cache_server.url,
                          namespace=ns, scheduler="threads")
    report = last_report()
    assert report.store_candidates == 8 and report.chain_links == 6  # start, steps 0-4
    assert report.stored == 2  # step 5 (the frontier) and the output
    assert "6 links of chains" in str(report)

    # An edited last step loads the frontier; nothing of the chain before it runs.
    (b,) = cached_compute(dask.delayed(last_b, pure=True)(_chain(6)),
                          cache=cache_server.url, namespace=ns, scheduler="threads")
    report = last_report()
    assert (report.loaded, report.computed, report.culled) == (1, 1, 6)
    assert (a, b) == (float((np.arange(100) + 15).sum()), float((np.arange(100) + 15).mean()))

    # Editing a link in the middle recomputes from the start: the price of not storing it.
    cached_compute(dask.delayed(last_a, pure=True)(dask.delayed(step, pure=True)(
        _chain(3), 99)), cache=cache_server.url, namespace=ns, scheduler="threads")
    assert last_report().loaded == 0


def test_a_branch_point_and_what_feeds_an_output_stay_candidates(cache_server):
    """The main example's shape: step_1 -> step_2 -> {3a, 3b}; step_2 is stored (it feeds
    an output), step_1 is a link of the chain going on to step_2."""
    ns = uuid.uuid4().hex
    shared = dask.delayed(step, pure=True)(dask.delayed(start, pure=True)(), 1)
    cached_compute(dask.delayed(last_a, pure=True)(shared), cache=cache_server.url,
                   namespace=ns, scheduler="threads")
    report = last_report()
    assert (report.chain_links, report.stored) == (1, 2)
    shared = dask.delayed(step, pure=True)(dask.delayed(start, pure=True)(), 1)
    both = [dask.delayed(last_a, pure=True)(shared), dask.delayed(last_b, pure=True)(shared)]
    cached_compute(*both, cache=cache_server.url, namespace=ns, scheduler="threads")
    report = last_report()
    # last_a's result and step_2 (for last_b) load; start is culled
    assert (report.loaded, report.computed, report.chain_links) == (2, 1, 0)


def slow_part(i: int) -> np.ndarray:
    time.sleep(0.1)
    return np.full(4, float(i))


def total(*parts: np.ndarray) -> float:
    return float(sum(p.sum() for p in parts))


@pytest.mark.parametrize("scheduler", ["threads", "sync"])
def test_intermediates_beyond_the_store_budget_are_not_stored(cache_server, scheduler):
    """16 results that each pay back (0.1 s against a small load), each priced at 0.05 s
    to store, against a budget of 10% of the run's compute (~1.6 s): about 3 fit."""
    ns = uuid.uuid4().hex
    parts = [dask.delayed(slow_part, pure=True)(i) for i in range(16)]
    before = httpx.get(f"{cache_server.url}/v1/stats").json()["stores"]
    with dask.config.set({"result-cache.auto.store-latency": 0.05,
                          "result-cache.auto.store-budget": 0.1}):
        (value,) = cached_compute(dask.delayed(total, pure=True)(*parts),
                                  cache=cache_server.url, namespace=ns, scheduler=scheduler,
                                  explain=True)
    assert value == 4 * sum(range(16))
    report = last_report()
    spent, allowed = report.store_budget
    intermediates = report.stored - 1  # the output is stored outside the budget
    assert 1 <= intermediates and report.over_budget >= 1
    assert intermediates + report.over_budget == 16 and report.chain_links == 0
    assert spent <= allowed and intermediates * 0.05 <= spent + 1e-9
    assert intermediates <= allowed / 0.05
    stores = httpx.get(f"{cache_server.url}/v1/stats").json()["stores"]
    assert stores - before == report.stored
    assert f"{report.over_budget} over the run's store budget" in str(report)


def slow_ones(n: int) -> np.ndarray:
    time.sleep(0.2)
    return np.ones(n)


def test_over_budget_decisions_say_so(cache_server):
    """A large intermediate that pays but does not fit: the report says why."""
    ns = uuid.uuid4().hex
    big = dask.delayed(slow_ones, pure=True)(2**18)
    with dask.config.set({"result-cache.auto.store-budget": 0.0}):
        cached_compute(dask.delayed(np.sum, pure=True)(big), cache=cache_server.url,
                       namespace=ns, scheduler="threads")
    report = last_report()
    (line,) = [d for d in report.store_decisions if "2.0 MiB" in d]
    assert ": not stored: over the run's store budget: storing it ~" in line
    assert report.over_budget == 1 and report.stored == 1  # the output
