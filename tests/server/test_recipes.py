"""Recipes over HTTP and ``why`` on bad input (docs/design/hashing.md, "Recipes and why"):
one real server on the session's real Redis, with a prefix of its own to reach into."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import dask
import httpx
import numpy as np
import pytest
import redis

from cache_server.launch import RunningServer, start_server
from client_lib import CacheClient, cached_compute, why
from client_lib.plan.runs import flush_posts
from client_lib.transport.staging import DIRECT_WRITE_MIN_BYTES

PREFIX = f"why-{uuid.uuid4().hex[:8]}:"


@pytest.fixture(scope="module")
def server(tmp_path_factory, redis_url) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("recipes"), redis_url=redis_url,
                           redis_prefix=PREFIX)
    try:
        yield running
    finally:
        running.stop()


def why_bad_input_unrecorded(x):
    return x + 1


def why_bad_input_unparsable(x):
    return x + 2


def why_bad_input_evicted(x):
    return x + 3


def why_bad_input_new(x):
    return x + 4


def why_bad_input_expires(x):
    return x + 5


def _compute(server, ns, *values, recipes=True):
    with dask.config.set({"result-cache.recipes": recipes}):
        cached_compute(*values, cache=server.url, namespace=ns, policy="all",
                       scheduler="sync")
    assert flush_posts(30)


@pytest.mark.slow
def test_why_on_entries_without_or_with_broken_recipes(server, redis_url):
    ns = uuid.uuid4().hex
    delayed = dask.delayed
    _compute(server, ns, delayed(why_bad_input_unrecorded)(1), recipes=False)
    _compute(server, ns, delayed(why_bad_input_unparsable)(1), delayed(why_bad_input_evicted)(1))
    # Every recipe recorded so far is the two of the second run; break one.
    r = redis.Redis.from_url(redis_url)
    keys = sorted(r.scan_iter(f"{PREFIX}recipe:*"))
    assert len(keys) == 2
    records = {k: r.get(k) for k in keys}
    broken = next(k for k, v in records.items() if b"why_bad_input_unparsable" in v)
    r.set(broken, b'{"hash": "' + b"0" * 32 + b'", "recipe": "{not json"}')
    evicted = next(v for k, v in records.items() if k != broken)
    CacheClient(server.url).delete(evicted.split(b'"hash": "')[1][:32].decode())

    with pytest.warns(RuntimeWarning, match="1 stored explanations could not be read"):
        found = why(delayed(why_bad_input_unrecorded)(2), delayed(why_bad_input_unparsable)(2),
                    delayed(why_bad_input_evicted)(1), delayed(why_bad_input_new)(1),
                    delayed(why_bad_input_unrecorded)(1), cache=server.url, namespace=ns)
    reasons = {(r.label, r.status): r.reason for r in found}
    assert reasons == {
        ("why_bad_input_unrecorded", "compute"): "stored before explanations were recorded",
        ("why_bad_input_unrecorded", "cached"): "cached",
        ("why_bad_input_unparsable", "compute"): "stored before explanations were recorded",
        ("why_bad_input_evicted", "compute"): "evicted",
        ("why_bad_input_new", "compute"): "never computed",
    }
    assert found.unreadable == 1 and "could not be read" in str(found)

    with dask.annotate(cache_ttl=1):
        expiring = delayed(why_bad_input_expires)(1)
    _compute(server, ns, expiring)
    time.sleep(1.5)  # past its lifetime: a miss, and the recipe says why
    found = why(expiring, delayed(time.time)(), cache=server.url, namespace=ns)
    assert [(r.status, r.reason) for r in found] == [
        ("compute", "expired"),
        ("compute", "volatile: time.time is impure (the clock, entropy or the process)")]


@pytest.mark.slow
def test_recipes_are_validated_bounded_and_kept_only_for_stored_entries(server):
    slot, digest = "a" * 32, "0123456789abcdef"
    good = {"f": [["f", digest]], "a": [["0", digest]], "i": [["data.csv", 3, 4]],
            "d": [digest], "v": ["4"]}

    def post(recipe: dict, task_hash: str = "b" * 32) -> httpx.Response:
        return httpx.post(f"{server.url}/v1/recipes", json={"recipes": [
            {"slot": slot, "hash": task_hash, "label": "f", "recipe": recipe}]})

    assert post(good).json() == {"recorded": 0}  # no such entry: dropped
    assert post({**good, "value": [1, 2, 3]}).status_code == 422  # no values
    assert post({**good, "a": [[str(i), digest] for i in range(33)]}).status_code == 422
    assert post({**good, "f": [["f", "not hex"]]}).status_code == 422
    assert post({**good, "v": ["x" * 250] * 8, "f": [["y" * 250, digest]] * 32}
                ).status_code == 422  # over MAX_RECIPE_BYTES of JSON
    answer = httpx.post(f"{server.url}/v1/recipes/previous",
                        json={"slots": [slot], "labels": []}).json()
    assert answer == {"previous": {}, "unrecorded": []}


def why_large_result(n):
    return np.ones(n)


@pytest.mark.slow
def test_an_entry_written_in_place_has_its_recipe_too(server):
    ns = uuid.uuid4().hex
    n = DIRECT_WRITE_MIN_BYTES // 8 + 1  # a direct write into the server's staging area
    _compute(server, ns, dask.delayed(why_large_result)(n))
    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'route="/v1/objects/{task_hash}/commit",status="201"' in metrics
    assert [r.reason for r in why(dask.delayed(why_large_result)(n), cache=server.url,
                                  namespace=ns)] == ["cached"]
    found = why(dask.delayed(why_large_result)(n + 1), cache=server.url, namespace=ns)
    assert [r.reason for r in found] == ["argument 0 changed"]
