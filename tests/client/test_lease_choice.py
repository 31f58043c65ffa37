"""Which tasks a run leases (docs/architecture.md, Leases): those whose function took more
than one load's latency the last times it ran in this process, and those never measured
here; a cheap task costs no lease. In-flight deduplication of expensive tasks still works
once their cost is known."""

from __future__ import annotations

import threading
import time
import uuid

import dask
import httpx

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
