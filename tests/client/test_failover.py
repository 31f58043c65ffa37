"""A ``result-cache.url`` listing several servers: requests rotate over them, a server
that is down or answers 5xx is skipped for the next, and only when none answers does
``cached_compute`` compute without the cache. Real server processes, killed for real."""

from __future__ import annotations

import os
import signal
import uuid

import dask
import numpy as np
import pytest

from cache_server.launch import start_server
from client_lib import CacheClient, CacheUnavailable, cached_compute, last_report
from client_lib.transport.endpoints import Endpoints
from tests._servers import RedisProcess, free_port


def _hashes(n: int) -> list[str]:
    return [uuid.uuid4().hex for _ in range(n)]


def test_the_rotation_starts_at_each_server_in_turn_and_puts_failed_ones_last():
    endpoints = Endpoints("http://a:1/, http://b:2,http://c:3")
    assert endpoints.urls == ("http://a:1", "http://b:2", "http://c:3")
    firsts = [endpoints.order()[0] for _ in range(6)]
    assert firsts == ["http://a:1", "http://b:2", "http://c:3"] * 2
    endpoints.failed("http://a:1")
    assert [endpoints.order()[-1] for _ in range(3)] == ["http://a:1"] * 3
    endpoints.answered("http://a:1")
    assert {endpoints.order()[0] for _ in range(3)} == set(endpoints.urls)


@pytest.mark.parametrize("spec", ["http://a:1,", "http://a:1,ftp://b", "a:1"])
def test_a_malformed_url_list_is_refused_by_name(spec):
    with pytest.raises(ValueError, match="must start with http"):
        CacheClient(spec)


def _delayed_sum(n: int):
    parts = [dask.delayed(np.full, pure=True)(4, float(i), dask_key_name=f"p{i}")
             for i in range(n)]
    return dask.delayed(sum, pure=True)(parts, dask_key_name="total")


@pytest.mark.slow
def test_lookups_spread_and_a_killed_server_is_skipped(fresh_server):
    first, second = fresh_server(), fresh_server()
    client = CacheClient(f"{first.url},{second.url}")
    for _ in range(4):
        assert client.lookup(_hashes(10)) == set()
    per_server = [CacheClient(s.url).stats()["lookups"] for s in (first, second)]
    assert per_server == [20, 20]  # two requests each
    os.kill(first.pid, signal.SIGKILL)
    first.process.wait()
    ns = uuid.uuid4().hex
    expr = _delayed_sum(3)
    urls = f"{first.url},{second.url}"
    (cold,) = cached_compute(expr, cache=urls, namespace=ns, policy="all", scheduler="threads")
    report = last_report()
    assert report.fallback is None and report.stored and report.stored > 0
    (warm,) = cached_compute(expr, cache=urls, namespace=ns, scheduler="threads")
    np.testing.assert_array_equal(warm, np.full(4, 3.0))
    np.testing.assert_array_equal(cold, warm)
    report = last_report()
    assert report.fallback is None and report.loaded == 1 and report.computed == 0


@pytest.mark.slow
def test_a_server_answering_5xx_is_retried_on_the_next(fresh_server, tmp_path):
    broken_redis = RedisProcess(tmp_path / "redis")
    with start_server(tmp_path / "broken", redis_url=broken_redis.url) as broken:
        broken_redis.stop()  # the server now answers 503: its index is unreachable
        _check_failover_from(broken, fresh_server())


def _check_failover_from(broken, good) -> None:
    lonely = CacheClient(broken.url)
    with pytest.raises(CacheUnavailable, match="503"):
        lonely.lookup(_hashes(1))
    client = CacheClient(f"{broken.url},{good.url}")
    task_hash = _hashes(1)[0]
    assert client.put(task_hash, np.arange(10.0), 1.0, "x")
    for _ in range(3):  # whichever server the rotation starts at
        assert client.lookup([task_hash]) == {task_hash}
        np.testing.assert_array_equal(client.get(task_hash), np.arange(10.0))


@pytest.mark.slow
def test_with_every_server_down_cached_compute_computes_without_the_cache():
    urls = f"http://127.0.0.1:{free_port()},http://127.0.0.1:{free_port()}"
    with pytest.raises(CacheUnavailable) as caught:
        CacheClient(urls).lookup(_hashes(1))
    assert str(caught.value).count("127.0.0.1") == 2  # both were tried
    with pytest.warns(RuntimeWarning, match="computing without the cache"):
        (value,) = cached_compute(_delayed_sum(2), cache=urls, namespace=uuid.uuid4().hex,
                                  scheduler="threads")
    np.testing.assert_array_equal(value, np.full(4, 1.0))
    assert last_report().fallback is not None
