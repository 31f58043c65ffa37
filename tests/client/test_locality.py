"""Loads and stores are scheduled like the tasks they stand for (issue 18): on a
``LocalCluster`` with one worker that declares a ``GPU`` resource, a task annotated with
``resources``, ``workers``, ``allow_other_workers``, ``priority`` and ``retries`` keeps all
of them when it runs as a store (cold) and as a load (warm), and both run on the worker
that has the resource, also for array chunks whose annotations Dask's optimisation drops.
docs/design/rewrite-and-policy.md, The rewrite."""

from __future__ import annotations

import copy
import uuid
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster, get_worker
from distributed.diagnostics.plugin import SchedulerPlugin

from client_lib import cached_compute, last_report

pytestmark = pytest.mark.slow


class Placement(SchedulerPlugin):
    """What the scheduler knew about each task when a worker started it."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.seen: dict[str, dict[str, Any]] = {}

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish != "processing":
            return
        ts = self.scheduler.tasks[key]
        name = key if isinstance(key, str) else key[0]
        # Without the per-submission suffix (client_lib/plan/schedulers.py); chunks by name
        # and index.
        name = name.rpartition("-rc")[0] or name
        self.seen[name if isinstance(key, str) else (name, *key[1:])] = {
            "func": getattr(getattr(ts.run_spec, "func", None), "__name__", None),
            "worker": ts.processing_on.address,
            "resources": dict(ts.resource_restrictions or {}),
            "workers": set(ts.worker_restrictions or ()),
            "loose": ts.loose_restrictions,
            "priority": ts.priority[0] if ts.priority else None,
            "retries": ts.retries,
        }


@pytest.fixture(scope="module")
def gpu_cluster():
    """Two in-process workers; only ``gpu`` declares ``GPU: 1``."""
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster:
        spec = copy.deepcopy(next(iter(cluster.new_worker_spec().values())))
        spec["options"]["resources"] = {"GPU": 1}
        cluster.worker_spec["gpu"] = spec
        cluster.sync(cluster._correct_state)
        with Client(cluster) as client:
            client.wait_for_workers(2)
            gpu = next(a for a, w in client.scheduler_info()["workers"].items()
                       if w["resources"].get("GPU"))
            yield cluster, client, gpu


def where(x: int) -> tuple[int, str]:
    return x * 2, get_worker().address


def _run(cluster, client, collection, url: str, ns: str) -> tuple[Any, Placement]:
    plugin = Placement(cluster.scheduler)
    cluster.scheduler.add_plugin(plugin, name="placement")
    try:
        (value,) = cached_compute(collection, cache=url, namespace=ns, scheduler=client)
    finally:
        cluster.scheduler.remove_plugin(name="placement")
    return value, plugin


def test_resources_and_scheduling_annotations_are_kept_on_stores_and_loads(
        gpu_cluster, cache_server):
    cluster, client, gpu = gpu_cluster
    ns = uuid.uuid4().hex
    with dask.annotate(resources={"GPU": 1}, workers=[gpu], allow_other_workers=True,
                       priority=7, retries=2):
        task = dask.delayed(where, pure=True)(21, dask_key_name="on-gpu")
    cold, stored = _run(cluster, client, task, cache_server.url, ns)
    warm, loaded = _run(cluster, client, task, cache_server.url, ns)
    assert last_report().loaded == 1
    assert cold == warm == (42, gpu)  # the load returns what the store saw: ran on gpu
    assert stored.seen["on-gpu"]["func"] == "run_and_store"
    assert loaded.seen["on-gpu"]["func"] == "load_result"
    for run in (stored, loaded):
        placed = run.seen["on-gpu"]
        assert placed["worker"] == gpu
        assert placed["resources"] == {"GPU": 1}
        assert placed["workers"] == {gpu} and placed["loose"] is True
        assert placed["priority"] == -7  # the scheduler stores -priority, lowest first
        assert placed["retries"] == 2


def _annotated_chunks():
    with dask.annotate(resources={"GPU": 1}):
        return da.from_array(np.arange(64.0).reshape(8, 8), chunks=4) + 1


@pytest.mark.parametrize("optimize_graph", [True, False])
def test_array_chunks_load_where_their_resources_are(gpu_cluster, cache_server,
                                                     optimize_graph):
    """Dask's optimisation drops the annotations of array layers (below): cached_compute
    puts them back by task hash (client_lib/plan/annotations.py)."""
    cluster, client, gpu = gpu_cluster
    ns = uuid.uuid4().hex
    x = _annotated_chunks()
    (cold,) = cached_compute(x.sum(axis=0), cache=cache_server.url, namespace=ns,
                             policy="all", scheduler=client, optimize_graph=optimize_graph)
    # A new expression over the same chunks: loads of (x + 1)'s chunks, not of the sum.
    plugin = Placement(cluster.scheduler)
    cluster.scheduler.add_plugin(plugin, name="placement-chunks")
    try:
        (value,) = cached_compute(x.max(axis=1), cache=cache_server.url, namespace=ns,
                                  scheduler=client, optimize_graph=optimize_graph)
    finally:
        cluster.scheduler.remove_plugin(name="placement-chunks")
    expected = np.arange(64.0).reshape(8, 8) + 1
    np.testing.assert_array_equal(cold, expected.sum(axis=0))
    np.testing.assert_array_equal(value, expected.max(axis=1))
    loads = [p for p in plugin.seen.values() if p["func"] == "load_result"]
    assert len(loads) == 4  # the four chunks of x + 1
    assert all(p["resources"] == {"GPU": 1} and p["worker"] == gpu for p in loads)


@pytest.mark.xfail(strict=True, reason="upstream: Dask's graph optimisation (blockwise "
                   "fusion) drops dask.annotate annotations of arrays, for dask.compute too")
def test_dask_keeps_array_annotations_through_optimisation(gpu_cluster):
    cluster, client, _ = gpu_cluster
    plugin = Placement(cluster.scheduler)
    cluster.scheduler.add_plugin(plugin, name="placement-dask")
    try:
        dask.compute(_annotated_chunks().max(axis=1), scheduler=client)
    finally:
        cluster.scheduler.remove_plugin(name="placement-dask")
    chunk_tasks = [p for name, p in plugin.seen.items() if isinstance(name, tuple)]
    assert chunk_tasks and all(p["resources"] == {"GPU": 1} for p in chunk_tasks)
