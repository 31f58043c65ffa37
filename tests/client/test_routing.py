"""``client_lib.enable``: Dask's own entry points through the cache, no other code change.
A real cache server, the local schedulers, a real ``LocalCluster``, and fresh processes in
which a second process loads what the first stored (docs/design/zero-code.md, Zero code
change)."""

from __future__ import annotations

import copy
import json
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
import dask.dataframe as dd
import httpx
import numpy as np
import pandas as pd
import pytest
from dask.base import get_scheduler

import client_lib
from client_lib import cached_compute, last_report
from client_lib.routing import enable_from_config
from tests._compare import assert_same
from tests._servers import free_port
from tests.client._corpus import CORPUS, build
from tests.client._corpus_values import write_corpus_files

ROOT = Path(__file__).resolve().parents[2]
CLIENT_METHODS = ("compute", "persist", "get", "submit", "map")


def stats(server) -> dict:
    return httpx.get(f"{server.url}/v1/stats").json()


@pytest.fixture(autouse=True)
def _disabled_afterwards():
    yield
    client_lib.disable()


def _array():
    return da.from_array(np.arange(40.0).reshape(8, 5), chunks=(4, 5)) + 1


def inc(x):
    return x + 1


# -- in this process ---------------------------------------------------------------------


def test_compute_and_persist_are_routed_and_disable_restores_dask_exactly(cache_server):
    import distributed

    config = copy.deepcopy(dask.config.config)
    methods = {name: distributed.Client.__dict__[name] for name in CLIENT_METHODS}
    ns = uuid.uuid4().hex
    client_lib.enable(cache=cache_server.url, namespace=ns, policy="all")
    assert all(distributed.Client.__dict__[n] is not methods[n] for n in CLIENT_METHODS)
    x = _array().sum()
    assert x.compute() == 820.0
    assert last_report().namespace == ns and last_report().computed > 0
    assert x.compute() == 820.0
    assert (last_report().loaded, last_report().computed) == (1, 0)
    (held,) = dask.persist(_array())  # its chunks were stored by the sum: loaded
    assert last_report().namespace == ns and last_report().loaded == 2
    np.testing.assert_array_equal(held.compute(scheduler="sync"), np.arange(40.0).reshape(8, 5) + 1)

    client_lib.disable()
    assert dask.config.config == config
    assert {name: distributed.Client.__dict__[name] for name in CLIENT_METHODS} == methods
    assert get_scheduler(collections=[x]) is dask.threaded.get
    report, before = last_report(), stats(cache_server)
    assert x.compute() == 820.0 and dask.persist(_array())[0].sum().compute() == 820.0
    assert last_report() is report  # nothing went through the cache
    assert stats(cache_server)["lookups"] == before["lookups"]
    client_lib.disable()  # twice: nothing to do


def test_routed_calls_return_what_dask_returns(cache_server):
    pdf = pd.DataFrame({"k": [1, 2, 1, 3] * 5, "v": np.arange(20.0)})
    df = dd.from_pandas(pdf, npartitions=3)
    arr = _array()
    args = ({"a": arr.sum(), "b": [arr.max(), 3]}, "plain", 7, arr,
            dask.delayed(inc)(dask.delayed(inc)(1)))
    frames = (df.groupby("k").v.sum(), df[df.v > 4])
    expected, expected_frames = dask.compute(*args), dask.compute(*frames)
    single = [a.compute() for a in (*args[3:], *frames)]
    client_lib.enable(cache=cache_server.url, namespace=uuid.uuid4().hex, policy="all")
    for _ in range(2):  # cold, then loaded
        assert_same(list(dask.compute(*args)), list(expected))
        assert_same(list(dask.compute(*frames)), list(expected_frames))
        assert_same([a.compute() for a in (*args[3:], *frames)], single)
        assert last_report().fallback is None
    assert last_report().computed == 0
    assert dask.compute(1, "x") == (1, "x")
    nested = [arr.sum()]
    assert dask.compute(nested, traverse=False) == (nested,)


