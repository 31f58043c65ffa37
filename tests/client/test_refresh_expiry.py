"""``refresh=True``, ``result-cache.mode = "read-only"`` and entry expiry, through
``cached_compute`` against a real server."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import dask
import httpx
import pytest

from client_lib import cached_compute, last_report


def stats(server) -> dict:
    return httpx.get(f"{server.url}/v1/stats").json()


def counted(x: int) -> int:
    """x plus 1000 times how often it ran (a recompute shows in the value). The counter's
    path comes from the environment: a path argument would be hashed by its file's
    state, which this function changes."""
    counter = Path(os.environ["COUNTER_FILE"])
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    return x + 1000 * n


@pytest.fixture(autouse=True)
def counter_file(tmp_path, monkeypatch):
    monkeypatch.setenv("COUNTER_FILE", str(tmp_path / "n"))


def run(server, ns: str, task, **kwargs):
    (value,) = cached_compute(task, cache=server.url, namespace=ns, scheduler="threads",
                              **kwargs)
    return value, last_report()


def test_refresh_recomputes_overwrites_and_the_next_run_hits_the_new_value(cache_server,
                                                                          tmp_path):
    ns = uuid.uuid4().hex
    task = dask.delayed(counted, pure=True)(7)
    assert run(cache_server, ns, task)[0] == 1007
    value, report = run(cache_server, ns, task)
    assert value == 1007 and report.loaded == 1
    before = stats(cache_server)["overwrites"]
    value, report = run(cache_server, ns, task, refresh=True)
    assert value == 2007 and report.loaded == 0 and report.computed == 1
    assert stats(cache_server)["overwrites"] == before + 1
    value, report = run(cache_server, ns, task)
    assert value == 2007 and report.loaded == 1  # the refreshed entry
    with dask.config.set({"result-cache.refresh": True}):
        assert run(cache_server, ns, task)[0] == 3007
    assert run(cache_server, ns, task)[0] == 3007


def test_read_only_loads_but_never_stores(cache_server, tmp_path):
    ns = uuid.uuid4().hex
    task = dask.delayed(counted, pure=True)(1)
    before = stats(cache_server)["stores"]
    with dask.config.set({"result-cache.mode": "read-only"}):
        value, report = run(cache_server, ns, task)
    assert value == 1001 and report.store_candidates == 0
    assert stats(cache_server)["stores"] == before
    assert run(cache_server, ns, task)[0] == 2001  # nothing was stored: computed again
    with dask.config.set({"result-cache.mode": "read-only"}):
        value, report = run(cache_server, ns, task)
    assert value == 2001 and report.loaded == 1  # read-only still loads
    with dask.config.set({"result-cache.mode": "sometimes"}), pytest.raises(ValueError):
        run(cache_server, ns, task)


@pytest.mark.slow
def test_an_expired_entry_misses_and_is_replaced(cache_server, tmp_path):
    ns = uuid.uuid4().hex
    with dask.annotate(cache_ttl="1s"):
        task = dask.delayed(counted, pure=True)(3)
    assert run(cache_server, ns, task)[0] == 1003
    value, report = run(cache_server, ns, task)
    assert value == 1003 and report.loaded == 1
    time.sleep(1.3)
    expired = stats(cache_server)["expired"]
    value, report = run(cache_server, ns, task)
    assert value == 2003 and report.loaded == 0 and report.computed == 1
    assert stats(cache_server)["expired"] == expired + 1  # removed when stored anew


def test_a_default_ttl_from_config_and_bad_ttls(cache_server, tmp_path):
    ns = uuid.uuid4().hex
    task = dask.delayed(counted, pure=True)(4)
    with dask.config.set({"result-cache.ttl": "7d"}):
        run(cache_server, ns, task)
    entries = httpx.get(f"{cache_server.url}/v1/entries",
                        params={"label": "counted", "limit": 1000}).json()["entries"]
    lifetimes = [e["expires"] - e["created"] for e in entries if e["expires"]]
    assert any(abs(life - 7 * 86400) < 60 for life in lifetimes)
    with dask.config.set({"result-cache.ttl": "soon"}), pytest.raises(ValueError,
                                                                        match="duration"):
        run(cache_server, ns, dask.delayed(counted, pure=True)(5))
