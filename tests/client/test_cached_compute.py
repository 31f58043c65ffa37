"""``cached_compute`` end to end: a real cache server (uvicorn, Redis, Zarr files), the
local schedulers, worker processes and a real ``LocalCluster``."""

from __future__ import annotations

import json
import logging
import os
import pickle
import subprocess
import sys
import threading
import uuid
import warnings
from pathlib import Path

import dask
import dask.array as da
import h5py
import httpx
import numpy as np
import pytest

import client_lib
from client_lib import CacheClient, cached_compute, last_report
from tests._compare import assert_same
from tests._servers import free_port
from tests.client._corpus import CORPUS, build
from tests.client._corpus_values import write_inputs

ROOT = Path(__file__).resolve().parents[2]


def stats(server) -> dict:
    return httpx.get(f"{server.url}/v1/stats").json()


@pytest.fixture(scope="module")
def h5_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("h5") / "corpus.h5"
    with h5py.File(path, "w") as f:
        f["data"] = np.arange(200.0).reshape(20, 10)
    write_inputs(path.parent)
    return str(path)


def run_corpus(server, namespace: str, out: Path, h5: str, scheduler: str = "threads",
               only: list[str] | None = None) -> dict:
    args = [sys.executable, "-m", "tests.client._corpus", server.url, namespace, str(out),
            "--scheduler", scheduler, "--h5", h5]
    if only:
        args += ["--only", *only]
    # Every frame, however small, goes through Parquet where it reads back exactly: the
    # corpus proves the round trip for each dtype it has (issue 12).
    env = {**os.environ, "DASK_RESULT_CACHE__PARQUET_MIN_BYTES": "0"}
    subprocess.run(args, cwd=ROOT, check=True, timeout=600, env=env)
    return pickle.loads(out.read_bytes())


@pytest.fixture(scope="module", params=["threads", "local-cluster"])
def cold_corpus(request, cache_server, h5_path, tmp_path_factory):
    """The whole corpus computed once, cold, in a fresh process. (Dask plans shuffles
    differently for a cluster, P2P instead of on-disk, so each scheduler gets its own.)"""
    scheduler = request.param
    namespace = f"corpus-{uuid.uuid4().hex}"
    out = tmp_path_factory.mktemp("corpus") / "cold.pkl"
    return scheduler, namespace, run_corpus(cache_server, namespace, out, h5_path, scheduler)


@pytest.fixture(scope="module")
def expected(cold_corpus, h5_path, request):
    """``dask.compute`` of every entry on the scheduler the corpus ran on."""
    scheduler = cold_corpus[0]
    if scheduler == "local-cluster":
        scheduler = request.getfixturevalue("cluster_client")
    return {name: dask.compute(build(name, {"h5": h5_path}), scheduler=scheduler)[0]
            for name in CORPUS}


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 50


@pytest.mark.slow
def test_corpus_cold_equals_dask_compute(cold_corpus, expected):
    _, _, results = cold_corpus
    for name, (value, report) in results.items():
        assert_same(value, expected[name], name)
        assert report["fallback"] is None, name
        assert report["volatile"] == 0, name


@pytest.mark.slow
def test_corpus_warm_in_fresh_process_loads_every_output(cold_corpus, expected, cache_server,
                                                         h5_path, tmp_path):
    scheduler, namespace, _ = cold_corpus
    results = run_corpus(cache_server, namespace, tmp_path / "warm.pkl", h5_path, scheduler)
    for name, (value, report) in results.items():
        assert_same(value, expected[name], name)
        assert report["computed"] == 0, (name, report)
        assert report["loaded"] >= 1, (name, report)
        assert report["hits"] >= report["loaded"], (name, report)