def test_the_caches_annotations_hold_on_routed_calls_as_on_cached_compute(cache_server):
    """``dask.annotate(cache=False)`` on an array or bag layer: Dask's fusion drops it, the
    cache reads it from the layers the expression still holds (issue 27, case 11)."""
    import dask.bag as db

    with dask.annotate(cache=False):
        y = da.ones((30, 30), chunks=10).map_blocks(inc)
        bag = db.from_sequence(range(4), npartitions=2).map(inc)
    ns = uuid.uuid4().hex
    expected = []
    for x in ((y + 1).sum(), bag.sum()):
        cached_compute(x, cache=cache_server.url, namespace=ns, scheduler="threads")
        expected.append((last_report().tasks, last_report().volatile))
    client_lib.enable(cache=cache_server.url, namespace=ns)
    assert (y + 1).sum().compute() == 2700.0
    assert (last_report().tasks, last_report().volatile) == expected[0]
    client_lib.disable()
    with dask.config.set(scheduler="threads"):  # a scheduler configured before enable
        client_lib.enable(cache=cache_server.url, namespace=ns)
        assert bag.sum().compute() == 10
        client_lib.disable()
    assert (last_report().tasks, last_report().volatile) == expected[1]
    assert expected[0][1] > 0 and expected[1][1] == expected[1][0]


def test_explain_and_last_report_work_for_routed_calls(cache_server, capsys):
    ns = uuid.uuid4().hex
    client_lib.enable(cache=cache_server.url, namespace=ns, explain=True)
    _array().mean().compute()
    report = last_report()
    assert report.namespace == ns and report.tasks > 0
    assert str(report) in capsys.readouterr().out


def test_enabled_nests_and_restores_what_was_before(cache_server):
    outer, inner = uuid.uuid4().hex, uuid.uuid4().hex
    x = _array().sum()
    with client_lib.enabled(cache=cache_server.url, namespace=outer):
        with client_lib.enabled(cache=cache_server.url, namespace=inner):
            x.compute()
            assert last_report().namespace == inner
        x.compute()
        assert last_report().namespace == outer
    assert dask.config.get("scheduler", None) is None
    report = last_report()
    x.compute()
    assert last_report() is report


def test_a_router_a_config_block_puts_back_routes_nothing_and_is_cleaned_up(cache_server):
    config = copy.deepcopy(dask.config.config)
    client_lib.enable(cache=cache_server.url, namespace=uuid.uuid4().hex)
    with dask.config.set(scheduler="sync"):  # remembers the router, puts it back at its end
        client_lib.enable(cache=cache_server.url, namespace=uuid.uuid4().hex)
        client_lib.disable()
    assert type(dask.config.get("scheduler")).__name__ == "Router"
    report = last_report()
    assert _array().sum().compute() == 820.0 and last_report() is report  # plain Dask
    client_lib.enable(cache=cache_server.url, namespace=uuid.uuid4().hex)
    assert _array().sum().compute() == 820.0 and last_report() is not report
    assert last_report().fallback is None  # ran on the threads, not through a router
    client_lib.disable()
    assert dask.config.config == config


def test_the_options_default_to_the_result_cache_config(cache_server):
    ns = uuid.uuid4().hex
    client_lib.enable()
    with dask.config.set({"result-cache.url": cache_server.url, "result-cache.namespace": ns}):
        _array().sum().compute()
    assert last_report().namespace == ns and last_report().cache_url == cache_server.url


def test_the_scheduler_configured_before_is_the_one_that_runs(cache_server):
    ran_in: list[str] = []

    def where(x):
        ran_in.append(threading.current_thread().name)
        return x

    with dask.config.set(scheduler="sync"):
        client_lib.enable(cache=cache_server.url, namespace=uuid.uuid4().hex)
        assert dask.delayed(where, pure=False)(3).compute() == 3
        assert last_report().tasks == 1
        client_lib.disable()
        assert dask.config.get("scheduler") == "sync"
    assert ran_in == [threading.current_thread().name]


