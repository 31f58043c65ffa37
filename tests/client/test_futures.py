"""``CachedClient`` and ``cached_persist`` end to end: a real ``LocalCluster``, a real cache
server, and fresh processes for the cross-session cases."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import dask
import dask.array as da
import httpx
import numpy as np
import pytest

from client_lib import CachedClient, cached_compute, cached_persist, last_report

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def stats(server) -> dict:
    return httpx.get(f"{server.url}/v1/stats").json()


@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster:
        yield cluster


@pytest.fixture
def client(cluster):
    from distributed import Client

    with Client(cluster) as client:
        yield client


def child(scenario: str, server, namespace: str, scheduler: str, *extra: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "tests.client._futures_child", scenario,
                          server.url, namespace, "--scheduler", scheduler, *extra],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_submit_and_map_hit_across_processes(fresh_server, cluster):
    server = fresh_server()
    ns = uuid.uuid4().hex
    first = child("submit", server, ns, cluster.scheduler_address)
    assert first["result"] == [42, [0, 10, 20, 30, 40]]
    assert first["report"]["computed"] == 6 and first["report"]["loaded"] == 0
    after_first = stats(server)
    assert after_first["stores"] == 6 and after_first["hits"] == 0
    second = child("submit", server, ns, cluster.scheduler_address)
    assert second["result"] == first["result"]
    assert second["report"]["loaded"] == 6 and second["report"]["computed"] == 0
    after_second = stats(server)
    assert after_second["stores"] == 6  # nothing stored again
    assert after_second["hits"] == 6  # every call loaded on a worker


def test_a_chain_recomputes_only_the_changed_last_call(fresh_server, cluster):
    server = fresh_server()
    ns = uuid.uuid4().hex
    v1 = child("chain", server, ns, cluster.scheduler_address, "--last", "v1")
    assert v1["result"] == 19 and v1["report"]["computed"] == 3
    v2 = child("chain", server, ns, cluster.scheduler_address, "--last", "v2")
    assert v2["result"] == 18
    assert (v2["report"]["loaded"], v2["report"]["computed"]) == (2, 1)
    assert stats(server)["stores"] == 4 and stats(server)["hits"] == 2


def flaky(path: str, x: int) -> int:
    """Fails until it has been called three times (counted in a file: workers are
    processes)."""
    counter = Path(path)
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    if n < 3:
        raise RuntimeError(f"attempt {n} fails")
    return x * 2


def test_retries_still_retry_a_failing_function(cache_server, client, tmp_path):
    cc = CachedClient(client, cache=cache_server.url, namespace=uuid.uuid4().hex)
    future = cc.submit(flaky, str(tmp_path / "n"), 21, retries=2)
    assert future.result() == 42
    assert (tmp_path / "n").read_text() == "3"
    failing = cc.submit(flaky, str(tmp_path / "m"), 1)  # no retries: the error surfaces
    with pytest.raises(RuntimeError, match="attempt 1 fails"):
        failing.result()


def where(x):
    from distributed import get_worker

    return get_worker().address, x


def test_options_keys_and_mixing_with_plain_futures(cache_server, client):
    cc = CachedClient(client, cache=cache_server.url, namespace=uuid.uuid4().hex)
    target = sorted(client.scheduler_info()["workers"])[-1]
    placed = cc.submit(where, 1, workers=[target], key="placed-call")
    assert placed.key == "placed-call"
    assert placed.result() == (target, 1)
    assert cc.submit(where, 1, workers=[target]).result() == (target, 1)  # a load, there too
    plain = client.submit(np.arange, 4)
    before = stats(cache_server)["stores"]
    volatile = cc.submit(np.sum, plain)  # a future this client did not make: volatile
    assert volatile.result() == 6
    assert cc.report.volatile == 1
    cached = cc.submit(np.arange, 5)
    mixed = client.submit(np.sum, cached)  # cached futures are ordinary futures
    assert mixed.result() == 10
    assert stats(cache_server)["stores"] == before + 1  # arange(5) only
    assert cc.gather([cached, mixed])[1] == 10


def test_impure_keys_still_hit_by_content(cache_server, client):
    ns = uuid.uuid4().hex
    cc = CachedClient(client, cache=cache_server.url, namespace=ns)
    a = cc.submit(np.arange, 3, pure=False)
    a.result()
    b = cc.submit(np.arange, 3, pure=False)
    assert a.key != b.key  # pure=False: a fresh key, as Client.submit gives
    np.testing.assert_array_equal(b.result(), np.arange(3))
    assert (cc.report.loaded, cc.report.computed) == (1, 1)  # found by content


def test_compute_returns_futures_and_loads(cache_server, client):
    ns = uuid.uuid4().hex
    x = (da.arange(100, chunks=10) + 1).sum()
    cc = CachedClient(client, cache=cache_server.url, namespace=ns)
    future = cc.compute(x)
    assert future.result() == 5050
    again = cc.compute([x])
    assert [f.result() for f in again] == [5050]
    assert last_report().loaded == 1 and last_report().computed == 0


@pytest.mark.parametrize("where_", ["threads", "cluster"])
def test_cached_persist_loads_the_stored_parts(cache_server, client, where_):
    ns = uuid.uuid4().hex
    scheduler = client if where_ == "cluster" else "threads"
    x = da.from_array(np.arange(40.0), chunks=10) * 2
    (kept,) = cached_persist(x, cache=cache_server.url, namespace=ns, scheduler=scheduler)
    assert last_report().computed > 0 and last_report().loaded == 0
    np.testing.assert_array_equal(kept.compute(scheduler=scheduler), np.arange(40.0) * 2)
    hits = stats(cache_server)["hits"]
    (again, untouched) = cached_persist(x, "plain", cache=cache_server.url, namespace=ns,
                                        scheduler=scheduler)
    assert untouched == "plain"
    assert last_report().loaded == 4 and last_report().computed == 0
    np.testing.assert_array_equal(again.compute(scheduler=scheduler), np.arange(40.0) * 2)
    assert stats(cache_server)["hits"] == hits + 4
    if where_ == "cluster":  # collections backed by futures, as Client.persist returns
        assert all(type(v).__name__ == "Future" for v in dict(again.dask).values()
                   if not isinstance(v, np.ndarray))
        cc = CachedClient(client, cache=cache_server.url, namespace=ns)
        persisted = cc.persist(x)
        np.testing.assert_array_equal(persisted.compute(), np.arange(40.0) * 2)


def test_persist_in_memory_on_local_schedulers(cache_server):
    ns = uuid.uuid4().hex
    calls = []
    step = dask.delayed(lambda v: calls.append(v) or v + 1, pure=True)(1)
    (kept,) = cached_persist(step, cache=cache_server.url, namespace=ns, scheduler="sync")
    assert kept.compute(scheduler="sync") == 2 and kept.compute(scheduler="sync") == 2
    assert calls == [1]  # computed once, then held in memory like dask.persist


def test_a_hit_that_cannot_be_loaded_runs_the_function_instead(fresh_server, client):
    server = fresh_server()
    ns = uuid.uuid4().hex
    first = CachedClient(client, cache=server.url, namespace=ns)
    upstream = first.submit(np.arange, 6)
    assert first.submit(np.sum, upstream).result() == 15
    for path in (server.data_dir / "objects").rglob("*"):  # every object loses its bytes
        if path.is_file() and not path.name.endswith(".json"):
            path.write_bytes(b"garbage")
    second = CachedClient(client, cache=server.url, namespace=ns)
    again = second.submit(np.sum, second.submit(np.arange, 6, pure=False), pure=False)
    assert again.result() == 15  # both were hits; both loads failed; both computed
    assert second.report.loaded == 2
    assert stats(server)["corrupt"] >= 1


def test_persisted_futures_never_fail_for_the_cache(fresh_server, client):
    server = fresh_server()
    ns = uuid.uuid4().hex
    x = da.from_array(np.arange(40.0), chunks=10) * 3
    cached_persist(x, cache=server.url, namespace=ns, scheduler=client)[0].compute()
    for path in (server.data_dir / "objects").rglob("*"):  # every object loses its bytes
        if path.is_file() and not path.name.endswith(".json"):
            path.write_bytes(b"garbage")
    cc = CachedClient(client, cache=server.url, namespace=ns)
    persisted = cc.persist(x)  # the loads fail on the workers; the parts are recomputed
    assert last_report().retried
    np.testing.assert_array_equal(persisted.compute(), np.arange(40.0) * 3)
    future = cc.compute(x.sum())
    assert future.result() == 2340.0


def test_graphs_on_cached_futures_are_cached_too(cache_server, client):
    ns = uuid.uuid4().hex
    x = da.from_array(np.arange(40.0), chunks=10) + 1
    (held,) = cached_persist(x, cache=cache_server.url, namespace=ns, scheduler=client)
    cc = CachedClient(client, cache=cache_server.url, namespace=ns)
    f = cc.submit(np.arange, 4)
    total = dask.delayed(np.sum, pure=True)(f)
    for expected_loaded in (0, 1):  # a plain future would make these volatile
        (a, b) = cached_compute(held.sum(), total, cache=cache_server.url, namespace=ns,
                                scheduler=client)
        assert (a, b) == (820.0, 6)
        report = last_report()
        assert report.volatile == 0, report.volatile_reasons
        assert report.loaded == 2 * expected_loaded


def test_a_known_impure_function_is_volatile(cache_server, client):
    import random

    cc = CachedClient(client, cache=cache_server.url, namespace=uuid.uuid4().hex)
    before = stats(cache_server)["stores"]
    futures = [cc.submit(random.random, pure=False) for _ in range(2)]
    assert all(0 <= v < 1 for v in cc.gather(futures))
    assert cc.report.volatile == 2 and cc.report.loaded == 0  # never looked up or loaded
    assert stats(cache_server)["stores"] == before


def double(x: int) -> int:
    return 2 * x


def test_submit_and_map_are_reported_as_runs(cache_server, client):
    """Each submit or map is a run on the dashboard: its counts, its task list, the seconds
    it saved, and the run id its hit events name."""
    import time

    ns = uuid.uuid4().hex
    cc = CachedClient(client, cache=cache_server.url, namespace=ns, policy="all")
    assert cc.submit(double, 1).result() == 2
    assert cc.gather(cc.map(double, [1, 2, 3])) == [2, 4, 6]

    deadline = time.monotonic() + 60
    while True:  # the runs end when their futures do: their last summaries follow
        runs = httpx.get(f"{cache_server.url}/v1/runs", params={"limit": 1000}).json()["runs"]
        mine = [r for r in runs if r["namespace"] == ns]
        if len(mine) == 2 and all(r["status"] == "done" for r in mine):
            break
        assert time.monotonic() < deadline, mine
        time.sleep(0.05)
    mapped, submitted = mine  # newest first
    assert (submitted["tasks"], submitted["computed"], submitted["loaded"]) == (1, 1, 0)
    assert (mapped["tasks"], mapped["computed"], mapped["loaded"]) == (3, 2, 1)
    assert mapped["seconds_saved"] > 0  # double(1), stored by the submit's run
    task_list = httpx.get(f"{cache_server.url}/v1/runs/{mapped['run_id']}").json()["task_list"]
    assert sorted(t["state"] for t in task_list) == ["computed", "computed", "loaded"]
    events = httpx.get(f"{cache_server.url}/v1/events", params={"limit": 1000}).json()
    hits = [e for e in events["events"] if e["kind"] == "hit" and e.get("run") in
            {mapped["run_id"], submitted["run_id"]}]
    assert [e["run"] for e in hits] == [mapped["run_id"]]


def _held(client, key) -> bool:
    return key in client.run_on_scheduler(lambda dask_scheduler: set(dask_scheduler.tasks))


def _released(client, key, seconds: float = 20.0) -> bool:
    """Whether the scheduler forgets ``key`` within ``seconds`` (releases travel as
    messages: a deadline, not a speed requirement)."""
    import time

    deadline = time.monotonic() + seconds
    while _held(client, key):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _double(x):
    return x * 2


@pytest.mark.parametrize("compute", ["dask.compute", "cached_compute"])
def test_futures_passed_in_are_released_when_the_user_drops_them(cache_server, client,
                                                                 compute):
    """Issue 27: a Future given to ``cached_compute`` stayed held by the scheduler after
    the user dropped it (the run's summary kept its graph), where ``dask.compute`` lets
    it go. No ``gc.collect()``: references, not cycles, must be what lets it go."""
    future = client.submit(_double, 21, pure=False)
    assert future.result() == 42
    key = future.key
    task = dask.delayed(_double, pure=True)(future)
    if compute == "dask.compute":
        assert dask.compute(task) == (84,)
    else:
        assert cached_compute(task, cache=cache_server.url, namespace=uuid.uuid4().hex) == (
            84,)
    del future, task
    assert _released(client, key), f"{compute} still holds {key}"


def test_ed25519_readers_load_calls_and_store_none(cache_server, client):
    """Issue 29: submit with only trusted keys loads what the writer signed and stores
    nothing of its own (it could not sign); the writer's workers sign with its key."""
    from client_lib.core.public_keys import new_keypair

    private, public = new_keypair()
    ns = uuid.uuid4().hex
    with dask.config.set({"result-cache.signing-key": private}):
        writer = CachedClient(client, cache=cache_server.url, namespace=ns, policy="all")
        assert writer.submit(double, 21).result() == 42
    with dask.config.set({"result-cache.signing-key": None,
                          "result-cache.trusted-keys": public}):
        reader = CachedClient(client, cache=cache_server.url, namespace=ns, policy="all")
        before = stats(cache_server)
        assert reader.submit(double, 21).result() == 42
        assert reader.submit(double, 5).result() == 10
        after = stats(cache_server)
    assert after["stores"] == before["stores"]  # nothing stored by the reader
    assert after["hits"] == before["hits"] + 1 and after["untrusted"] == before["untrusted"]
    assert reader.report.loaded == 1 and reader.report.computed == 1