# -- the branch scenario ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["threads", "local-cluster"])
def test_branch_example_reuses_the_shared_prefix(fresh_server, scheduler):
    server = fresh_server()
    env = {**os.environ, "DASK_RESULT_CACHE__URL": server.url, "BRANCHES_SLEEP": "0.2"}

    def branch(name: str) -> dict:
        out = subprocess.run([sys.executable, "examples/branches.py", name, "--scheduler",
                              scheduler], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=300, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    a = branch("a")
    assert (a["hits"], a["loaded"], a["computed"]) == (0, 0, 3)
    b = branch("b")
    # step_2 is found and loaded, step_1 (found too: every link that pays is stored,
    # client_lib/policy/modes.py) culled, step_3b computed.
    assert (b["hits"], b["loaded"], b["computed"]) == (2, 1, 1)
    x = np.sqrt(np.arange(100_000, dtype="float64")) * 2.0
    assert a["result"] == pytest.approx(float(x.sum()))
    assert b["result"] == pytest.approx(float(x.mean()))
    after = stats(server)
    assert (after["hits"], after["served"]) == (b["hits"], 1) and after["stores"] >= 3


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["threads", "local-cluster"])
def test_branch_example_persist_variant(fresh_server, scheduler):
    """Session a persists step_2 and runs 3a; session b persists step_2 from the cache."""
    server = fresh_server()
    env = {**os.environ, "DASK_RESULT_CACHE__URL": server.url, "BRANCHES_SLEEP": "0.2"}

    def branch(name: str) -> dict:
        out = subprocess.run([sys.executable, "examples/branches.py", name, "--persist",
                              "--scheduler", scheduler], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=300, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    a = branch("a")
    assert (a["loaded"], a["computed"]) == (0, 3)
    b = branch("b")
    # persist: step_2 loaded (step_1 culled); then step_3b computed from the held value
    assert (b["loaded"], b["computed"]) == (1, 1)
    x = np.sqrt(np.arange(100_000, dtype="float64")) * 2.0
    assert a["result"] == pytest.approx(float(x.sum()))
    assert b["result"] == pytest.approx(float(x.mean()))
    assert (stats(server)["found"], stats(server)["served"]) == (2, 1)


# -- drop-in behaviour -----------------------------------------------------------------


def test_returns_exactly_what_dask_compute_returns(cache_server):
    ns = uuid.uuid4().hex
    x = da.arange(10, chunks=5)
    args = ({"a": x.sum(), "b": [x.max(), 3]}, "plain", 7, x)
    expected = dask.compute(*args)
    actual = cached_compute(*args, cache=cache_server.url, namespace=ns, scheduler="threads")
    assert_same(list(actual), list(expected))
    # non-collections pass through untouched, and traverse=False is honoured
    assert cached_compute(1, "x", cache=cache_server.url, scheduler="threads") == (1, "x")
    nested = [x.sum()]
    assert cached_compute(nested, traverse=False, cache=cache_server.url,
                          scheduler="threads") == (nested,)


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_batched_stores_are_durable_when_the_run_returns(cache_server, scheduler):
    # Small results go through the store queue in batches (client_lib/execution/store_queue.py);
    # cached_compute returns only once the server holds every one of them.
    ns = uuid.uuid4().hex
    parts = [dask.delayed(lambda i: np.full(3, i), pure=True)(i) for i in range(40)]
    total = dask.delayed(lambda xs: float(sum(x.sum() for x in xs)), pure=True)(parts)
    (value,) = cached_compute(total, cache=cache_server.url, namespace=ns, policy="all",
                              scheduler=scheduler)
    report = last_report()
    assert value == 3.0 * sum(range(40)) and report.stored == 41 == report.computed
    hashes = set(client_lib.task_hashes(total, namespace=ns).values())
    assert CacheClient(cache_server.url).lookup(hashes) == hashes
    (again,) = cached_compute(total, cache=cache_server.url, namespace=ns, scheduler=scheduler)
    assert again == value and last_report().loaded == 1


@pytest.mark.parametrize("enabled", [True, False])
def test_garbage_collection_is_left_as_it_was(cache_server, enabled):
    # The graph phases pause the cyclic collector (client_lib.plan.materialize.paused_gc); the
    # user's setting must come back, also when hashing fails.
    import gc

    class Unhashable:
        def __reduce_ex__(self, protocol):
            raise RuntimeError("no")

    (gc.enable if enabled else gc.disable)()
    try:
        for value in (1, Unhashable()):
            expr = dask.delayed(lambda v: 2, pure=True)(value)
            assert cached_compute(expr, cache=cache_server.url, namespace=uuid.uuid4().hex,
                                  scheduler="sync") == (2,)
            assert gc.isenabled() is enabled
    finally:
        gc.enable()


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["sync", "threads", "processes"])
def test_local_schedulers(cache_server, scheduler):
    ns = uuid.uuid4().hex
    x = da.from_array(np.arange(1000.0), chunks=100)
    expr = (x ** 2).sum()
    (cold,) = cached_compute(expr, cache=cache_server.url, namespace=ns, scheduler=scheduler)
    cold_report = last_report()
    (warm,) = cached_compute(expr, cache=cache_server.url, namespace=ns, scheduler=scheduler)
    warm_report = last_report()
    assert cold == warm == float((np.arange(1000.0) ** 2).sum())
    assert cold_report.loaded == 0 and cold_report.computed > 0
    assert warm_report.loaded == 1 and warm_report.computed == 0
    assert warm_report.culled >= cold_report.computed