def test_cached_compute_while_enabled_is_not_routed_again(cache_server):
    x = _array().sum()
    ns = uuid.uuid4().hex
    (plain,) = cached_compute(x, cache=cache_server.url, namespace=ns, policy="all")
    expected = last_report()
    client_lib.enable(cache=cache_server.url, namespace=uuid.uuid4().hex)
    before = stats(cache_server)["lookups"]
    (value,) = cached_compute(x, cache=cache_server.url, namespace=ns, policy="all")
    report = last_report()
    # The run's graph went to the threads, not through the hook again: its stores are
    # counted here (a graph handed to the hook would have run unbatched, uncounted).
    assert value == plain and report.namespace == ns and report.fallback is None
    assert (report.tasks, report.loaded, report.computed) == (expected.tasks, 1, 0)
    assert stats(cache_server)["lookups"] - before == report.cacheable
    assert report.stored is not None


def test_computations_dask_starts_while_the_cache_prepares_a_run_are_plain(cache_server):
    """Dask's optimisation may compute (a dataframe reads statistics): here an array
    optimiser that does. That inner compute is not routed: the run's report stays its."""
    def optimize_and_compute(dsk, keys, **kwargs):
        dask.compute(dask.delayed(inc)(1))
        return dsk

    x = _array().sum()
    with dask.config.set(array_optimize=optimize_and_compute):
        cached_compute(x, cache=cache_server.url)
        tasks = last_report().tasks
        client_lib.enable(cache=cache_server.url, namespace=uuid.uuid4().hex)
        for value in (x.compute(), cached_compute(x, cache=cache_server.url)[0]):
            assert value == 820.0
            assert last_report().tasks == tasks > 1  # not the inner compute's one task


def test_a_server_outage_warns_once_and_computes():
    client_lib.enable(cache=f"http://127.0.0.1:{free_port()}")
    x = _array().sum()
    with pytest.warns(RuntimeWarning, match="unreachable"):
        assert x.compute() == 820.0
    assert "unreachable" in last_report().fallback
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dask.compute(x, x) == (820.0, 820.0)


def test_a_graph_handed_to_the_scheduler_directly_is_plain_and_said_once(cache_server,
                                                                          tmp_path):
    client_lib.enable(cache=cache_server.url, namespace=uuid.uuid4().hex)
    report = last_report()
    with pytest.warns(RuntimeWarning, match="handed to the scheduler directly"):
        da.to_npy_stack(tmp_path / "a", _array())  # compute_as_if_collection
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        da.to_npy_stack(tmp_path / "b", _array())
    np.testing.assert_array_equal(da.from_npy_stack(tmp_path / "b").compute(scheduler="sync"),
                                  np.arange(40.0).reshape(8, 5) + 1)
    assert last_report() is report


def test_a_compute_keyword_the_cache_also_has_stays_dasks(cache_server):
    client_lib.enable(cache=cache_server.url, namespace=uuid.uuid4().hex)
    results: dict = {}
    with pytest.warns(RuntimeWarning, match="cache="):
        assert _array().sum().compute(cache=results) == 820.0
    assert results  # the threaded scheduler's own results dictionary, as in Dask


def test_bad_options_are_clear_errors():
    with pytest.raises(TypeError, match="unknown option"):
        client_lib.enable(schedulr="threads")
    with pytest.raises(ValueError, match="unknown cache policy"):
        client_lib.enable(policy="sometimes")
    with pytest.raises(TypeError, match="namespace must be a string"):
        client_lib.enable(namespace=3)
    with pytest.raises(TypeError, match="cache must be a URL"):
        client_lib.enable(cache=8780)
    with pytest.raises(TypeError, match="refresh"):
        client_lib.enable(refresh="yes")
    assert dask.config.get("scheduler", None) is None  # nothing half-enabled


def test_config_enabled_turns_it_on_and_a_bad_value_warns(cache_server):
    with dask.config.set({"result-cache.enabled": "maybe"}):
        with pytest.warns(RuntimeWarning, match="result-cache.enabled must be true or false"):
            enable_from_config()
    assert dask.config.get("scheduler", None) is None
    with dask.config.set({"result-cache.enabled": 1, "result-cache.url": cache_server.url}):
        enable_from_config()
        assert type(dask.config.get("scheduler")).__name__ == "Router"
        _array().sum().compute()
        assert last_report().cache_url == cache_server.url


def test_the_hook_never_travels_to_another_process(cache_server):
    client_lib.enable(cache=cache_server.url)
    copied = pickle.loads(pickle.dumps(dask.config.config))
    assert copied["scheduler"] is None  # a nanny's worker gets Dask's own behaviour


