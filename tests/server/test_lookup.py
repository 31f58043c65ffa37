"""POST /v1/lookup."""

from __future__ import annotations

import json

import httpx
import numpy as np

from tests.conftest import FreshServer
from tests.server.wire import encode_array, new_hash, put


def test_found_subset_in_request_order_duplicates_once(client: httpx.Client, stats) -> None:
    stored = [new_hash() for _ in range(3)]
    for n, task_hash in enumerate(stored):
        put(client, task_hash, encode_array(np.full(4, n)))
    absent = [new_hash() for _ in range(2)]
    asked = [absent[0], stored[2], stored[0], stored[2], absent[1], absent[0], stored[1]]
    before = stats()
    response = client.post("/v1/lookup", json={"hashes": asked})
    assert response.status_code == 200
    assert response.json() == {"found": [stored[2], stored[0], stored[1]]}
    after = stats()
    assert after["lookups"] - before["lookups"] == 5  # distinct hashes asked
    assert after["misses"] - before["misses"] == 2
    assert after["hits"] == before["hits"]  # hits are counted on GET


def test_empty_lookup(client: httpx.Client) -> None:
    assert client.post("/v1/lookup", json={"hashes": []}).json() == {"found": []}


def test_large_batch(client: httpx.Client) -> None:
    task_hash = new_hash()
    put(client, task_hash, encode_array(np.zeros(1)))
    hashes = [new_hash() for _ in range(20_000)] + [task_hash]
    assert client.post("/v1/lookup", json={"hashes": hashes}).json() == {"found": [task_hash]}


def test_malformed_requests_are_422_without_effects(client: httpx.Client, stats) -> None:
    before = stats()
    bad_bodies = [
        b"{not json",
        b'{"hashes": "abc"}',
        b'{"hashes": [1, 2]}',
        b'{"hash": []}',
        b"[]",
        json.dumps({"hashes": [new_hash(), "Z" * 32]}).encode(),
        json.dumps({"hashes": [new_hash() + "0"]}).encode(),
        # Lengths that add up to 32 each on average, and characters outside ASCII.
        json.dumps({"hashes": [new_hash()[:31], new_hash() + "a"]}).encode(),
        json.dumps({"hashes": [new_hash()[:31] + "\u00e9"]}).encode(),
        json.dumps({"hashes": [new_hash().upper()]}).encode(),
    ]
    for body in bad_bodies:
        response = client.post(
            "/v1/lookup", content=body, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 422, body
        assert isinstance(response.json()["detail"], str) and response.json()["detail"]
    assert stats()["lookups"] == before["lookups"]


def test_too_many_hashes_is_422(fresh_server: FreshServer) -> None:
    server = fresh_server(max_lookup_hashes=3)
    with httpx.Client(base_url=server.url) as client:
        assert client.post("/v1/lookup", json={"hashes": [new_hash()] * 3}).status_code == 200
        response = client.post("/v1/lookup", json={"hashes": [new_hash() for _ in range(4)]})
        assert response.status_code == 422
        assert "limit" in response.json()["detail"]
        assert client.get("/v1/stats").json()["lookups"] == 1