def test_explain_prints_and_logs_the_report(cache_server, capsys, caplog):
    ns = uuid.uuid4().hex
    expr = dask.delayed(sum)([1, 2, 3])
    with caplog.at_level(logging.INFO, logger="client_lib"):
        for _ in range(2):
            cached_compute(expr, cache=cache_server.url, namespace=ns, explain=True,
                           scheduler="threads")
    printed = capsys.readouterr().out
    assert printed.count("result cache") == 2
    assert "hits 1, loaded 1" in printed
    assert any("loaded 1" in r.getMessage() for r in caplog.records)


def test_report_names_the_loaded_and_computed_keys(cache_server):
    ns = uuid.uuid4().hex
    a = dask.delayed(lambda: 1, pure=True)(dask_key_name="a")
    b = dask.delayed(lambda v: v + 1, pure=True)(a, dask_key_name="b")
    c = dask.delayed(lambda v: v * 2, pure=True)(b, dask_key_name="c")
    d = dask.delayed(lambda v: v * 3, pure=True)(b, dask_key_name="d")
    assert cached_compute(c, cache=cache_server.url, namespace=ns, policy="all",
                          scheduler="threads") == (4,)
    report = last_report()
    assert sorted(report.computed_keys) == ["a", "b", "c"] and report.loaded_keys == []
    assert cached_compute([c, d], cache=cache_server.url, namespace=ns, policy="all",
                          scheduler="threads") == ([4, 6],)
    report = last_report()  # c loaded; d computed from b loaded; a culled
    assert sorted(report.loaded_keys) == ["b", "c"] and report.computed_keys == ["d"]
    assert (report.loaded, report.computed, report.culled) == (2, 1, 1)


def test_volatile_tasks_are_reported_and_never_stored(cache_server):
    ns = uuid.uuid4().hex
    lock = threading.Lock()
    a = dask.delayed(lambda lk: 2, pure=True)(lock)
    b = dask.delayed(lambda v: v * 10, pure=True)(a)
    before = stats(cache_server)["stores"]
    (value,) = cached_compute(b, cache=cache_server.url, namespace=ns, policy="all",
                              scheduler="threads")
    report = last_report()
    assert value == 20
    assert report.volatile == 2 and report.cacheable == 0
    assert any("cannot be hashed" in reason for reason in report.volatile_reasons)
    assert stats(cache_server)["stores"] == before


# -- policies ----------------------------------------------------------------------------


def _chain():
    a = dask.delayed(lambda: np.arange(10), pure=True)()
    b = dask.delayed(lambda v: v + 1, pure=True)(a)
    return dask.delayed(lambda v: v * 2, pure=True)(b)


@pytest.mark.parametrize("policy,stored", [("none", 0), ("outputs", 1), ("all", 3),
                                           ("auto", 1)])