# -- fresh processes: a second process loads what the first stored -------------------------


def _child(group: str, server, namespace: str, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run([sys.executable, "-m", "tests.client._routing_child", group,
                          server.url, namespace], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def threads_runs(cache_server):
    ns = uuid.uuid4().hex
    return _child("threads", cache_server, ns), _child("threads", cache_server, ns)


@pytest.fixture(scope="module")
def cluster_runs(cache_server):
    """The LocalCluster group, twice; its workers preload ``client_lib.routing`` with
    ``result-cache.enabled``, so they route too."""
    ns = uuid.uuid4().hex
    env = {"DASK_RESULT_CACHE__ENABLED": "1",
           "DASK_DISTRIBUTED__WORKER__PRELOAD": '["client_lib.routing"]'}
    return (_child("local-cluster", cache_server, ns, env),
            _child("local-cluster", cache_server, ns, env))


def _assert_stored_then_loaded(runs: tuple[dict, dict], entry: str, expected: object) -> None:
    first, second = runs[0][entry], runs[1][entry]
    assert first["result"] == second["result"] == expected, entry
    assert first["report"]["fallback"] is None and second["report"]["fallback"] is None
    assert first["report"]["computed"] > 0 and first["report"]["loaded"] == 0, first
    assert second["report"]["computed"] == 0 and second["report"]["loaded"] > 0, second
    assert second["report"]["hits"] == first["report"]["computed"], (first, second)


#: Each entry point's result in the child (tests/client/_routing_child.py).
ON_THREADS = {"obj.compute": 852.0, "dask.compute": [35.5, {"d": 42, "n": 3}],
              "dask.persist": 852.0, "obj.persist": 42}
ON_A_CLUSTER = {"Client.compute": ["Future", 852.0], "Client.compute sync": [70.0, 42],
                "Client.persist": 852.0, ".compute() default client": 35.5,
                "dask.persist default client": 42}


@pytest.mark.slow
@pytest.mark.parametrize("entry", ON_THREADS)
def test_each_entry_point_on_threads_loads_in_a_second_process(threads_runs, entry):
    _assert_stored_then_loaded(threads_runs, entry, ON_THREADS[entry])


@pytest.mark.slow
@pytest.mark.parametrize("entry", ON_A_CLUSTER)
def test_each_entry_point_on_a_local_cluster_loads_in_a_second_process(cluster_runs, entry):
    _assert_stored_then_loaded(cluster_runs, entry, ON_A_CLUSTER[entry])


@pytest.mark.slow
def test_workers_that_preload_client_lib_route_too_and_never_twice(cluster_runs):
    # Workers enabled the cache themselves (their loads and stores call no entry point),
    # and every run above made one lookup and loaded what the first process stored.
    assert cluster_runs[0]["workers"] == ["Router", "Router"]


@pytest.mark.slow
def test_no_code_line_a_startup_import_and_the_config_suffice(cache_server, tmp_path):
    """``sitecustomize`` imports ``client_lib``; ``DASK_RESULT_CACHE__ENABLED=1`` does the
    rest: the program itself never names the cache."""
    (tmp_path / "sitecustomize.py").write_text(
        "import os\nif os.environ.get('DASK_RESULT_CACHE__ENABLED'):\n"
        "    import client_lib  # noqa: F401\n")
    program = ("import json, sys, dask.array as da, numpy as np\n"
               "x = da.from_array(np.arange(40.0).reshape(8, 5), chunks=(4, 5)) + 1\n"
               "value = float(x.sum().compute())\n"
               "r = sys.modules['client_lib'].last_report()\n"
               "print(json.dumps([value, r.namespace, r.loaded, r.computed]))\n")
    env = {**os.environ, "DASK_RESULT_CACHE__ENABLED": "1",
           "DASK_RESULT_CACHE__URL": cache_server.url, "DASK_RESULT_CACHE__POLICY": "all",
           "DASK_RESULT_CACHE__NAMESPACE": uuid.uuid4().hex,
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    runs = [json.loads(subprocess.run([sys.executable, "-c", program], env=env, cwd=tmp_path,
                                      capture_output=True, text=True, check=True,
                                      timeout=120).stdout) for _ in range(2)]
    ns = env["DASK_RESULT_CACHE__NAMESPACE"]
    assert runs[0] == [820.0, ns, 0, 6]
    assert runs[1] == [820.0, ns, 1, 0]


@pytest.fixture(scope="module")
def corpus_inputs(tmp_path_factory):
    return write_corpus_files(tmp_path_factory.mktemp("h5"))


def _routed_corpus(server, namespace: str, out: Path, h5: str) -> dict:
    args = [sys.executable, "-m", "tests.client._corpus", server.url, namespace, str(out),
            "--routed", "--h5", h5]
    env = {**os.environ, "DASK_RESULT_CACHE__PARQUET_MIN_BYTES": "0"}
    subprocess.run(args, cwd=ROOT, check=True, timeout=600, env=env)
    return pickle.loads(out.read_bytes())


@pytest.mark.slow
def test_the_corpus_through_dask_compute_is_dask_computes_cold_and_loaded(
        cache_server, corpus_inputs, tmp_path):
    ns = uuid.uuid4().hex
    cold = _routed_corpus(cache_server, ns, tmp_path / "cold.pkl", corpus_inputs)
    warm = _routed_corpus(cache_server, ns, tmp_path / "warm.pkl", corpus_inputs)
    for name in CORPUS:
        (expected,) = dask.compute(build(name, {"h5": corpus_inputs}), scheduler="threads")
        assert_same(cold[name][0], expected, name)
        assert_same(warm[name][0], expected, name)
        assert cold[name][1]["fallback"] is None, name
        assert warm[name][1]["computed"] == 0 and warm[name][1]["loaded"] >= 1, name


# -- a LocalCluster in this process ------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster:
        yield cluster


@pytest.mark.slow
def test_cached_client_calls_are_not_said_to_be_plain(cache_server, cluster):
    from distributed import Client

    with Client(cluster) as client:
        client_lib.enable(cache=cache_server.url, namespace=uuid.uuid4().hex)
        cc = client_lib.CachedClient(client, cache=cache_server.url)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert cc.submit(inc, 41).result() == 42
            assert cc.gather(cc.map(inc, [1, 2])) == [2, 3]


@pytest.mark.slow
def test_a_client_made_before_enable_is_routed_and_disable_restores_it(cache_server,
                                                                       cluster):
    from distributed import Client, Future

    with Client(cluster) as client:
        config = copy.deepcopy(dask.config.config)
        methods = {name: Client.__dict__[name] for name in CLIENT_METHODS}
        ns = uuid.uuid4().hex
        client_lib.enable(cache=cache_server.url, namespace=ns, policy="all")
        x = _array().sum()
        assert x.compute() == 820.0 and last_report().namespace == ns  # the default client
        assert x.compute(scheduler=client) == 820.0 and last_report().loaded == 1
        future = client.compute(x)
        assert isinstance(future, Future) and future.result() == 820.0
        assert last_report().loaded == 1
        (held,) = client.persist([_array()])
        assert held.sum().compute() == 820.0

        with pytest.warns(RuntimeWarning, match="Client.submit"):
            assert client.submit(inc, 1).result() == 2
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert client.submit(inc, 2).result() == 3
        with pytest.warns(RuntimeWarning, match="Client.map"):
            assert client.gather(client.map(inc, [1, 2])) == [2, 3]

        client_lib.disable()
        assert dask.config.config == config
        assert {name: Client.__dict__[name] for name in CLIENT_METHODS} == methods
        report, before = last_report(), stats(cache_server)
        assert x.compute() == 820.0 and client.compute(x).result() == 820.0
        assert client.persist(_array()).sum().compute() == 820.0
        assert last_report() is report
        assert stats(cache_server)["lookups"] == before["lookups"]


@pytest.mark.slow
def test_bags_keep_their_default_scheduler(cache_server):
    import dask.bag as db

    client_lib.enable(cache=cache_server.url, namespace=uuid.uuid4().hex, policy="all")
    bag = db.from_sequence(range(10), npartitions=2).map(inc)
    assert bag.sum().compute() == 55
    assert last_report().stored is None  # stored by the process pool's workers, as in Dask
