"""The eviction score (pure), and the cap, pins and 507 on a real server with exact budgets."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache_server.index.eviction import eviction_rank, eviction_score
from tests.conftest import FreshServer
from tests.server.wire import encode_array, encode_pickle, new_hash, pieces, put

DAY = 86_400.0
entries = st.tuples(st.floats(0, 1e5), st.integers(0, 2**40), st.floats(1e9, 2e9))


@settings(max_examples=200, deadline=None)
@given(entries, entries, st.floats(0, 1e7))
def test_rank_orders_like_the_decayed_score_at_any_moment(a, b, later) -> None:
    now = max(a[2], b[2]) + later
    ranks = eviction_rank(*a, DAY), eviction_rank(*b, DAY)
    scores = eviction_score(*a, DAY, now), eviction_score(*b, DAY, now)
    if abs(ranks[0] - ranks[1]) > 1e-6:
        assert (ranks[0] < ranks[1]) == (scores[0] < scores[1])


def test_score_is_seconds_per_byte_halved_per_half_life() -> None:
    assert eviction_score(10.0, 1000, 5000.0, DAY, 5000.0) == 0.01
    assert eviction_score(10.0, 1000, 5000.0, DAY, 5000.0 + 2 * DAY) == 0.0025
    # 10 s/KB unused for 4 half-lives is worth less than 1 s/KB used now.
    assert eviction_score(10.0, 1000, 0.0, DAY, 4 * DAY) < eviction_score(1.0, 1000, 4 * DAY,
                                                                          DAY, 4 * DAY)


def kib_array(seed: int):
    return encode_array(np.full(125, float(seed)))  # exactly 1000 bytes


@pytest.mark.slow
def test_cap_evicts_cheapest_per_byte_and_never_pinned(fresh_server: FreshServer,
                                                       index_url: str) -> None:
    # On a Redis Cluster the entries fall in different shards: e and f share an object
    # across them (counted once, freed with its last reference).
    server = fresh_server(max_bytes=3500, redis=index_url)
    h = {name: new_hash() for name in "abcdefg"}
    with httpx.Client(base_url=server.url) as client:
        def stored() -> set[str]:
            return {n for n, x in h.items() if client.get(f"/v1/entries/{x}").status_code == 200}

        for name, seconds in (("a", 5.0), ("b", 0.1), ("c", 3.0)):
            assert put(client, h[name], kib_array(ord(name)), compute_seconds=seconds
                       ).status_code == 201
        assert put(client, h["d"], kib_array(4), compute_seconds=1.0).status_code == 201
        assert stored() == {"a", "c", "d"}  # b saved the least per byte
        assert client.post(f"/v1/entries/{h['d']}/pin").json()["pinned"] is True
        assert put(client, h["e"], kib_array(5), compute_seconds=2.0).status_code == 201
        assert stored() == {"a", "d", "e"}  # c (3 s) went before the pinned d (1 s)
        # Equal results are stored once and count once; evicting one entry keeps the object.
        assert put(client, h["f"], kib_array(5), compute_seconds=0.01).status_code == 201
        stats = client.get("/v1/stats").json()
        assert stats["stored_bytes"] == 3000 and stats["bytes"] == 4000
        assert stats["evictions"] == 2 and stats["pinned"] == 1 and stats["max_bytes"] == 3500
        assert put(client, h["g"], kib_array(7), compute_seconds=9.0).status_code == 201
        # f (0.01 s) goes first but frees nothing (e shares its object); then e frees 1000.
        assert stored() == {"a", "d", "g"}
        stats = client.get("/v1/stats").json()
        assert stats["stored_bytes"] == 3000 and stats["evictions"] == 4
        assert "evict" in {e["kind"] for e in client.get("/v1/events").json()["events"]}

        too_big = put(client, new_hash(), encode_array(np.zeros(500)))  # 4000 > 3500
        assert too_big.status_code == 507 and "larger than the cache" in too_big.json()["detail"]
        streamed = client.put(f"/v1/objects/{new_hash()}",
                              content=pieces(encode_pickle(b"x" * 5000).body, 1000),
                              headers=encode_pickle(b"x" * 5000).headers())
        assert streamed.status_code == 507
        assert client.get("/v1/stats").json()["stored_bytes"] <= 3500

        for x in h.values():
            client.post(f"/v1/entries/{x}/pin")
        full = put(client, new_hash(), kib_array(99))
        assert full.status_code == 507 and "pinned" in full.json()["detail"]
        for name in stored():
            assert client.get(f"/v1/objects/{h[name]}").status_code == 200  # reads go on
        assert client.post(f"/v1/entries/{h['d']}/unpin").json()["pinned"] is False
        assert put(client, new_hash(), kib_array(98)).status_code == 201
        assert client.delete(f"/v1/entries/{h['a']}").status_code == 204  # rm beats a pin
        assert client.post(f"/v1/entries/{new_hash()}/pin").status_code == 404
        assert client.post("/v1/entries/nothex/pin").status_code == 422