def test_policy_decides_what_is_stored(cache_server, policy, stored):
    ns = uuid.uuid4().hex
    before = stats(cache_server)["stores"]
    cached_compute(_chain(), cache=cache_server.url, namespace=ns, policy=policy,
                   scheduler="threads")
    assert last_report().stored == stored
    assert stats(cache_server)["stores"] - before == stored


def test_callable_policy_sees_measurements(cache_server):
    seen = []

    def policy(candidate):
        seen.append(candidate)
        return candidate.nbytes > 0 and not candidate.is_output

    cached_compute(_chain(), cache=cache_server.url, namespace=uuid.uuid4().hex,
                   policy=policy, scheduler="threads")
    assert len(seen) == 3
    assert sum(c.is_output for c in seen) == 1
    assert all(0 <= c.compute_seconds and len(c.task_hash) == 32 for c in seen)
    assert last_report().stored == 2


def test_bad_policy_is_a_clear_error(cache_server):
    with pytest.raises(ValueError, match="unknown cache policy 'sometimes'"):
        cached_compute(_chain(), cache=cache_server.url, policy="sometimes",
                       scheduler="threads")


# -- failures never fail the computation ---------------------------------------------------


def test_server_down_warns_once_and_computes():
    url = f"http://127.0.0.1:{free_port()}"
    expr = da.arange(100, chunks=10).sum()
    with pytest.warns(RuntimeWarning, match="unreachable"):
        (value,) = cached_compute(expr, cache=url, scheduler="threads")
    assert value == 4950
    assert "unreachable" in last_report().fallback
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cached_compute(expr, cache=url, scheduler="threads") == (4950,)


def test_the_get_keyword_is_refused_as_dask_compute_refuses_it():
    """Dask's ``test_raise_get_keyword`` through the oracle campaign: ``get=`` went to the
    scheduler and computed, where ``dask.compute`` raises (it is ``scheduler=`` now)."""
    with pytest.raises(TypeError, match="scheduler=") as dask_says:
        dask.compute(dask.delayed(sum)([1, 2]), get=dask.get)
    with pytest.raises(TypeError, match="scheduler=") as we_say:
        cached_compute(dask.delayed(sum)([1, 2]), cache=f"http://127.0.0.1:{free_port()}",
                       get=dask.get)
    assert str(we_say.value) == str(dask_says.value)


def test_no_cache_configured_computes_with_a_warning():
    with dask.config.set({"result-cache.url": None}):
        with pytest.warns(RuntimeWarning, match="no cache configured"):
            assert cached_compute(dask.delayed(sum)([1, 2]), scheduler="threads") == (3,)
    report = last_report()  # it says what it did, not computed=0
    assert (report.tasks, report.computed, report.loaded) == (1, 1, 0)


def test_unstorable_result_is_returned_and_not_stored(cache_server):
    before = stats(cache_server)["stores"]
    lock_result = dask.delayed(threading.Lock, pure=True)()
    (value,) = cached_compute(lock_result, cache=cache_server.url, policy="all",
                              namespace=uuid.uuid4().hex, scheduler="threads")
    assert hasattr(value, "acquire")
    assert stats(cache_server)["stores"] == before


