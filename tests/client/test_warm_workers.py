"""The warm-up worker plugin (client_lib/plan/schedulers.py, docs/design/transport.md, Warming the
workers) through a real ``LocalCluster``: the first ``cached_compute`` with a client warms
every worker, present or joining later, registering once; a plugin that fails does not fail
the run."""

from __future__ import annotations

import sys
import time
import uuid

import dask
import numpy as np
import pytest

from client_lib import cached_compute, last_report
from tests._servers import free_port

pytestmark = pytest.mark.slow


@dask.delayed
def _double(x):
    return np.asarray(x) * 2.0


def _warm_state() -> dict:
    """What a worker holds: what the plugin warmed, and whether httpx's transport is in."""
    from client_lib.execution.warm import WARMED

    return {"warmed": dict(WARMED), "httpcore": "httpcore" in sys.modules}


def _warm_plugins(client) -> list[str]:
    names = client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.worker_plugins))
    return [n for n in names if n.startswith("result-cache-warm-")]


def _wait_for(client, done, timeout: float = 60.0) -> dict:
    """Every worker's state once ``done(state)`` holds on all of them (the plugin works in
    the background), or the last states seen."""
    deadline = time.monotonic() + timeout
    while True:
        states = client.run(_warm_state)
        if all(done(s) for s in states.values()) or time.monotonic() > deadline:
            return states
        time.sleep(0.1)


@pytest.fixture
def cluster():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster:
        with Client(cluster) as client:
            yield cluster, client


def test_first_run_warms_every_worker_once_and_joining_workers_too(cache_server, cluster):
    cluster, client = cluster
    url = cache_server.url
    # Fresh worker processes: nothing warmed, httpx's transport not imported yet.
    assert all(s == {"warmed": {}, "httpcore": False}
               for s in client.run(_warm_state).values())
    ns = uuid.uuid4().hex
    (cold,) = cached_compute(_double(np.arange(10.0)), cache=url, namespace=ns,
                             scheduler=client)
    np.testing.assert_array_equal(cold, np.arange(10.0) * 2)
    states = _wait_for(client, lambda s: url in s["warmed"])
    assert len(states) == 2
    for state in states.values():
        assert isinstance(state["warmed"][url], float), state  # seconds, not an error
        assert state["httpcore"]
    assert len(_warm_plugins(client)) == 1

    # Later runs register nothing new: the scheduler holds one plugin, setup ran once.
    for _ in range(2):
        (warm,) = cached_compute(_double(np.arange(10.0)), cache=url, namespace=ns,
                                 scheduler=client)
        np.testing.assert_array_equal(warm, cold)
    assert last_report().loaded == 1
    assert len(_warm_plugins(client)) == 1
    assert client.run(_warm_state) == states

    # A worker that joins later gets the plugin from the scheduler.
    cluster.scale(3)
    client.wait_for_workers(3, timeout=60)
    states = _wait_for(client, lambda s: url in s["warmed"])
    assert len(states) == 3
    assert all(isinstance(s["warmed"].get(url), float) for s in states.values()), states


def test_a_plugin_that_cannot_warm_does_not_fail_the_run(cache_server, cluster):
    _, client = cluster
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.warns(RuntimeWarning, match="unreachable"):
        (value,) = cached_compute(_double(np.arange(4.0)), cache=dead, scheduler=client)
    np.testing.assert_array_equal(value, np.arange(4.0) * 2)
    states = _wait_for(client, lambda s: dead in s["warmed"])
    # The workers tried, failed, and said why; the run computed without the cache.
    assert all("CacheUnavailable" in s["warmed"].get(dead, "") for s in states.values()), \
        states
    assert "unreachable" in last_report().fallback
    # A cache that answers, on the same client, is warmed by a plugin of its own.
    (value,) = cached_compute(_double(np.arange(4.0)), cache=cache_server.url,
                              namespace=uuid.uuid4().hex, scheduler=client)
    np.testing.assert_array_equal(value, np.arange(4.0) * 2)
    states = _wait_for(client, lambda s: cache_server.url in s["warmed"])
    assert all(isinstance(s["warmed"].get(cache_server.url), float)
               for s in states.values()), states
    assert len(_warm_plugins(client)) == 2
