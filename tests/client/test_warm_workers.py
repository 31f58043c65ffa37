"""The warm-up worker plugin (client_lib/plan/schedulers.py, docs/design/transport.md, Warming the
workers) through a real ``LocalCluster``: the first ``cached_compute`` with a client warms
every worker, present or joining later, registering once; a plugin that fails does not fail
the run. A ``LocalCluster`` made after ``client_lib`` is imported preloads
``client_lib.worker``: its workers import and warm the cache as they start."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import dask
import numpy as np
import pytest

from client_lib import cached_compute, last_report
from tests._servers import free_port
from tests.client import _worker_probe

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
    """Workers without the ``client_lib.worker`` preload, so the plugin alone warms them."""
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.worker.preload": []}):
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


#: What the cache's tasks run on a worker (a load, a store, a lease) and httpx's transport.
WORKER_MODULES = ["client_lib.execution.tasks", "client_lib.execution.store",
                  "client_lib.execution.leases", "client_lib.wire.codec", "httpcore"]


def test_a_local_cluster_made_after_import_preloads_and_warms_its_workers(cache_server):
    from distributed import Client, LocalCluster

    url = cache_server.url
    assert "client_lib.worker" in dask.config.get("distributed.worker.preload")
    with dask.config.set({"result-cache.url": url}), \
            LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        # Before any task of ours: every worker imported the cache's worker-side modules...
        loaded = client.run(_worker_probe.loaded, WORKER_MODULES)
        assert len(loaded) == 2
        assert all(all(modules.values()) for modules in loaded.values()), loaded
        # ...and warmed the configured cache's shared client in the background.
        deadline = time.monotonic() + 60
        while True:
            warmed = client.run(_worker_probe.warmed)
            if all(url in (w or {}) for w in warmed.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert all(isinstance(w[url], float) for w in warmed.values()), warmed
        # A run whose cache comes from config stores, then loads, on those workers.
        ns = uuid.uuid4().hex
        for _ in range(2):
            (value,) = cached_compute(_double(np.arange(6.0)), namespace=ns, scheduler=client)
            np.testing.assert_array_equal(value, np.arange(6.0) * 2)
        assert last_report().loaded == 1 and last_report().fallback is None


def test_the_preload_is_added_once_beside_others_unless_config_says_no():
    code = ("import client_lib, dask; "
            "print('client_lib.worker' in dask.config.get('distributed.worker.preload', []))")
    listed = ("import client_lib, dask, distributed; "
              "print(dask.config.get('distributed.worker.preload'))")
    for given, expected in (("mine.setup", "['mine.setup', 'client_lib.worker']"),
                            ('["client_lib.worker"]', "['client_lib.worker']")):
        out = subprocess.run([sys.executable, "-c", listed], capture_output=True, text=True,
                             check=True, env={**os.environ,
                                              "DASK_DISTRIBUTED__WORKER__PRELOAD": given})
        assert out.stdout.strip() == expected, given
    env = {**os.environ, "DASK_RESULT_CACHE__PRELOAD_WORKERS": "false"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env)
    assert out.stdout.strip() == "False"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={k: v for k, v in env.items()
                                          if k != "DASK_RESULT_CACHE__PRELOAD_WORKERS"})
    assert out.stdout.strip() == "True"