@pytest.mark.slow
def test_corrupt_entries_are_recomputed_and_dropped(fresh_server):
    server = fresh_server()
    ns = uuid.uuid4().hex
    chain = [dask.delayed(lambda i=i: np.full(100, i), pure=True)() for i in range(3)]
    expr = dask.delayed(lambda *xs: float(sum(x.sum() for x in xs)), pure=True)(*chain)
    assert cached_compute(expr, cache=server.url, namespace=ns, policy="all",
                          scheduler="threads") == (300.0,)
    blobs = list(Path(server.data_dir).rglob("blob"))
    assert blobs
    for path in blobs:
        if path.is_file():
            data = bytearray(path.read_bytes())
            data[len(data) // 2] ^= 0xFF
            path.write_bytes(bytes(data))
    assert cached_compute(expr, cache=server.url, namespace=ns, policy="all",
                          scheduler="threads") == (300.0,)
    report = last_report()
    assert report.retried, "the corrupt output should have failed to load"
    # The corrupt entry was dropped and stored afresh by the recomputation.
    assert cached_compute(expr, cache=server.url, namespace=ns,
                          scheduler="threads") == (300.0,)
    assert last_report().loaded == 1 and not last_report().retried


def test_an_entry_that_cannot_be_unpickled_is_recomputed(cache_server):
    """A pickle naming a module this process does not have (its class moved or went away
    since it was stored) is a miss: the task is recomputed, the computation never fails."""
    from client_lib.wire import codec

    ns = uuid.uuid4().hex
    total = dask.delayed(sum, pure=True)([1, 2, 3])
    (task_hash,) = client_lib.task_hashes(total, namespace=ns).values()
    body = b"cno_such_module_of_this_test\nGone\n."  # GLOBAL, STOP: a class by reference
    digest = codec.content_hasher("pickle", "", "")
    digest.update(body)
    entry = codec.Encoded("pickle", "", "", "no_such_module_of_this_test.Gone",
                          memoryview(body), digest.hexdigest())
    assert CacheClient(cache_server.url).put(task_hash, entry, 1.0, "sum")
    assert cached_compute(total, cache=cache_server.url, namespace=ns,
                          scheduler="sync") == (6,)
    assert last_report().retried == [task_hash]


# -- distributed -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster_client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster:
        with Client(cluster) as client:
            yield client


@pytest.mark.slow
def test_distributed_client_loads_and_stores_on_workers(cache_server, cluster_client):
    ns = uuid.uuid4().hex
    x = da.from_array(np.arange(400.0).reshape(20, 20), chunks=5)
    expr = (x + 1).mean(axis=0)
    before = stats(cache_server)["stores"]
    (cold,) = cached_compute(expr, cache=cache_server.url, namespace=ns,
                             scheduler=cluster_client)
    # The stores happened on the workers, which report them to the run.
    assert last_report().stored == stats(cache_server)["stores"] - before > 0
    assert "stored ?" not in str(last_report())
    (warm,) = cached_compute(expr, cache=cache_server.url, namespace=ns)  # default client
    np.testing.assert_array_equal(cold, (np.arange(400.0).reshape(20, 20) + 1).mean(axis=0))
    np.testing.assert_array_equal(warm, cold)
    assert last_report().loaded == 1 and last_report().computed == 0


@pytest.mark.slow
def test_distributed_keeps_annotations(cache_server, cluster_client):
    from distributed import get_worker

    target = sorted(cluster_client.scheduler_info()["workers"])[-1]
    with dask.annotate(workers=[target]):
        where = dask.delayed(lambda: get_worker().address, pure=True)()
    (address,) = cached_compute(where, cache=cache_server.url, namespace=uuid.uuid4().hex,
                                scheduler=cluster_client)
    assert address == target


@pytest.mark.slow
def test_distributed_keys_already_held_by_the_client(cache_server, cluster_client):
    ns = uuid.uuid4().hex
    x = da.ones((100,), chunks=10).cumsum(axis=0)
    held = cluster_client.compute(x)  # the same keys live in the scheduler's memory
    held.result()
    before = stats(cache_server)["stores"]
    (value,) = cached_compute(x, cache=cache_server.url, namespace=ns,
                              scheduler=cluster_client)
    np.testing.assert_array_equal(value, np.arange(1, 101.0))
    assert stats(cache_server)["stores"] > before  # our wrappers ran, not the held keys
    (value,) = cached_compute(x, cache=cache_server.url, namespace=ns,
                              scheduler=cluster_client)
    assert last_report().loaded == 1
    np.testing.assert_array_equal(value, np.arange(1, 101.0))
    del held


def test_cache_client_is_picklable_and_shared(cache_server):
    client = CacheClient.shared(cache_server.url)
    clone = pickle.loads(pickle.dumps(client))
    assert clone is client
    with pytest.raises(ValueError, match="http://"):
        CacheClient("localhost:1234")
