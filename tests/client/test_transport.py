"""``CacheClient`` against a real server: what each failure raises, and that a download
damaged on the way is refused without touching the entry the server verified."""

from __future__ import annotations

import time
import uuid

import dask
import numpy as np
import pytest

from client_lib import (
    CacheAccessDenied,
    CacheClient,
    CacheEntryCorrupt,
    CacheEntryUnavailable,
    CacheUnavailable,
    cached_compute,
    last_report,
)
from tests._servers import free_port
from tests.client._corrupting_proxy import corrupting_proxy

HEX = "0123456789abcdef" * 2  # the shortest token a server takes is 32 characters


def _hash() -> str:
    return uuid.uuid4().hex


@pytest.fixture
def over_http():
    """Loads over HTTP only: this machine sees the server's storage, so loads would
    otherwise read in place (tests/client/test_direct_reads.py) and skip the link."""
    with dask.config.set({"result-cache.direct-read": "never"}):
        yield


def test_a_download_damaged_on_the_way_is_refused_and_the_entry_kept(cache_server, over_http):
    task_hash = _hash()
    value = np.arange(1000.0)
    direct = CacheClient(cache_server.url)
    assert direct.put(task_hash, value, 1.0, "label")
    with corrupting_proxy(cache_server.url) as url:
        with pytest.raises(CacheEntryCorrupt) as caught:
            CacheClient(url).get(task_hash)
    assert isinstance(caught.value, CacheEntryUnavailable)  # a load failure like any other
    assert caught.value.task_hash == task_hash and caught.value.expected != caught.value.actual
    np.testing.assert_array_equal(direct.get(task_hash), value)  # still there, still good


def test_cached_compute_recomputes_over_a_damaging_link_and_leaves_the_cache_alone(
        cache_server, over_http):
    ns = uuid.uuid4().hex
    expr = dask.delayed(np.arange, pure=True)(500.0, dask_key_name="r")
    (cold,) = cached_compute(expr, cache=cache_server.url, namespace=ns, policy="all",
                             scheduler="threads")
    with corrupting_proxy(cache_server.url) as url:
        (value,) = cached_compute(expr, cache=url, namespace=ns, scheduler="threads",
                                  policy="none")  # stores nothing again
    np.testing.assert_array_equal(value, cold)
    assert last_report().retried  # refused, recomputed
    (again,) = cached_compute(expr, cache=cache_server.url, namespace=ns,
                              scheduler="threads")
    np.testing.assert_array_equal(again, cold)
    report = last_report()
    assert report.loaded == 1 and report.computed == 0 and not report.retried


@pytest.mark.slow
def test_server_errors_and_refusals_map_the_same_for_every_request(fresh_server):
    server = fresh_server(tokens=f"read:r{HEX},write:w{HEX}")
    anonymous = CacheClient(server.url)
    for call in (lambda: anonymous.lookup([_hash()]), lambda: anonymous.get(_hash()),
                 lambda: anonymous.stats(), lambda: anonymous.entry(_hash())):
        with pytest.raises(CacheAccessDenied) as caught:
            call()
        assert caught.value.status == 401 and "result-cache.token" in caught.value.hint
    down = CacheClient(f"http://127.0.0.1:{free_port()}")
    for call in (lambda: down.lookup([_hash()]), lambda: down.get(_hash())):
        with pytest.raises(CacheUnavailable):
            call()


def test_a_missing_entry_is_unavailable_not_corrupt(cache_server):
    with pytest.raises(CacheEntryUnavailable) as caught:
        CacheClient(cache_server.url).get(_hash())
    assert type(caught.value) is CacheEntryUnavailable and caught.value.reason == "not found"


@pytest.mark.slow
def test_a_load_after_the_server_dropped_the_kept_alive_connection_connects_again(
        cache_server, over_http):
    """Loads keep one connection per thread alive between requests; when the server has
    closed it meanwhile (uvicorn drops idle connections after 5 s), the next load opens a
    new one instead of failing."""
    client = CacheClient(cache_server.url)
    task_hash = _hash()
    value = np.arange(300_000.0)
    assert client.put(task_hash, value, 1.0, "label")
    np.testing.assert_array_equal(client.get(task_hash), value)
    time.sleep(6)
    np.testing.assert_array_equal(client.get(task_hash), value)
    with pytest.raises(CacheEntryUnavailable):  # the same connection after a 404
        client.get(_hash())
    np.testing.assert_array_equal(client.get(task_hash), value)
