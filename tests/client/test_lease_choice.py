"""Which tasks a run leases and wraps for storing (client_lib/policy/costs.py): leases for those
whose function took more than one load's latency when it last ran in this process, and
those never measured here; in a wide graph, a store wrapper for only a sample of the tasks
no result could be stored for. In-flight deduplication of expensive tasks still works once
their cost is known."""

from __future__ import annotations

import threading
import time
import uuid
import warnings

import dask
import httpx
import pytest

from client_lib import CacheClient, cached_compute, last_report

LATENCY = 0.2  # result-cache.auto.latency in these tests: far from both tasks' costs


def lease_choice_cheap(i: int) -> int:
    return i + 1


def lease_choice_slow(i: int, seconds: float) -> int:
    time.sleep(seconds)
    return i * 10


def graph(seconds: float) -> list:
    return [dask.delayed(lease_choice_cheap)(i) for i in range(20)] + [
        dask.delayed(lease_choice_slow)(2, seconds)]


def test_cheap_tasks_are_leased_until_measured_then_never(cache_server):
    cache = CacheClient(cache_server.url)
    with dask.config.set({"result-cache.auto.latency": LATENCY}):
        first = cached_compute(*graph(0.3), cache=cache, namespace=uuid.uuid4().hex,
                               scheduler="threads")
        report = last_report()
        assert report.leased == 21  # nothing measured yet: everything leased
        assert report.stored == 21  # all outputs
        second = cached_compute(*graph(0.3), cache=cache, namespace=uuid.uuid4().hex,
                                scheduler="threads")
        report = last_report()
    assert first == second == tuple(range(1, 21)) + (20,)
    assert report.leased == 1  # the slow task only; the cheap ones cost no lease
    assert report.stored == 21 and report.computed == 21  # stores are not affected


def test_a_second_run_waits_for_a_known_expensive_task_and_loads_it(cache_server):
    cache = CacheClient(cache_server.url)
    namespace = uuid.uuid4().hex
    results, reports = {}, {}

    def run(name: str) -> None:
        x = dask.delayed(lease_choice_slow)(3, 1.0)
        results[name] = cached_compute(x, cache=cache, namespace=namespace,
                                       scheduler="sync")[0]
        reports[name] = last_report()

    with dask.config.set({"result-cache.auto.latency": LATENCY}):
        # Learn its cost in another namespace first: the runs below lease it because it
        # is known to be expensive, not because it was never measured.
        cached_compute(dask.delayed(lease_choice_slow)(4, 0.3), cache=cache,
                       namespace=uuid.uuid4().hex, scheduler="sync")
        before = httpx.get(f"{cache_server.url}/v1/stats").json()["stores"]
        first = threading.Thread(target=run, args=("a",))
        first.start()
        time.sleep(0.4)  # a holds the lease and computes
        run("b")
        first.join()
    assert results == {"a": 30, "b": 30}
    assert reports["a"].leased == 1 and (reports["a"].computed, reports["a"].loaded) == (1, 0)
    assert reports["b"].waited == 1 and reports["b"].waited_loaded == 1
    assert (reports["b"].computed, reports["b"].loaded) == (0, 1)
    assert httpx.get(f"{cache_server.url}/v1/stats").json()["stores"] == before + 1


def wrap_choice_cheap(i: int) -> int:
    return i * 2


def wrap_choice_step(x: int) -> int:
    time.sleep(0.001)
    return x + 1


def wrap_choice_warns(i: int) -> int:
    warnings.warn("wrap_choice_warns says so", UserWarning, stacklevel=1)
    return i


def wide(func, n: int = 200):
    leaves = [dask.delayed(func)(i) for i in range(n)]
    return dask.delayed(sum)(leaves)


def test_a_wide_graph_of_cheap_tasks_wraps_only_a_sample_once_measured(cache_server):
    cache = CacheClient(cache_server.url)
    with dask.config.set({"result-cache.auto.latency": LATENCY}):
        first = cached_compute(wide(wrap_choice_cheap), cache=cache,
                               namespace=uuid.uuid4().hex, scheduler="threads")[0]
        assert last_report().store_candidates == 201  # never measured: all wrapped
        namespace = uuid.uuid4().hex
        second = cached_compute(wide(wrap_choice_cheap), cache=cache, namespace=namespace,
                                scheduler="threads")[0]
        report = last_report()
        # The first 32 leaves, one in 64 after (64, 128, 192) and the output.
        assert report.store_candidates == 36 and report.stored == 1
        assert report.computed == 201
        third = cached_compute(wide(wrap_choice_cheap), cache=cache, namespace=namespace,
                               scheduler="threads")[0]
        assert last_report().loaded == 1
    assert first == second == third == sum(range(0, 400, 2))


def test_a_chain_of_cheap_steps_stays_wrapped_once_it_costs_more_than_a_load(cache_server):
    """Each step costs ~1 ms, below the latency (20 ms here), but the chain up to step k
    costs k ms: from about step 20 on, its results may be worth storing."""
    cache = CacheClient(cache_server.url)

    def chain():
        x = 0
        for _ in range(60):
            x = dask.delayed(wrap_choice_step)(x)
        return x

    with dask.config.set({"result-cache.auto.latency": 0.02}):
        cached_compute(chain(), cache=cache, namespace=uuid.uuid4().hex, scheduler="sync")
        assert last_report().store_candidates == 60
        assert cached_compute(chain(), cache=cache, namespace=uuid.uuid4().hex,
                              scheduler="sync")[0] == 60
        assert last_report().store_candidates == 60  # every step past 32 is chain > 20 ms


def test_tasks_of_a_function_that_warned_stay_wrapped(cache_server):
    """Their warnings must be recorded to be replayed with what is stored downstream."""
    cache = CacheClient(cache_server.url)
    with dask.config.set({"result-cache.auto.latency": LATENCY}):
        with pytest.warns(UserWarning, match="says so"):
            cached_compute(wide(wrap_choice_warns), cache=cache,
                           namespace=uuid.uuid4().hex, scheduler="threads")
        namespace = uuid.uuid4().hex
        with pytest.warns(UserWarning, match="says so"):
            cached_compute(wide(wrap_choice_warns), cache=cache, namespace=namespace,
                           scheduler="threads")
        assert last_report().store_candidates == 201
        with pytest.warns(UserWarning, match="says so"):  # replayed by the load
            assert cached_compute(wide(wrap_choice_warns), cache=cache,
                                  namespace=namespace, scheduler="threads")[0] == 19900
        assert last_report().loaded == 1
